//! Encoding and decoding: the column lists, PostgreSQL's rows read through
//! [`loops_store::codec::StoredRow`] (instants as BIGINT milliseconds; the decoders are
//! [`loops_store::rows`]'), text the server cannot store, and the id-prefix range scan.

use crate::error::Result;
use crate::session::{Conn, Db};
use loops_core::{Loop, Run};
use loops_store::codec::{corrupt, id_prefix_upper, keep_id_prefix};
use loops_store::{rows, DaemonLease, UnreadableLoop};
use tokio_postgres::types::FromSql;
use tokio_postgres::Row;

pub(crate) use loops_store::codec::{
    encode_state, encode_usage, instant_from_ms, ms, new_id, opt_ms, sat_i64, ID_ATTEMPTS,
};

/// The columns of `loops`, in the order [`loop_from_row`] reads them.
macro_rules! loop_cols {
    () => {
        loops_store::loop_cols!(with_runs_on)
    };
}
pub(crate) use loop_cols;

/// The columns of `runs`, in the order [`run_from_row`] reads them (the same on both backends).
pub(crate) use loops_store::run_cols;

/// The database's clock in milliseconds since the epoch: runners on several hosts judge
/// expiry by this one clock, not by their own.
macro_rules! db_now_ms {
    () => {
        "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    };
}
pub(crate) use db_now_ms;

/// Text for a TEXT column: PostgreSQL cannot store NUL characters (SQLite can), so a
/// run's output containing them keeps every other byte, each NUL shown as U+FFFD.
pub(crate) fn text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        std::borrow::Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// [`text`] of an optional value.
pub(crate) fn opt_text(s: Option<&str>) -> Option<String> {
    s.map(|s| text(s).into_owned())
}

/// A column of any PostgreSQL type, its error naming the column.
pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, idx: usize, col: &str) -> Result<T> {
    Ok(row.try_get(idx).map_err(|e| corrupt(col, e))?)
}

/// A PostgreSQL row as the shared decoders ([`loops_store::rows`]) and typed reads see it.
pub(crate) struct Cols<'a>(pub(crate) &'a Row);

loops_store::stored_row_by!(Cols<'_>, try_get);

/// Decodes a row selected with `loop_cols!()`.
pub(crate) fn loop_from_row(row: &Row) -> Result<Loop> {
    Ok(rows::loop_row(&Cols(row), true)?)
}

/// A loop row of a listing: decoded, or reported in its place ([`rows::listed_loop_row`]).
pub(crate) fn decode_loop_row(row: &Row) -> std::result::Result<Loop, UnreadableLoop> {
    rows::listed_loop_row(&Cols(row), true)
}

/// Decodes a row selected with `run_cols!()`.
pub(crate) fn run_from_row(row: &Row) -> Result<Run> {
    Ok(rows::run_row(&Cols(row))?)
}

/// Decodes a `daemon_lease` row selected in table order without `id`.
pub(crate) fn lease_from_row(row: &Row) -> Result<DaemonLease> {
    Ok(rows::lease_row(&Cols(row))?)
}

/// The rows of `select` (`… WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3`) whose
/// `id` starts with `prefix`, decoded: the range bounds the scan, the filter drops ids
/// that sort inside it without starting with the prefix.
pub(crate) async fn with_id_prefix<T>(
    db: &Db<'_, impl Conn>,
    select: &str,
    prefix: &str,
    limit: usize,
    decode: fn(&Row) -> Result<T>,
    id: fn(&T) -> &str,
) -> Result<Vec<T>> {
    let upper = id_prefix_upper(prefix);
    let rows = db
        .query_as(select, &[&prefix, &upper, &sat_i64(limit as u64)], decode)
        .await?;
    Ok(keep_id_prefix(rows, prefix, id))
}

/// A row type read whole by its id ([`by_id`]): its statement and its decoder.
pub(crate) trait ById: Sized {
    /// `SELECT <the columns decode reads> FROM <its table> WHERE id = $1`.
    const SELECT: &'static str;
    fn decode(row: &Row) -> Result<Self>;
}

/// The `T` with id `id`, decoded (`None`: no such row).
pub(crate) async fn by_id<T: ById>(db: &Db<'_, impl Conn>, id: &str) -> Result<Option<T>> {
    db.query_opt_as(T::SELECT, &[&id], T::decode).await
}

impl ById for Loop {
    const SELECT: &'static str = concat!("SELECT ", loop_cols!(), " FROM loops WHERE id = $1");
    fn decode(row: &Row) -> Result<Self> {
        loop_from_row(row)
    }
}

impl ById for Run {
    const SELECT: &'static str = concat!("SELECT ", run_cols!(), " FROM runs WHERE id = $1");
    fn decode(row: &Row) -> Result<Self> {
        run_from_row(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_replaced() {
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
        assert!(matches!(text("ab"), std::borrow::Cow::Borrowed(_)));
    }
}
