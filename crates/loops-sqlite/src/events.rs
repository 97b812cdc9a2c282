//! The event log (`events`, migration 10): appended inside the transaction of the
//! change it records, read by number, pruned with what it is about.

use crate::codec::{ms, opt_ms, query_all, sat_i64, Cols};
use crate::error::{Error, Result, StoreResult};
use crate::SqliteStore;
use loops_core::event::{Event, EventBody, EventKind, LoopBrief};
use loops_core::{Instant, LoopId, LoopStatus, RunId, WorkflowRunId};
use loops_store::rows;
use loops_store::EventBounds;
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Appends `body` at `now`, inside the caller's transaction.
pub(crate) fn append(conn: &Connection, body: &EventBody, now: Instant) -> Result<()> {
    let data = serde_json::to_string(&body.data).map_err(|e| Error::decode(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO events (kind, loop_id, run_id, workflow_run_id, data_json, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        body.kind.as_str(),
        body.loop_id.as_ref().map(LoopId::as_str),
        body.run_id.as_ref().map(RunId::as_str),
        body.workflow_run_id.as_ref().map(WorkflowRunId::as_str),
        data,
        ms(&now),
    ])?;
    Ok(())
}

/// The brief of a loop as this transaction sees it (`None`: gone).
pub(crate) fn loop_brief(conn: &Connection, id: &LoopId) -> Result<Option<LoopBrief>> {
    let row: Option<(String, String, Option<i64>, Option<i64>)> = conn
        .prepare_cached("SELECT name, status, next_run_at, due_at FROM loops WHERE id = ?1")?
        .query_row([id.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let Some((name, status, next, due)) = row else {
        return Ok(None);
    };
    let at =
        |v: Option<i64>, col: &str| v.map(|v| crate::codec::instant_from_ms(v, col)).transpose();
    Ok(Some(LoopBrief {
        id: id.clone(),
        name,
        status: status
            .parse::<LoopStatus>()
            .map_err(|e| Error::decode(format!("column status: {e}")))?,
        next_run_at: at(next, "next_run_at")?,
        due_at: at(due, "due_at")?,
    }))
}

/// Appends `run.started` / `run.finished` for `run`, with its loop as this transaction
/// left it.
pub(crate) fn append_run(
    conn: &Connection,
    kind: EventKind,
    run: &loops_core::Run,
    now: Instant,
) -> Result<()> {
    let lp = loop_brief(conn, &run.loop_id)?;
    let body = match kind {
        EventKind::RunStarted => EventBody::run_started(run, lp.as_ref()),
        _ => EventBody::run_finished(run, lp.as_ref()),
    };
    append(conn, &body, now)
}

fn event_from_row(row: &Row<'_>) -> Result<Event> {
    Ok(rows::event_row(&Cols(row))?)
}

pub(crate) fn events_after(
    store: &SqliteStore,
    after: u64,
    limit: usize,
) -> StoreResult<Vec<Event>> {
    store.read(|conn| {
        query_all(
            conn,
            "SELECT seq, kind, loop_id, run_id, workflow_run_id, data_json, created_at \
             FROM events WHERE seq > ?1 ORDER BY seq LIMIT +?2",
            params![sat_i64(after), sat_i64(limit as u64)],
            event_from_row,
        )
    })
}

pub(crate) fn event_bounds(store: &SqliteStore) -> StoreResult<EventBounds> {
    store.read(|conn| {
        let oldest: Option<i64> = conn
            .prepare_cached("SELECT MIN(seq) FROM events")?
            .query_row([], |r| r.get(0))?;
        // AUTOINCREMENT keeps the highest number ever given here, also when its row
        // was pruned.
        let latest: Option<i64> = conn
            .prepare_cached("SELECT seq FROM sqlite_sequence WHERE name = 'events'")?
            .query_row([], |r| r.get(0))
            .optional()?;
        let num = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(EventBounds {
            oldest: oldest.map(num),
            latest: latest.map_or(0, num),
        })
    })
}

/// Fills `temp.pruned` (created here when missing) with the ids `fill` selects, then
/// runs `delete_events` (which reads them), inside the caller's transaction; the caller
/// deletes its rows by the same ids and empties the table.
pub(crate) fn prune_with(
    conn: &Connection,
    delete_events: &str,
    fill: &str,
    params: impl rusqlite::Params,
) -> Result<usize> {
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS pruned (id TEXT PRIMARY KEY); DELETE FROM temp.pruned;",
    )?;
    conn.execute(fill, params)?;
    Ok(conn.execute(delete_events, [])?)
}

/// Events of the log a transaction of [`prune_of_runs`] looks at: a range of
/// numbers (the primary key), ≈ 5 ms of the write lock.
const EVENTS_PER_WRITE: i64 = 10_000;

/// Deletes the events of the runs `ids` (deleted runs): the ids go into this
/// connection's `temp.pruned` (the temp database: no write lock on the store), then
/// the log is walked a range of [`EVENTS_PER_WRITE`] numbers per transaction.
pub(crate) fn prune_of_runs(store: &SqliteStore, ids: &[String]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let bounds = store.read(|conn| {
        conn.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS pruned (id TEXT PRIMARY KEY); DELETE FROM temp.pruned;",
        )?;
        let mut insert = conn.prepare_cached("INSERT OR IGNORE INTO temp.pruned (id) VALUES (?1)")?;
        for id in ids {
            insert.execute([id])?;
        }
        let bounds: (Option<i64>, Option<i64>) = conn
            .prepare_cached("SELECT min(seq), max(seq) FROM events")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(bounds)
    });
    let walked = match bounds {
        Ok((Some(first), Some(last))) => {
            let mut from = first - 1;
            let mut walked = Ok(());
            while from < last && walked.is_ok() {
                let to = from.saturating_add(EVENTS_PER_WRITE);
                walked = store
                    .write(None, |tx| {
                        Ok(tx
                            .prepare_cached(
                                "DELETE FROM events WHERE seq > ?1 AND seq <= ?2 \
                                 AND run_id IN (SELECT id FROM temp.pruned)",
                            )?
                            .execute([from, to])?)
                    })
                    .map(drop);
                from = to;
            }
            walked
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    // Emptied whatever happened above: the ids are a prune's, not the connection's.
    let emptied = store.read(|conn| {
        conn.execute("DELETE FROM temp.pruned", [])?;
        Ok(())
    });
    walked.and(emptied)
}

/// Keeps the newest `keep` events: one range of numbers (the primary key), so the
/// deletes by run, workflow run and loop that follow scan a bounded log. Those have no
/// index of their own (migration 11): their keys are random, and three indexes of random
/// keys cost each claim and finalize a written page apiece.
pub(crate) fn trim(conn: &Connection, keep: usize) -> Result<usize> {
    Ok(conn
        .prepare_cached(
            "DELETE FROM events WHERE seq <= \
             (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?1)",
        )?
        .execute([sat_i64(keep as u64)])?)
}

/// Deletes events written before `older_than` (`None`: nothing).
pub(crate) fn prune_older(conn: &Connection, older_than: Option<&Instant>) -> Result<usize> {
    match opt_ms(older_than) {
        Some(before) => Ok(conn
            .prepare_cached("DELETE FROM events WHERE created_at < ?1")?
            .execute([before])?),
        None => Ok(0),
    }
}
