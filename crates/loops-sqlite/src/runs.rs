//! Runs after their claim: the leases of running rows (heartbeat, take-over), the
//! queries over runs, and pruning.

use crate::codec::{ms, query_all, query_first, run_cols, run_from_row, sat_i64, with_id_prefix};
use crate::error::{Error, StoreResult};
use crate::loops::placeholders;
use crate::SqliteStore;
use loops_core::{Instant, LoopId, Run, RunId};
use loops_store::prune::{self, RunCutoffs};
use loops_store::{Fence, PrunePolicy, RunFilter, StoreError};
use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension};

/// After a guarded update touched no row: tells a missing run from a finished one.
pub(crate) fn not_running(conn: &Connection, id: &RunId) -> Error {
    let exists = conn
        .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")
        .and_then(|mut s| s.query_row([id.as_str()], |_| Ok(())).optional());
    match exists {
        Ok(Some(())) => StoreError::NotRunning(id.to_string()).into(),
        Ok(None) => StoreError::RunNotFound(id.to_string()).into(),
        Err(e) => e.into(),
    }
}

pub(crate) fn renew_run_leases(
    store: &SqliteStore,
    runs: &[RunId],
    runner_id: &str,
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<usize> {
    let ids = serde_json::to_string(&runs.iter().map(RunId::as_str).collect::<Vec<_>>())
        .map_err(|e| StoreError::InvalidArgument(format!("run ids: {e}")))?;
    store.write(fence.map(|f| (f, now)), |tx| {
        Ok(tx
            .prepare_cached(
                "UPDATE runs SET \
                   lease_expires_at = ?1 + (SELECT l.lease_ms FROM loops l WHERE l.id = runs.loop_id), \
                   updated_at = ?1 \
                 WHERE status = 'running' AND claimed_by = ?2 \
                   AND id IN (SELECT value FROM json_each(?3))",
            )?
            .execute(params![ms(&now), runner_id, ids])?)
    })
}

pub(crate) fn take_over_run(
    store: &SqliteStore,
    run: &RunId,
    from: Option<&str>,
    runner_id: &str,
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<Run> {
    store.write(fence.map(|f| (f, now)), |tx| {
        match query_first(
            tx,
            concat!(
                "UPDATE runs SET claimed_by = ?3, \
               lease_expires_at = ?4 + (SELECT l.lease_ms FROM loops l WHERE l.id = runs.loop_id), \
               updated_at = ?4 \
             WHERE id = ?1 AND status = 'running' AND claimed_by IS ?2 RETURNING ",
                run_cols!()
            ),
            params![run.as_str(), from, runner_id, ms(&now)],
            run_from_row,
        )? {
            Some(r) => Ok(r),
            None => Err(not_running(tx, run)),
        }
    })
}

pub(crate) fn running_runs(store: &SqliteStore, loop_id: Option<&LoopId>) -> StoreResult<Vec<Run>> {
    // Through the partial index of running rows only, so the cost follows the number
    // of running rows, not the run history; an ORDER BY would let the planner pick
    // the creation-order index and scan every run, so sort here instead.
    let mut runs = store.read(|conn| match loop_id {
        Some(id) => query_all(
            conn,
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs INDEXED BY runs_running_loop WHERE status = 'running' AND loop_id = ?1"
            ),
            [id.as_str()],
            run_from_row,
        ),
        None => query_all(
            conn,
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs INDEXED BY runs_running_loop WHERE status = 'running'"
            ),
            [],
            run_from_row,
        ),
    })?;
    runs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    Ok(runs)
}

pub(crate) fn get_run(store: &SqliteStore, id: &RunId) -> StoreResult<Option<Run>> {
    store.read(|conn| {
        query_first(
            conn,
            concat!("SELECT ", run_cols!(), " FROM runs WHERE id = ?1"),
            [id.as_str()],
            run_from_row,
        )
    })
}

/// See [`loops_store::Store::last_session_run`]; through the `runs_loop_session` index.
pub(crate) fn last_session_run(store: &SqliteStore, loop_id: &LoopId) -> StoreResult<Option<Run>> {
    store.read(|conn| {
        query_first(
            conn,
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE loop_id = ?1 AND session_id IS NOT NULL \
               AND status IN ('succeeded', 'failed', 'timed_out') \
             ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ),
            [loop_id.as_str()],
            run_from_row,
        )
    })
}

/// The statement of [`list_runs`] and its parameters, newest first by creation time
/// (rows created in the same millisecond by insertion, newest first). Each filter is
/// served by an index: `runs_loop_created` for one loop, `runs_status_created` /
/// `runs_loop_status_created` for statuses (migration 6), `runs_created` for a window
/// alone; with labels, the labelled loops come from `loop_labels` first (`CROSS JOIN`
/// fixes that order) and each one's runs from the per-loop indexes. One status keeps
/// the index order; several (or several loops) are sorted after the index search.
pub(crate) fn runs_query(filter: &RunFilter) -> (String, Vec<Value>) {
    let mut labels = filter.labels.clone();
    labels.sort();
    labels.dedup();
    let mut statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
    statuses.sort_unstable();
    statuses.dedup();
    let mut params = Vec::new();
    let mut sql = String::from(concat!("SELECT ", run_cols!()));
    let mut terms = Vec::new();
    if labels.is_empty() {
        sql.push_str(" FROM runs");
    } else {
        sql.push_str(&format!(
            " FROM (SELECT loop_id AS labelled FROM loop_labels WHERE label IN ({}) \
               GROUP BY loop_id HAVING COUNT(*) = {}) AS m \
             CROSS JOIN runs ON runs.loop_id = m.labelled",
            placeholders(labels.len()),
            labels.len()
        ));
        params.extend(labels.into_iter().map(Value::Text));
    }
    if let Some(id) = &filter.loop_id {
        terms.push("runs.loop_id = ?".to_owned());
        params.push(Value::Text(id.as_str().to_owned()));
    }
    if !statuses.is_empty() {
        terms.push(format!("status IN ({})", placeholders(statuses.len())));
        params.extend(statuses.into_iter().map(|s| Value::Text(s.to_owned())));
    }
    if let Some(since) = &filter.since {
        terms.push("created_at >= ?".to_owned());
        params.push(Value::Integer(ms(since)));
    }
    if let Some(until) = &filter.until {
        terms.push("created_at < ?".to_owned());
        params.push(Value::Integer(ms(until)));
    }
    if !terms.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&terms.join(" AND "));
    }
    // LIMIT -1 is SQLite's "no limit".
    sql.push_str(" ORDER BY created_at DESC, runs.rowid DESC LIMIT +?");
    params.push(Value::Integer(
        filter.limit.map_or(-1, |n| sat_i64(n as u64)),
    ));
    (sql, params)
}

pub(crate) fn list_runs(store: &SqliteStore, filter: &RunFilter) -> StoreResult<Vec<Run>> {
    let (sql, params) = runs_query(filter);
    store.read(|conn| query_all(conn, &sql, rusqlite::params_from_iter(params), run_from_row))
}

/// Deletes finished runs (never `running` ones) matching EITHER rule of the policy:
/// - `older_than`: the run finished before that instant;
/// - `keep_per_loop = N`: the run is not among its loop's N newest finished runs
///   (by creation time).
///
/// So a run survives only when it satisfies every rule that is set. With neither
/// rule set nothing is deleted.
pub(crate) fn prune_runs(
    store: &SqliteStore,
    policy: &PrunePolicy,
    dry_run: bool,
) -> StoreResult<usize> {
    let Some(RunCutoffs {
        finished_before: older,
        keep,
    }) = RunCutoffs::of(policy)
    else {
        if let Some(n) = prune::events_to_keep(policy, dry_run) {
            store.write(None, |tx| crate::events::trim(tx, n))?;
        }
        return Ok(0);
    };
    // The window function is only needed for the per-loop rule.
    let candidates = if keep.is_some() {
        "WITH ranked AS ( \
           SELECT id, finished_at, \
                  ROW_NUMBER() OVER (PARTITION BY loop_id ORDER BY created_at DESC, rowid DESC) AS rn \
           FROM runs WHERE status != 'running') \
         SELECT id FROM ranked \
         WHERE (?1 IS NOT NULL AND finished_at < ?1) OR rn > ?2"
    } else {
        "SELECT id FROM runs WHERE status != 'running' AND finished_at < ?1 AND ?2 IS NULL"
    };
    if dry_run {
        return store.read(|conn| {
            let n: i64 = conn
                .prepare_cached(&format!("SELECT COUNT(*) FROM ({candidates})"))?
                .query_row(params![older, keep], |r| r.get(0))?;
            Ok(prune::count(n))
        });
    }
    // The log's size first (a range of its numbers), so that each batch below scans at
    // most that many events.
    if let Some(n) = policy.keep_events {
        store.write(None, |tx| crate::events::trim(tx, n))?;
    }
    // The candidates are read outside any write: ranking every run by its loop is the
    // costly part (seconds over millions of runs), and inside a write transaction it
    // held the database's write lock — every claim, finalize and CLI write of every
    // process waited for it. A finished run never changes again, so a candidate read
    // here is still one when deleted; runs added meanwhile only make more runs
    // candidates, which the next prune deletes.
    let ids: Vec<String> = store.read(|conn| {
        let mut stmt = conn.prepare_cached(candidates)?;
        let rows = stmt.query_map(params![older, keep], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
    })?;
    // Deleted in bounded transactions, so no write waits long behind one: the runs a
    // batch at a time by their keys, then their events a range of the log at a time.
    // A batch that also deleted its runs' events scanned the whole log (it has no
    // index by run, migration 11) and held the write lock ≈ 80 ms; a daemon's claims
    // waited that long behind each one.
    let mut deleted = 0;
    for batch in ids.chunks(PRUNE_BATCH) {
        deleted += store.write(None, |tx| {
            Ok(tx.execute(
                &format!(
                    "DELETE FROM runs WHERE id IN ({}) AND status != 'running'",
                    vec!["?"; batch.len()].join(", ")
                ),
                rusqlite::params_from_iter(batch),
            )?)
        })?;
    }
    // Between the two phases (or after a crash there) the log may name runs that are
    // gone, as it does once a run is pruned by age alone: a reader takes an event for
    // what it says, never as proof that the run exists.
    crate::events::prune_of_runs(store, &ids)?;
    store.write(None, |tx| {
        crate::events::prune_older(tx, policy.older_than.as_ref())
    })?;
    Ok(deleted)
}

/// Runs deleted in one transaction by [`prune_runs`]: ≈ 50 µs each with their
/// indexes, so a batch holds the write lock for about 25 ms.
const PRUNE_BATCH: usize = 500;

/// Runs whose id starts with `prefix`: a primary-key range scan (as for loops).
pub(crate) fn runs_with_id_prefix(
    store: &SqliteStore,
    prefix: &str,
    limit: usize,
) -> StoreResult<Vec<Run>> {
    store.read(|conn| {
        with_id_prefix(
            conn,
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT +?3"
            ),
            prefix,
            limit,
            run_from_row,
            |r| r.id.as_str(),
        )
    })
}

/// Runs created at or after `since`, oldest first, through `runs_created` (or
/// `runs_loop_created` for one loop).
pub(crate) fn runs_created_since(
    store: &SqliteStore,
    since: Instant,
    loop_id: Option<&LoopId>,
    limit: usize,
) -> StoreResult<Vec<Run>> {
    let limit = sat_i64(limit as u64);
    store.read(|conn| match loop_id {
        Some(id) => query_all(
            conn,
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs INDEXED BY runs_loop_created WHERE loop_id = ?1 AND created_at >= ?2 \
                 ORDER BY created_at, rowid LIMIT +?3"
            ),
            params![id.as_str(), ms(&since), limit],
            run_from_row,
        ),
        None => query_all(
            conn,
            concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs INDEXED BY runs_created WHERE created_at >= ?1 \
                 ORDER BY created_at, rowid LIMIT +?2"
            ),
            params![ms(&since), limit],
            run_from_row,
        ),
    })
}
