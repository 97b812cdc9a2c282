//! Set-based claims: a scheduling pass's batch (up to the runner's free capacity, each
//! claim of another loop) claimed in a fixed number of statements, whatever its size:
//! one `SELECT … FOR UPDATE SKIP LOCKED` locks every loop of the batch, one lateral
//! join reads every slot's attempts, one multi-row `INSERT … ON CONFLICT DO NOTHING
//! RETURNING` inserts every winning attempt, and one `UPDATE … FROM unnest(…)`
//! advances every claimed loop. The decisions are those of the one-by-one path
//! (`claims`), made in Rust from the rows read; a claim that is not a plain win (a
//! stale plan, a busy loop, a slot done or running, an insert that found its key
//! taken) is finished by that path, its loop row already locked.

use crate::claims::{claim_with_lock, LockedLoop};
use crate::codec::{get, ms, new_id, opt_ms, run_cols, run_from_row, text};
use crate::error::Result;
use crate::session::{Conn, Db};
use loops_core::event::LoopBrief;
use loops_core::schedule::{self, jitter_delay};
use loops_core::{LoopId, LoopStatus, Run};
use loops_store::{BatchClaim, ClaimOutcome, OnRefusal};
use std::collections::HashMap;

/// Claims `claims` (see [`crate::claims`]'s `set_based`: distinct loops, passing over,
/// one instant and runner) inside the caller's transaction.
pub(crate) async fn claim_set(
    db: &Db<'_, impl Conn>,
    claims: &[BatchClaim],
    epoch: Option<i64>,
) -> Result<(Vec<ClaimOutcome>, HashMap<LoopId, LoopBrief>)> {
    let ids: Vec<&str> = claims.iter().map(|c| c.request.loop_id.as_str()).collect();
    let mut locked = lock_all(db, &ids).await?;
    let mut briefs = HashMap::new();
    let mut out: Vec<Option<ClaimOutcome>> = (0..claims.len()).map(|_| None).collect();

    // Loops not locked: another runner holds the row (theirs), or it is gone.
    let missing: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !locked.contains_key(*id))
        .collect();
    if !missing.is_empty() {
        let rows = db
            .query(
                "SELECT id FROM loops WHERE id = ANY($1::text[])",
                &[&missing],
            )
            .await?;
        let exist: Vec<String> = rows
            .iter()
            .map(|r| get::<String>(r, 0, "id"))
            .collect::<Result<_>>()?;
        for (i, id) in ids.iter().enumerate() {
            if !locked.contains_key(*id) {
                out[i] = Some(if exist.iter().any(|e| e == id) {
                    ClaimOutcome::Moved
                } else {
                    ClaimOutcome::NotActive
                });
            }
        }
    }

    // The claims whose plan still holds: the loop is active and points at (or before)
    // one of the planned slots. The others go the one-by-one way.
    let mut fresh = Vec::with_capacity(claims.len());
    let mut slow = Vec::new();
    for (i, claim) in claims.iter().enumerate() {
        let Some(lp) = locked.get(claim.request.loop_id.as_str()) else {
            continue;
        };
        if lp.status != LoopStatus::Active.as_str() {
            out[i] = Some(ClaimOutcome::NotActive);
            continue;
        }
        let OnRefusal::PassOver { skip_slots } = &claim.on_refusal else {
            slow.push(i);
            continue;
        };
        let last = skip_slots
            .iter()
            .map(ms)
            .chain(std::iter::once(ms(&claim.request.scheduled_for)))
            .max()
            .unwrap_or(i64::MIN);
        let pointer = lp.retry_for.or(lp.next_run_at);
        // A stale plan, a loop requiring runner labels, or a pooled agent (whose
        // account is chosen at claim): the one-by-one way. (`accountPool` is written
        // only when not empty; a prompt that quotes it only costs the fast path.)
        if pointer.is_none_or(|p| p > last)
            || lp.runs_on != "[]"
            || lp.target_json.contains("\"accountPool\"")
        {
            slow.push(i);
        } else {
            fresh.push(i);
        }
    }

    // Every fresh claim's slot state in one statement.
    let loops_of: Vec<&str> = fresh.iter().map(|&i| ids[i]).collect();
    let slots_of: Vec<i64> = fresh
        .iter()
        .map(|&i| ms(&claims[i].request.scheduled_for))
        .collect();
    let counts = if fresh.is_empty() {
        Vec::new()
    } else {
        db.query(
            "SELECT q.n, c.busy, c.running, c.done, c.last \
             FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(l, s, n) \
             CROSS JOIN LATERAL ( \
               SELECT COUNT(*) FILTER (WHERE status = 'running') AS busy, \
                      COUNT(*) FILTER (WHERE scheduled_for = q.s AND status = 'running') AS running, \
                      COUNT(*) FILTER (WHERE scheduled_for = q.s \
                                         AND status IN ('succeeded', 'skipped')) AS done, \
                      COALESCE(MAX(attempt) FILTER (WHERE scheduled_for = q.s), 0) AS last \
               FROM runs WHERE loop_id = q.l AND (scheduled_for = q.s OR status = 'running')) c \
             ORDER BY q.n",
            &[&loops_of, &slots_of],
        )
        .await?
    };

    // The plain wins, inserted together; everything else the one-by-one way.
    struct Win {
        index: usize,
        id: String,
        attempt: i64,
        due_at: Option<i64>,
    }
    let mut wins = Vec::with_capacity(fresh.len());
    for (row, &i) in counts.iter().zip(&fresh) {
        let req = &claims[i].request;
        let Some(lp) = locked.get(ids[i]) else {
            continue;
        };
        let busy: i64 = get(row, 1, "busy")?;
        let running: i64 = get(row, 2, "running")?;
        let done: i64 = get(row, 3, "done")?;
        let last: i64 = get(row, 4, "last")?;
        let plain = !(req.require_no_running && busy > 0)
            && running == 0
            && done == 0
            && last < lp.max_attempts.max(1);
        if !plain {
            slow.push(i);
            continue;
        }
        let slot = ms(&req.scheduled_for);
        let due_at = if lp.retry_for == Some(slot) {
            lp.due_at
        } else {
            let delay = jitter_delay(&req.loop_id, req.scheduled_for, lp.jitter_ms);
            Some(slot.saturating_add(i64::try_from(delay).unwrap_or(0)))
        };
        wins.push(Win {
            index: i,
            id: new_id(),
            attempt: last + 1,
            due_at,
        });
    }

    if let Some(first) = claims.first() {
        let req = &first.request;
        let now = ms(&req.now);
        let run_ids: Vec<&str> = wins.iter().map(|w| w.id.as_str()).collect();
        let loop_ids: Vec<&str> = wins.iter().map(|w| ids[w.index]).collect();
        let names: Vec<String> = wins
            .iter()
            .map(|w| {
                locked
                    .get(ids[w.index])
                    .map(|lp| lp.name.clone())
                    .unwrap_or_default()
            })
            .collect();
        let slots: Vec<i64> = wins
            .iter()
            .map(|w| ms(&claims[w.index].request.scheduled_for))
            .collect();
        let attempts: Vec<i64> = wins.iter().map(|w| w.attempt).collect();
        let leases: Vec<i64> = wins
            .iter()
            .map(|w| {
                let lease = locked.get(ids[w.index]).map_or(0, |lp| lp.lease_ms);
                now.saturating_add(lease)
            })
            .collect();
        let dues: Vec<Option<i64>> = wins.iter().map(|w| w.due_at).collect();
        let rows = if wins.is_empty() {
            Vec::new()
        } else {
            db.query(
                concat!(
                    "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, \
                     source, started_at, claimed_by, lease_expires_at, created_at, updated_at, \
                     due_at, runner_epoch, run_kind, provider, account) \
                     SELECT i, l, n, s, a, 'running', $8, $9, $10, e, $9, $9, d, $11, \
                       loops.target_json::jsonb ->> 'type', ",
                    crate::holds::key_provider!(),
                    ", CASE WHEN (loops.target_json::jsonb ->> 'type') = 'agent' \
                       THEN loops.target_json::jsonb #>> '{account,profile}' END \
                     FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], \
                                 $5::bigint[], $6::bigint[], $7::bigint[]) AS t(i, l, n, s, a, e, d) \
                     JOIN loops ON loops.id = t.l \
                     ON CONFLICT DO NOTHING RETURNING ",
                    run_cols!()
                ),
                &[
                    &run_ids,
                    &loop_ids,
                    &names,
                    &slots,
                    &attempts,
                    &leases,
                    &dues,
                    &req.source.as_str(),
                    &now,
                    &text(&req.runner_id).as_ref(),
                    &epoch,
                ],
            )
            .await?
        };
        let mut inserted: HashMap<String, Run> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let run = run_from_row(row)?;
            inserted.insert(run.loop_id.as_str().to_owned(), run);
        }
        // The claimed loops' advances in one statement.
        let mut adv_ids = Vec::with_capacity(wins.len());
        let mut adv_status = Vec::with_capacity(wins.len());
        let mut adv_next = Vec::with_capacity(wins.len());
        let mut adv_retry = Vec::with_capacity(wins.len());
        let mut adv_due = Vec::with_capacity(wins.len());
        for w in &wins {
            let claim = &claims[w.index];
            match inserted.remove(ids[w.index]) {
                Some(run) => {
                    if let (Some(advance), Some(lp)) = (&claim.advance, locked.get(ids[w.index])) {
                        adv_ids.push(ids[w.index]);
                        adv_status.push(advance.status.as_str());
                        adv_next.push(opt_ms(advance.next_run_at.as_ref()));
                        adv_retry.push(opt_ms(advance.retry_scheduled_for.as_ref()));
                        adv_due.push(opt_ms(
                            schedule::due_at(
                                &claim.request.loop_id,
                                advance.next_run_at,
                                advance.retry_scheduled_for,
                                lp.jitter_ms,
                            )
                            .as_ref(),
                        ));
                    }
                    out[w.index] = Some(ClaimOutcome::Claimed(Box::new(run)));
                }
                // The key was taken after all (or the id was): the one-by-one way says.
                None => slow.push(w.index),
            }
        }
        if !adv_ids.is_empty() {
            // The advanced loops as their `run.started` events show them.
            let rows = db
                .query(
                    "UPDATE loops SET status = t.st, next_run_at = t.nx, \
                       retry_scheduled_for = t.rt, due_at = t.du, updated_at = $6 \
                     FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) \
                       AS t(id, st, nx, rt, du) \
                     WHERE loops.id = t.id \
                     RETURNING loops.id, loops.name, loops.status, loops.next_run_at, loops.due_at",
                    &[&adv_ids, &adv_status, &adv_next, &adv_retry, &adv_due, &now],
                )
                .await?;
            for row in &rows {
                let brief = crate::events::brief_from_row(row)?;
                briefs.insert(brief.id.clone(), brief);
            }
        }
    }

    slow.sort_unstable();
    for i in slow {
        if let Some(lp) = locked.remove(ids[i]) {
            out[i] = Some(claim_with_lock(db, &claims[i], &lp, epoch).await?);
        }
    }
    let out = out
        .into_iter()
        .map(|o| o.unwrap_or(ClaimOutcome::Moved))
        .collect();
    Ok((out, briefs))
}

/// Locks every loop of `ids` that no other transaction holds (`SKIP LOCKED`).
async fn lock_all(db: &Db<'_, impl Conn>, ids: &[&str]) -> Result<HashMap<String, LockedLoop>> {
    let rows = db
        .query(
            "SELECT id, status, name, max_attempts, lease_ms, jitter_ms, next_run_at, \
             retry_scheduled_for, due_at, runs_on_json, target_json FROM loops \
             WHERE id = ANY($1::text[]) \
             FOR UPDATE SKIP LOCKED",
            &[&ids],
        )
        .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in &rows {
        out.insert(
            get::<String>(row, 0, "id")?,
            LockedLoop {
                status: get(row, 1, "status")?,
                name: get(row, 2, "name")?,
                max_attempts: get(row, 3, "max_attempts")?,
                lease_ms: get(row, 4, "lease_ms")?,
                jitter_ms: u64::try_from(get::<i64>(row, 5, "jitter_ms")?).unwrap_or(0),
                next_run_at: get(row, 6, "next_run_at")?,
                retry_for: get(row, 7, "retry_scheduled_for")?,
                due_at: get(row, 8, "due_at")?,
                runs_on: get(row, 9, "runs_on_json")?,
                target_json: get(row, 10, "target_json")?,
            },
        );
    }
    Ok(out)
}
