//! Encoding and decoding: the column lists, instants as INTEGER milliseconds, typed
//! column reads that name the column they failed on, row decoders, ids, and SQLite's
//! constraint codes.

use crate::error::{Error, Result};
use loops_core::{Instant, Loop, LoopId, Run, RunId, Usage};
use loops_store::{DaemonLease, LeaseHolder, UnreadableLoop};
use rusqlite::types::FromSql;
use rusqlite::{ffi, ErrorCode, Row};
use std::str::FromStr;

/// New ids are retried on the (astronomically unlikely) collision of 48 random bits.
pub(crate) const ID_ATTEMPTS: usize = 8;

/// The columns of `loops`, in the order [`loop_from_row`] reads them.
macro_rules! loop_cols {
    () => {
        "id, name, description, status, schedule_json, target_json, next_run_at, \
         retry_scheduled_for, catch_up, catch_up_limit, overlap, max_attempts, \
         retry_delay_ms, lease_ms, expires_at, created_at, updated_at, jitter_ms, due_at, \
         labels_json, notify_json, ops_json, ops_state_json"
    };
}
pub(crate) use loop_cols;

/// The columns of `runs`, in the order [`run_from_row`] reads them.
macro_rules! run_cols {
    () => {
        "id, loop_id, loop_name, scheduled_for, attempt, status, source, started_at, \
         finished_at, exit_code, duration_ms, stdout, stderr, error, pid, pid_start_time, \
         claimed_by, lease_expires_at, summary, usage_json, created_at, updated_at, due_at, \
         error_output, failure_class, retry_at, session_id, session_note, account"
    };
}
pub(crate) use run_cols;

/// Failure statuses as a SQL list; must match [`loops_core::RunStatus::is_failure`] and
/// the `runs_failed_slot` partial index (SQLite only uses it for an identical term).
macro_rules! failure_statuses {
    () => {
        "('failed', 'timed_out', 'abandoned')"
    };
}
pub(crate) use failure_statuses;

/// Failure classes that are not retried, as a SQL list; must match
/// [`loops_core::failure::FailureClass::is_retried`] (a unit test checks).
macro_rules! not_retried_classes {
    () => {
        "('usage_limit', 'auth', 'context_length')"
    };
}
pub(crate) use not_retried_classes;

pub(crate) fn ms(t: &Instant) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn opt_ms(t: Option<&Instant>) -> Option<i64> {
    t.map(ms)
}

/// `u64` quantities (durations, tokens, start times) saturate at `i64::MAX` in storage.
pub(crate) fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn instant_from_ms(v: i64, col: &str) -> Result<Instant> {
    chrono::DateTime::from_timestamp_millis(v)
        .ok_or_else(|| Error::decode(format!("column {col}: instant {v} out of range")))
}

pub(crate) fn get<T: FromSql>(row: &Row<'_>, idx: usize, col: &str) -> Result<T> {
    row.get(idx)
        .map_err(|e| Error::decode(format!("column {col}: {e}")))
}

pub(crate) fn get_instant(row: &Row<'_>, idx: usize, col: &str) -> Result<Instant> {
    instant_from_ms(get(row, idx, col)?, col)
}

pub(crate) fn get_opt_instant(row: &Row<'_>, idx: usize, col: &str) -> Result<Option<Instant>> {
    get::<Option<i64>>(row, idx, col)?
        .map(|v| instant_from_ms(v, col))
        .transpose()
}

pub(crate) fn get_enum<T: FromStr<Err = String>>(
    row: &Row<'_>,
    idx: usize,
    col: &str,
) -> Result<T> {
    let text: String = get(row, idx, col)?;
    text.parse()
        .map_err(|e| Error::decode(format!("column {col}: {e}")))
}

pub(crate) fn get_opt_enum<T: FromStr<Err = String>>(
    row: &Row<'_>,
    idx: usize,
    col: &str,
) -> Result<Option<T>> {
    get::<Option<String>>(row, idx, col)?
        .map(|text| {
            text.parse()
                .map_err(|e| Error::decode(format!("column {col}: {e}")))
        })
        .transpose()
}

pub(crate) fn get_json<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    idx: usize,
    col: &str,
) -> Result<T> {
    let text: String = get(row, idx, col)?;
    serde_json::from_str(&text).map_err(|e| Error::decode(format!("column {col}: {e}")))
}

pub(crate) fn get_u32(row: &Row<'_>, idx: usize, col: &str) -> Result<u32> {
    let v: i64 = get(row, idx, col)?;
    u32::try_from(v).map_err(|_| Error::decode(format!("column {col}: {v} out of range")))
}

pub(crate) fn get_u64(row: &Row<'_>, idx: usize, col: &str) -> Result<u64> {
    let v: i64 = get(row, idx, col)?;
    u64::try_from(v).map_err(|_| Error::decode(format!("column {col}: {v} is negative")))
}

pub(crate) fn get_opt_u64(row: &Row<'_>, idx: usize, col: &str) -> Result<Option<u64>> {
    get::<Option<i64>>(row, idx, col)?
        .map(|v| {
            u64::try_from(v).map_err(|_| Error::decode(format!("column {col}: {v} is negative")))
        })
        .transpose()
}

/// Decodes a row selected with `loop_cols!()`.
pub(crate) fn loop_from_row(row: &Row<'_>) -> Result<Loop> {
    Ok(Loop {
        id: LoopId::new(get::<String>(row, 0, "id")?),
        name: get(row, 1, "name")?,
        description: get(row, 2, "description")?,
        status: get_enum(row, 3, "status")?,
        schedule: get_json(row, 4, "schedule_json")?,
        target: get_json(row, 5, "target_json")?,
        next_run_at: get_opt_instant(row, 6, "next_run_at")?,
        retry_scheduled_for: get_opt_instant(row, 7, "retry_scheduled_for")?,
        catch_up: get_enum(row, 8, "catch_up")?,
        catch_up_limit: get_u32(row, 9, "catch_up_limit")?,
        overlap: get_enum(row, 10, "overlap")?,
        max_attempts: get_u32(row, 11, "max_attempts")?,
        retry_delay_ms: get_u64(row, 12, "retry_delay_ms")?,
        lease_ms: get_u64(row, 13, "lease_ms")?,
        expires_at: get_opt_instant(row, 14, "expires_at")?,
        jitter_ms: get_u64(row, 17, "jitter_ms")?,
        // SQLite stores no runner labels (it has one daemon, no runners).
        runs_on: Vec::new(),
        due_at: get_opt_instant(row, 18, "due_at")?,
        labels: get_json(row, 19, "labels_json")?,
        notify: get::<Option<String>>(row, 20, "notify_json")?
            .map(|text| {
                serde_json::from_str(&text)
                    .map_err(|e| Error::decode(format!("column notify_json: {e}")))
            })
            .transpose()?,
        ops: get_opt_json(row, 21, "ops_json")?.unwrap_or_default(),
        state: get_opt_json(row, 22, "ops_state_json")?.unwrap_or_default(),
        // Holds are per account, not per loop: the client fills these in.
        held_until: None,
        held_reason: None,
        waiting_for: None,
        created_at: get_instant(row, 15, "created_at")?,
        updated_at: get_instant(row, 16, "updated_at")?,
    })
}

/// A JSON column that may be NULL.
pub(crate) fn get_opt_json<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    idx: usize,
    col: &str,
) -> Result<Option<T>> {
    get::<Option<String>>(row, idx, col)?
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| Error::decode(format!("column {col}: {e}")))
        })
        .transpose()
}

/// A loop's `ops_json`: NULL for the default settings.
pub(crate) fn encode_ops(ops: &loops_core::LoopOps) -> Result<Option<String>> {
    if *ops == loops_core::LoopOps::default() {
        return Ok(None);
    }
    serde_json::to_string(ops)
        .map(Some)
        .map_err(|e| loops_store::StoreError::InvalidArgument(format!("settings: {e}")).into())
}

/// A loop's `ops_state_json`: NULL for a fresh state.
pub(crate) fn encode_state(state: &loops_core::LoopState) -> Result<Option<String>> {
    if state.is_fresh() {
        return Ok(None);
    }
    serde_json::to_string(state)
        .map(Some)
        .map_err(|e| loops_store::StoreError::InvalidArgument(format!("state: {e}")).into())
}

/// A loop row of a listing: decoded, or — when it does not decode — reported in its
/// place rather than as the error of the whole query, so one bad loop never hides or
/// stops the others.
pub(crate) fn decode_loop_row(row: &Row<'_>) -> std::result::Result<Loop, UnreadableLoop> {
    loop_from_row(row).map_err(|e| UnreadableLoop {
        id: LoopId::new(row.get::<_, String>(0).unwrap_or_default()),
        name: row.get::<_, String>(1).unwrap_or_default(),
        error: loops_store::StoreError::from(e).to_string(),
    })
}

/// Decodes a row selected with `run_cols!()`.
pub(crate) fn run_from_row(row: &Row<'_>) -> Result<Run> {
    let pid: Option<i64> = get(row, 14, "pid")?;
    Ok(Run {
        id: RunId::new(get::<String>(row, 0, "id")?),
        loop_id: LoopId::new(get::<String>(row, 1, "loop_id")?),
        loop_name: get(row, 2, "loop_name")?,
        scheduled_for: get_instant(row, 3, "scheduled_for")?,
        attempt: get_u32(row, 4, "attempt")?,
        status: get_enum(row, 5, "status")?,
        source: get_enum(row, 6, "source")?,
        started_at: get_opt_instant(row, 7, "started_at")?,
        finished_at: get_opt_instant(row, 8, "finished_at")?,
        exit_code: get(row, 9, "exit_code")?,
        duration_ms: get_opt_u64(row, 10, "duration_ms")?,
        stdout: get(row, 11, "stdout")?,
        stderr: get(row, 12, "stderr")?,
        error: get(row, 13, "error")?,
        error_output: get(row, 23, "error_output")?,
        pid: pid
            .map(|v| {
                u32::try_from(v).map_err(|_| Error::decode(format!("column pid: {v} out of range")))
            })
            .transpose()?,
        pid_start_time: get_opt_u64(row, 15, "pid_start_time")?,
        claimed_by: get(row, 16, "claimed_by")?,
        lease_expires_at: get_opt_instant(row, 17, "lease_expires_at")?,
        summary: get(row, 18, "summary")?,
        usage: get_usage(row, 19)?,
        created_at: get_instant(row, 20, "created_at")?,
        updated_at: get_instant(row, 21, "updated_at")?,
        due_at: get_opt_instant(row, 22, "due_at")?,
        failure_class: get_opt_enum(row, 24, "failure_class")?,
        retry_at: get_opt_instant(row, 25, "retry_at")?,
        session_id: get(row, 26, "session_id")?,
        session_note: get(row, 27, "session_note")?,
        account: get(row, 28, "account")?,
    })
}

/// Decodes a `daemon_lease` row selected in table order without `id`.
pub(crate) fn lease_from_row(row: &Row<'_>) -> Result<DaemonLease> {
    let pid: i64 = get(row, 1, "pid")?;
    Ok(DaemonLease {
        holder: LeaseHolder {
            runner_id: get(row, 0, "runner_id")?,
            pid: u32::try_from(pid)
                .map_err(|_| Error::decode(format!("column pid: {pid} out of range")))?,
            pid_start_time: get_opt_u64(row, 2, "pid_start_time")?,
            host: get(row, 3, "host")?,
        },
        token: get_u64(row, 4, "token")?,
        acquired_at: get_instant(row, 5, "acquired_at")?,
        heartbeat_at: get_instant(row, 6, "heartbeat_at")?,
        expires_at: get_instant(row, 7, "expires_at")?,
    })
}

/// The `usage_json` column of a run or step run.
pub(crate) fn encode_usage(usage: Option<&Usage>) -> Result<Option<String>> {
    usage
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| Error::invalid(format!("usage: {e}")))
}

/// Reads a `usage_json` column back.
pub(crate) fn get_usage(row: &Row<'_>, idx: usize) -> Result<Option<Usage>> {
    get::<Option<String>>(row, idx, "usage_json")?
        .map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| Error::decode(format!("column usage_json: {e}")))
        })
        .transpose()
}

/// Runs `stmt` and decodes every row.
pub(crate) fn query_all<T, P: rusqlite::Params>(
    stmt: &mut rusqlite::Statement<'_>,
    params: P,
    decode: fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Runs `stmt` and decodes the first row, if any.
pub(crate) fn query_first<T, P: rusqlite::Params>(
    stmt: &mut rusqlite::Statement<'_>,
    params: P,
    decode: fn(&Row<'_>) -> Result<T>,
) -> Result<Option<T>> {
    let mut rows = stmt.query(params)?;
    match rows.next()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// 12 lowercase hex characters (48 random bits): short enough to type.
pub(crate) fn new_id() -> String {
    format!("{:012x}", rand::random::<u64>() >> 16)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_not_retried_classes_are_the_domains() {
        use loops_core::failure::FailureClass;
        let listed: Vec<String> = FailureClass::ALL
            .iter()
            .filter(|c| !c.is_retried())
            .map(|c| format!("'{c}'"))
            .collect();
        assert_eq!(not_retried_classes!(), format!("({})", listed.join(", ")));
    }

    #[test]
    fn ids_are_12_lowercase_hex() {
        for _ in 0..100 {
            let id = new_id();
            assert_eq!(id.len(), 12);
            assert!(id.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        }
    }
}
