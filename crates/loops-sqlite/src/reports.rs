//! Read-only roll-ups over runs: the facts `loops health` judges loops by, and the
//! agent usage `loops usage` adds up. Each goes through an index: per loop, its
//! newest rows (`runs_loop_created`) and the rows of its window (the slot index of
//! the `UNIQUE (loop_id, scheduled_for, attempt)` constraint, read without touching
//! the table); usage through the partial indexes of rows that carry usage.

use crate::codec::{
    failure_statuses, get, get_enum, get_instant, get_opt_instant, get_usage, instant_from_ms, ms,
    sat_i64,
};
use crate::error::{Result, StoreResult};
use crate::SqliteStore;
use loops_core::health::{RunBrief, RunFacts};
use loops_core::{Instant, LoopId, RunStatus, StepId, WorkflowId};
use loops_store::{UsageRow, UsageSource};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// The columns of a [`RunBrief`], then the row's rowid (to order rows created in the
/// same millisecond).
const BRIEF_COLS: &str =
    "scheduled_for, attempt, status, started_at, finished_at, created_at, error, rowid";

fn brief_from_row(row: &Row<'_>) -> Result<(RunBrief, i64)> {
    Ok((
        RunBrief {
            scheduled_for: get_instant(row, 0, "scheduled_for")?,
            attempt: crate::codec::get_u32(row, 1, "attempt")?,
            status: get_enum(row, 2, "status")?,
            started_at: get_opt_instant(row, 3, "started_at")?,
            finished_at: get_opt_instant(row, 4, "finished_at")?,
            created_at: get_instant(row, 5, "created_at")?,
            error: get(row, 6, "error")?,
        },
        get(row, 7, "rowid")?,
    ))
}

pub(crate) fn run_facts(
    store: &SqliteStore,
    loops: &[LoopId],
    window: (Instant, Instant),
    recent: usize,
) -> StoreResult<Vec<RunFacts>> {
    store.read(|conn| {
        loops
            .iter()
            .map(|id| loop_facts(conn, id, window, recent))
            .collect()
    })
}

fn loop_facts(
    conn: &Connection,
    id: &LoopId,
    (from, to): (Instant, Instant),
    recent: usize,
) -> Result<RunFacts> {
    let id = id.as_str();
    let mut facts = RunFacts::default();
    let mut rows = Vec::new();
    {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {BRIEF_COLS} FROM runs WHERE loop_id = ?1 \
             ORDER BY created_at DESC, rowid DESC LIMIT ?2"
        ))?;
        let mut query = stmt.query(params![id, sat_i64(recent as u64)])?;
        while let Some(row) = query.next()? {
            rows.push(brief_from_row(row)?);
        }
    }
    let success_at = rows
        .iter()
        .position(|(r, _)| r.status == RunStatus::Succeeded);
    match success_at {
        // The newest success is among the newest rows: so are the failures after it.
        Some(i) => {
            facts.last_success = Some(rows[i].0.clone());
            facts.failures_since_success = rows[..i]
                .iter()
                .filter(|(r, _)| r.status.is_failure())
                .count() as u64;
        }
        // Fewer rows than asked for: that is the whole history, without a success.
        None if rows.len() < recent => {
            facts.failures_since_success =
                rows.iter().filter(|(r, _)| r.status.is_failure()).count() as u64;
        }
        // Only failures (and skips) among the newest rows: look further back.
        None => {
            let last = conn
                .prepare_cached(&format!(
                    "SELECT {BRIEF_COLS} FROM runs WHERE loop_id = ?1 AND status = 'succeeded' \
                     ORDER BY created_at DESC, rowid DESC LIMIT 1"
                ))?
                .query_row([id], |row| Ok(brief_from_row(row)))
                .optional()?
                .transpose()?;
            facts.failures_since_success = match &last {
                Some((success, rowid)) => conn
                    .prepare_cached(concat!(
                        "SELECT COUNT(*) FROM runs WHERE loop_id = ?1 AND created_at >= ?2 \
                         AND (created_at > ?2 OR rowid > ?3) AND status IN ",
                        failure_statuses!()
                    ))?
                    .query_row(params![id, ms(&success.created_at), rowid], |r| {
                        r.get::<_, i64>(0)
                    })?,
                // Through the partial index of failed attempts.
                None => conn
                    .prepare_cached(concat!(
                        "SELECT COUNT(*) FROM runs WHERE loop_id = ?1 AND status IN ",
                        failure_statuses!()
                    ))?
                    .query_row([id], |r| r.get::<_, i64>(0))?,
            }
            .try_into()
            .unwrap_or(0);
            facts.last_success = last.map(|(r, _)| r);
        }
    }
    facts.recent = rows.into_iter().map(|(r, _)| r).collect();

    // The window's slots, from the slot index alone.
    {
        let mut stmt = conn.prepare_cached(
            "SELECT DISTINCT scheduled_for FROM runs \
             WHERE loop_id = ?1 AND scheduled_for >= ?2 AND scheduled_for <= ?3 \
             ORDER BY scheduled_for",
        )?;
        let mut query = stmt.query(params![id, ms(&from), ms(&to)])?;
        while let Some(row) = query.next()? {
            facts
                .window_slots
                .push(instant_from_ms(row.get(0)?, "scheduled_for")?);
        }
    }
    facts.window_skipped = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM runs WHERE loop_id = ?1 AND status = 'skipped' \
             AND scheduled_for >= ?2 AND scheduled_for <= ?3",
        )?
        .query_row(params![id, ms(&from), ms(&to)], |r| r.get::<_, i64>(0))?
        .try_into()
        .unwrap_or(0);
    facts.oldest_slot = conn
        .prepare_cached("SELECT MIN(scheduled_for) FROM runs WHERE loop_id = ?1")?
        .query_row([id], |r| r.get::<_, Option<i64>>(0))?
        .map(|v| instant_from_ms(v, "scheduled_for"))
        .transpose()?;
    Ok(facts)
}

pub(crate) fn usage_since(store: &SqliteStore, since: Instant) -> StoreResult<Vec<UsageRow>> {
    store.read(|conn| {
        let mut out = Vec::new();
        let mut stmt = conn.prepare_cached(
            "SELECT loop_id, loop_name, finished_at, usage_json FROM runs \
             WHERE usage_json IS NOT NULL AND finished_at >= ?1",
        )?;
        let mut rows = stmt.query([ms(&since)])?;
        while let Some(row) = rows.next()? {
            if let Some(usage) = get_usage(row, 3)? {
                out.push(UsageRow {
                    source: UsageSource::Run {
                        loop_id: LoopId::new(get::<String>(row, 0, "loop_id")?),
                        loop_name: get(row, 1, "loop_name")?,
                    },
                    finished_at: get_instant(row, 2, "finished_at")?,
                    usage,
                });
            }
        }
        let mut stmt = conn.prepare_cached(
            "SELECT r.workflow_id, r.workflow_name, s.step_id, r.loop_id, s.finished_at, s.usage_json \
             FROM workflow_step_runs s JOIN workflow_runs r ON r.id = s.workflow_run_id \
             WHERE s.usage_json IS NOT NULL AND s.finished_at >= ?1",
        )?;
        let mut rows = stmt.query([ms(&since)])?;
        while let Some(row) = rows.next()? {
            if let Some(usage) = get_usage(row, 5)? {
                out.push(UsageRow {
                    source: UsageSource::Step {
                        workflow_id: WorkflowId::new(get::<String>(row, 0, "workflow_id")?),
                        workflow_name: get(row, 1, "workflow_name")?,
                        step_id: StepId::new(get::<String>(row, 2, "step_id")?),
                        loop_id: get::<Option<String>>(row, 3, "loop_id")?.map(LoopId::new),
                    },
                    finished_at: get_instant(row, 4, "finished_at")?,
                    usage,
                });
            }
        }
        out.sort_by_key(|r| r.finished_at);
        Ok(out)
    })
}
