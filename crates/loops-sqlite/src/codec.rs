//! Encoding and decoding: the column lists, SQLite's rows read through
//! [`loops_store::codec::StoredRow`] (instants as INTEGER milliseconds; the decoders are
//! [`loops_store::rows`]'), and SQLite's constraint codes.

use crate::error::{Error, Result};
use loops_core::{Loop, Run};
use loops_store::codec::{corrupt, id_prefix_upper, keep_id_prefix};
use loops_store::{rows, DaemonLease, UnreadableLoop};
use rusqlite::types::{FromSql, ToSql};
use rusqlite::{ffi, Connection, ErrorCode, Row};

pub(crate) use loops_store::codec::{
    encode_state, encode_usage, instant_from_ms, ms, new_id, opt_ms, sat_i64, ID_ATTEMPTS,
};

/// The columns of `loops`, in the order [`loop_from_row`] reads them.
macro_rules! loop_cols {
    () => {
        loops_store::loop_cols!()
    };
}
pub(crate) use loop_cols;

/// The columns of `runs`, in the order [`run_from_row`] reads them (the same on both backends).
pub(crate) use loops_store::run_cols;

/// Failure statuses as a SQL list ([`loops_store::failure_statuses`]).
pub(crate) use loops_store::failure_statuses;

/// A column of any SQLite type, its error naming the column.
pub(crate) fn get<T: FromSql>(row: &Row<'_>, idx: usize, col: &str) -> Result<T> {
    Ok(row.get(idx).map_err(|e| corrupt(col, e))?)
}

/// A SQLite row as the shared decoders ([`loops_store::rows`]) and typed reads see it.
pub(crate) struct Cols<'a, 's>(pub(crate) &'a Row<'s>);

loops_store::stored_row_by!(Cols<'_, '_>, get);

/// Decodes a row selected with `loop_cols!()` (no runner labels on SQLite).
pub(crate) fn loop_from_row(row: &Row<'_>) -> Result<Loop> {
    Ok(rows::loop_row(&Cols(row), false)?)
}

/// A loop row of a listing: decoded, or reported in its place ([`rows::listed_loop_row`]).
pub(crate) fn decode_loop_row(row: &Row<'_>) -> std::result::Result<Loop, UnreadableLoop> {
    rows::listed_loop_row(&Cols(row), false)
}

/// Decodes a row selected with `run_cols!()`.
pub(crate) fn run_from_row(row: &Row<'_>) -> Result<Run> {
    Ok(rows::run_row(&Cols(row))?)
}

/// Decodes a `daemon_lease` row selected in table order without `id`.
pub(crate) fn lease_from_row(row: &Row<'_>) -> Result<DaemonLease> {
    Ok(rows::lease_row(&Cols(row))?)
}

/// Runs `sql` (prepared once per connection) and decodes every row.
pub(crate) fn query_all<T, P: rusqlite::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
    decode: fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Runs `sql` (prepared once per connection) and decodes the first row, if any.
pub(crate) fn query_first<T, P: rusqlite::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
    decode: fn(&Row<'_>) -> Result<T>,
) -> Result<Option<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    match rows.next()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// The rows of `select` (`… WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT +?3`) whose
/// `id` starts with `prefix`, decoded: a primary-key range scan under the binary
/// collation ([`id_prefix_upper`], [`keep_id_prefix`]).
pub(crate) fn with_id_prefix<T>(
    conn: &Connection,
    select: &str,
    prefix: &str,
    limit: usize,
    decode: fn(&Row<'_>) -> Result<T>,
    id: fn(&T) -> &str,
) -> Result<Vec<T>> {
    let upper = id_prefix_upper(prefix);
    let rows = query_all(
        conn,
        select,
        rusqlite::params![prefix, upper, sat_i64(limit as u64)],
        decode,
    )?;
    Ok(keep_id_prefix(rows, prefix, id))
}

/// Runs the insert `sql` (prepared once per connection; `?1` is the new row's id,
/// `params` the rest) with a fresh id until one is free, at most [`ID_ATTEMPTS`]
/// draws, and decodes the row it returns. A constraint error that `conflict` names
/// (the input's, not the id's) ends it with that error; another unique violation is an
/// id collision and draws again.
pub(crate) fn insert_with_new_id<T>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToSql],
    what: &str,
    decode: fn(&Row<'_>) -> Result<T>,
    conflict: impl Fn(&rusqlite::Error) -> Option<Error>,
) -> Result<T> {
    let mut stmt = conn.prepare_cached(sql)?;
    for _ in 0..ID_ATTEMPTS {
        let id = new_id();
        let mut with_id: Vec<&dyn ToSql> = Vec::with_capacity(params.len() + 1);
        with_id.push(&id);
        with_id.extend_from_slice(params);
        let mut rows = stmt.query(with_id.as_slice())?;
        match rows.next() {
            Ok(Some(row)) => return decode(row),
            Ok(None) => break,
            Err(e) => {
                if let Some(err) = conflict(&e) {
                    return Err(err);
                }
                if !is_unique_violation(&e) {
                    return Err(e.into());
                }
            }
        }
    }
    Err(Error::ids_exhausted(what))
}

fn constraint_code(e: &rusqlite::Error) -> Option<i32> {
    match e {
        rusqlite::Error::SqliteFailure(err, _) if err.code == ErrorCode::ConstraintViolation => {
            Some(err.extended_code)
        }
        _ => None,
    }
}

pub(crate) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        constraint_code(e),
        Some(ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
    )
}

pub(crate) fn is_foreign_key_violation(e: &rusqlite::Error) -> bool {
    constraint_code(e) == Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}
