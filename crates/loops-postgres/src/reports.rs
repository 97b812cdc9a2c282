//! Read-only roll-ups over runs: the facts `loops health` judges loops by, and the
//! agent usage `loops usage` adds up. Each goes through an index (migration 3): per
//! loop, its newest rows (`runs_loop_recent`) and the rows of its window (the slot
//! index of the `runs_slot_attempt` key, and the partial index of skipped rows); usage
//! through the partial indexes of rows that carry usage.

use crate::codec::{get, instant_from_ms, ms, sat_i64, Cols};
use crate::error::{Error, Result};
use crate::session::{Conn, Db};
use loops_core::health::{FactsQuery, RecentRun, RunBrief, RunFacts, SlotRows};
use loops_core::{Instant, RunStatus};
use loops_store::codec::StoredRow;
use loops_store::rows::{usage_run_row, usage_step_row};
use loops_store::UsageRow;
use tokio_postgres::Row;

/// The columns of a [`RunBrief`], then its error.
const BRIEF_COLS: &str =
    "created_at, scheduled_for, attempt, status, started_at, finished_at, error, failure_class";
/// Newest first: by creation, then (rows created in the same millisecond, like a
/// skipped slot and the claim after it) by slot and attempt — `runs_loop_recent`'s order.
const NEWEST_FIRST: &str = "ORDER BY created_at DESC, scheduled_for DESC, attempt DESC";

/// A loop's oldest slot, its skipped rows in `[$2, $3]` and — for a grid (`$6` its
/// anchor, `$7` its period) — its distinct slots in `[$4, $5]` on the grid.
const WINDOW_SQL: &str = "SELECT (SELECT MIN(scheduled_for) FROM runs WHERE loop_id = $1), \
       (SELECT COUNT(*) FROM runs WHERE loop_id = $1 AND status = 'skipped' \
          AND scheduled_for >= $2 AND scheduled_for <= $3), \
       CASE WHEN $6::bigint IS NULL THEN NULL ELSE \
         (SELECT COUNT(DISTINCT scheduled_for) FROM runs WHERE loop_id = $1 \
            AND scheduled_for >= $4 AND scheduled_for <= $5 \
            AND (scheduled_for - $6::bigint) % $7::bigint = 0) END";

/// The distinct slots of a loop's rows in `[$2, $3]`.
const LISTED_SQL: &str = "SELECT DISTINCT scheduled_for FROM runs \
     WHERE loop_id = $1 AND scheduled_for >= $2 AND scheduled_for <= $3 \
     ORDER BY scheduled_for";

/// The run status in column `idx`.
fn status(row: &Row, idx: usize) -> Result<RunStatus> {
    get::<String>(row, idx, "status")?
        .parse()
        .map_err(|e| Error::decode(format!("column status: {e}")))
}

/// A brief with its error (kept for a failed attempt only).
fn brief_from_row(row: &Row) -> Result<RunBrief> {
    let opt = |idx: usize, col: &str| Cols(row).opt_instant(idx, col);
    let attempt: i64 = get(row, 2, "attempt")?;
    let status = status(row, 3)?;
    Ok(RunBrief {
        created_at: Cols(row).instant(0, "created_at")?,
        scheduled_for: Cols(row).instant(1, "scheduled_for")?,
        attempt: u32::try_from(attempt)
            .map_err(|_| Error::decode(format!("column attempt: {attempt} out of range")))?,
        status,
        started_at: opt(4, "started_at")?,
        finished_at: opt(5, "finished_at")?,
        error: if status.is_failure() {
            get(row, 6, "error")?
        } else {
            None
        },
        failure_class: if status.is_failure() {
            crate::codec::Cols(row).opt_parsed(7, "failure_class")?
        } else {
            None
        },
    })
}

pub(crate) async fn run_facts(
    db: &Db<'_, impl Conn>,
    queries: &[FactsQuery],
    recent: usize,
) -> Result<Vec<RunFacts>> {
    let mut out = Vec::with_capacity(queries.len());
    for q in queries {
        out.push(loop_facts(db, q, recent).await?);
    }
    Ok(out)
}

async fn loop_facts(db: &Db<'_, impl Conn>, q: &FactsQuery, recent: usize) -> Result<RunFacts> {
    let id = q.loop_id.as_str();
    let mut facts = RunFacts::default();
    let rows = db
        .query(
            &format!("SELECT {BRIEF_COLS} FROM runs WHERE loop_id = $1 {NEWEST_FIRST} LIMIT $2"),
            &[&id, &sat_i64(recent as u64)],
        )
        .await?;
    let mut newest_success = None;
    for row in &rows {
        let brief = brief_from_row(row)?;
        if facts.newest.is_none() {
            facts.newest = Some(brief.clone());
        }
        if brief.status == RunStatus::Succeeded && newest_success.is_none() {
            newest_success = Some((facts.recent.len(), brief.clone()));
        }
        facts.recent.push(RecentRun {
            status: brief.status,
            error: brief.error,
            failure_class: brief.failure_class,
        });
    }
    // Only failures (and skips) among the newest rows: look further back.
    if !loops_store::facts::success_from_recent(&mut facts, newest_success, recent) {
        let last = db
            .query_opt(
                &format!(
                    "SELECT {BRIEF_COLS} FROM runs WHERE loop_id = $1 \
                     AND status = 'succeeded' {NEWEST_FIRST} LIMIT 1"
                ),
                &[&id],
            )
            .await?
            .map(|r| brief_from_row(&r))
            .transpose()?;
        let failures = match &last {
            Some(success) => {
                db.query_one(
                    "SELECT COUNT(*) FROM runs WHERE loop_id = $1 AND created_at >= $2 \
                     AND (created_at, scheduled_for, attempt) > ($2, $3, $4) \
                     AND status IN ('failed', 'timed_out', 'abandoned')",
                    &[
                        &id,
                        &ms(&success.created_at),
                        &ms(&success.scheduled_for),
                        &i64::from(success.attempt),
                    ],
                )
                .await?
            }
            None => {
                db.query_one(
                    "SELECT COUNT(*) FROM runs WHERE loop_id = $1 \
                     AND status IN ('failed', 'timed_out', 'abandoned')",
                    &[&id],
                )
                .await?
            }
        };
        facts.failures_since_success =
            u64::try_from(get::<i64>(&failures, 0, "count")?).unwrap_or(0);
        facts.last_success = last;
    }

    let (from, to) = (ms(&q.window.0), ms(&q.window.1));
    let (slots_from, slots_to) = (ms(&q.slot_window.0), ms(&q.slot_window.1));
    let (anchor, every) = match q.grid {
        Some((anchor, every)) => (Some(ms(&anchor)), Some(sat_i64(every).max(1))),
        None => (None, None),
    };
    let row = db
        .query_one(
            WINDOW_SQL,
            &[&id, &from, &to, &slots_from, &slots_to, &anchor, &every],
        )
        .await?;
    let oldest: Option<i64> = get(&row, 0, "oldest")?;
    let skipped: i64 = get(&row, 1, "skipped")?;
    let on_grid: Option<i64> = get(&row, 2, "on_grid")?;
    facts.oldest_slot = oldest
        .map(|v| instant_from_ms(v, "scheduled_for"))
        .transpose()?;
    facts.window_skipped = u64::try_from(skipped).unwrap_or(0);
    facts.window_slots = match on_grid {
        Some(count) => SlotRows::OnGrid(u64::try_from(count).unwrap_or(0)),
        None => {
            let rows = db.query(LISTED_SQL, &[&id, &slots_from, &slots_to]).await?;
            SlotRows::Listed(
                rows.iter()
                    .map(|r| Cols(r).instant(0, "scheduled_for"))
                    .collect::<loops_store::codec::Result<Vec<_>>>()?,
            )
        }
    };
    Ok(facts)
}

pub(crate) async fn usage_since(db: &Db<'_, impl Conn>, since: Instant) -> Result<Vec<UsageRow>> {
    let mut out = Vec::new();
    let rows = db
        .query(
            "SELECT loop_id, loop_name, finished_at, usage_json FROM runs \
             WHERE usage_json IS NOT NULL AND finished_at >= $1",
            &[&ms(&since)],
        )
        .await?;
    for row in &rows {
        out.extend(usage_run_row(&Cols(row))?);
    }
    let rows = db
        .query(
            "SELECT r.workflow_id, r.workflow_name, s.step_id, r.loop_id, s.finished_at, \
                    s.usage_json \
             FROM workflow_step_runs s JOIN workflow_runs r ON r.id = s.workflow_run_id \
             WHERE s.usage_json IS NOT NULL AND s.finished_at >= $1",
            &[&ms(&since)],
        )
        .await?;
    for row in &rows {
        out.extend(usage_step_row(&Cols(row))?);
    }
    out.sort_by_key(|r| r.finished_at);
    Ok(out)
}

/// How many runs created at or after `since` have each status: every status named
/// (`= ANY`), so each is one range of `runs_status_created`, not a read of every run.
/// No per-hour counters as SQLite keeps (`run_counts`): here several runners write runs
/// at once, and every claim and finalization would contend on the same hour's rows.
pub(crate) async fn run_status_counts(
    db: &Db<'_, impl Conn>,
    since: Instant,
) -> Result<Vec<(RunStatus, u64)>> {
    let statuses: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    let rows = db
        .query(
            "SELECT status, COUNT(*) FROM runs WHERE status = ANY($1) AND created_at >= $2 \
             GROUP BY status ORDER BY status",
            &[&statuses, &ms(&since)],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let n: i64 = get(row, 1, "count")?;
        out.push((status(row, 0)?, u64::try_from(n).unwrap_or(0)));
    }
    Ok(out)
}
