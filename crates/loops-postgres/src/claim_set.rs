//! Set-based claims: a scheduling pass's batch (up to the runner's free capacity, each
//! claim of another loop) claimed in a fixed number of statements and round trips,
//! whatever its size: one `SELECT … FOR UPDATE SKIP LOCKED` locks every loop of the
//! batch and, sent with it, one lateral join reads every slot's attempts; one
//! multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING` inserts every winning attempt
//! and, sent with it, one `UPDATE … FROM unnest(…)` advances each loop whose run's row
//! is there. `BEGIN` and the fence go with the locks (on a connection that has seen
//! the fence pass), and the events with `COMMIT`: a batch is three round trips. The
//! decisions are those of the one-by-one path (`claims`), made in Rust from the rows
//! read; a claim that is not a plain win (a stale plan, a busy loop, a slot done or
//! running, an insert that found its key taken) is finished by that path, its loop row
//! already locked.

use crate::claims::{claim_with_lock, LockedLoop};
use crate::codec::{get, ms, new_id, opt_ms, run_cols, run_from_row, text};
use crate::error::Result;
use crate::session::{Conn, Db};
use loops_core::event::LoopBrief;
use loops_core::schedule::{self, jitter_delay};
use loops_core::{LoopId, LoopStatus, Run};
use loops_store::{BatchClaim, ClaimOutcome, OnRefusal};
use std::collections::HashMap;
use tokio_postgres::types::ToSql;

/// Claims `claims` (see [`crate::claims`]'s `set_based`: distinct loops, passing over,
/// one instant and runner) inside the caller's transaction.
pub(crate) async fn claim_set(
    db: &Db<'_, impl Conn>,
    claims: &[BatchClaim],
    epoch: Option<i64>,
) -> Result<(Vec<ClaimOutcome>, HashMap<LoopId, LoopBrief>)> {
    let ids: Vec<&str> = claims.iter().map(|c| c.request.loop_id.as_str()).collect();
    // The locks and every claim's slot state go to the server together: it reads the
    // slots after the locks are taken (statements run in order), and the rows of a
    // claim that does not go the set-based way are not looked at.
    let slots: Vec<i64> = claims
        .iter()
        .map(|c| ms(&c.request.scheduled_for))
        .collect();
    let [locks, counts] = db
        .query_each([(LOCK_LOOPS, &[&ids]), (SLOT_STATES, &[&ids, &slots])])
        .await?;
    let mut locked = locked_loops(&locks)?;
    let mut briefs = HashMap::new();
    let mut out: Vec<Option<ClaimOutcome>> = (0..claims.len()).map(|_| None).collect();

    // Loops not locked: another runner holds the row (theirs), or it is gone.
    let missing: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !locked.contains_key(*id))
        .collect();
    if !missing.is_empty() {
        let rows = db.query(EXISTING_LOOPS, &[&missing]).await?;
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

    // The plain wins, inserted together; everything else the one-by-one way.
    let mut wins = Vec::with_capacity(fresh.len());
    for &i in &fresh {
        let req = &claims[i].request;
        let (Some(lp), Some(row)) = (locked.get(ids[i]), counts.get(i)) else {
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

    if let Some(first) = claims.first().filter(|_| !wins.is_empty()) {
        let now = ms(&first.request.now);
        let advances = Advances::of(&wins, claims, &ids, &locked);
        let runs = WinColumns::of(&wins, claims, &ids, &locked);
        let req = &first.request;
        let (source, runner) = (req.source.as_str(), text(&req.runner_id));
        let insert: [&(dyn ToSql + Sync); 11] = [
            &runs.ids,
            &runs.loops,
            &runs.names,
            &runs.slots,
            &runs.attempts,
            &runs.leases,
            &runs.dues,
            &source,
            &now,
            &runner.as_ref(),
            &epoch,
        ];
        // The insert and the advances go to the server together: a loop advances only
        // if its run's row is there when the update runs (statements run in order), so
        // an attempt whose key turned out taken leaves its loop as it was.
        let (rows, advanced) = if advances.loops.is_empty() {
            (db.query(INSERT_WINS, &insert).await?, Vec::new())
        } else {
            let [rows, advanced] = db
                .query_each([(INSERT_WINS, &insert), (ADVANCE, &advances.params(&now))])
                .await?;
            (rows, advanced)
        };
        let mut inserted: HashMap<String, Run> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let run = run_from_row(row)?;
            inserted.insert(run.loop_id.as_str().to_owned(), run);
        }
        for w in &wins {
            match inserted.remove(ids[w.index]) {
                Some(run) => out[w.index] = Some(ClaimOutcome::Claimed(Box::new(run))),
                // The key was taken after all (or the id was): the one-by-one way says.
                None => slow.push(w.index),
            }
        }
        // The advanced loops as their `run.started` events show them.
        for row in &advanced {
            let brief = crate::events::brief_from_row(row)?;
            briefs.insert(brief.id.clone(), brief);
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

/// Inserts the runs of [`WinColumns`] (`$1`–`$7`) from `source` (`$8`) at `now` (`$9`)
/// by the runner `$10` of epoch `$11`; each taken key (or id) leaves its row out of
/// the answer. (Each run's loop is looked up by its key, as in [`LOCK_LOOPS`].)
pub(crate) const INSERT_WINS: &str = concat!(
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
         CROSS JOIN LATERAL \
           (SELECT target_json FROM loops WHERE loops.id = t.l OFFSET 0) AS loops \
         ON CONFLICT DO NOTHING RETURNING ",
    run_cols!()
);

/// The runs a batch inserts, as [`INSERT_WINS`]' columns.
struct WinColumns<'a> {
    ids: Vec<&'a str>,
    loops: Vec<&'a str>,
    names: Vec<String>,
    slots: Vec<i64>,
    attempts: Vec<i64>,
    leases: Vec<i64>,
    dues: Vec<Option<i64>>,
}

impl<'a> WinColumns<'a> {
    fn of(
        wins: &'a [Win],
        claims: &[BatchClaim],
        ids: &[&'a str],
        locked: &HashMap<String, LockedLoop>,
    ) -> Self {
        let now = claims.first().map_or(0, |c| ms(&c.request.now));
        let lock = |w: &Win| locked.get(ids[w.index]);
        Self {
            ids: wins.iter().map(|w| w.id.as_str()).collect(),
            loops: wins.iter().map(|w| ids[w.index]).collect(),
            names: wins
                .iter()
                .map(|w| lock(w).map(|lp| lp.name.clone()).unwrap_or_default())
                .collect(),
            slots: wins
                .iter()
                .map(|w| ms(&claims[w.index].request.scheduled_for))
                .collect(),
            attempts: wins.iter().map(|w| w.attempt).collect(),
            leases: wins
                .iter()
                .map(|w| now.saturating_add(lock(w).map_or(0, |lp| lp.lease_ms)))
                .collect(),
            dues: wins.iter().map(|w| w.due_at).collect(),
        }
    }
}

/// A claim the batch inserts: the claim's index, its run's id and attempt, and when it
/// is due (its jitter applied).
struct Win {
    index: usize,
    id: String,
    attempt: i64,
    due_at: Option<i64>,
}

/// The loops a batch's wins advance, as the update's columns, each beside the run whose
/// row must be there for the loop to move.
#[derive(Default)]
struct Advances<'a> {
    loops: Vec<&'a str>,
    runs: Vec<&'a str>,
    slots: Vec<i64>,
    attempts: Vec<i64>,
    status: Vec<&'static str>,
    next: Vec<Option<i64>>,
    retry: Vec<Option<i64>>,
    due: Vec<Option<i64>>,
}

impl<'a> Advances<'a> {
    fn of(
        wins: &'a [Win],
        claims: &[BatchClaim],
        ids: &[&'a str],
        locked: &HashMap<String, LockedLoop>,
    ) -> Self {
        let mut out = Self::default();
        for w in wins {
            let claim = &claims[w.index];
            let (Some(advance), Some(lp)) = (&claim.advance, locked.get(ids[w.index])) else {
                continue;
            };
            out.loops.push(ids[w.index]);
            out.runs.push(&w.id);
            out.slots.push(ms(&claim.request.scheduled_for));
            out.attempts.push(w.attempt);
            out.status.push(advance.status.as_str());
            out.next.push(opt_ms(advance.next_run_at.as_ref()));
            out.retry.push(opt_ms(advance.retry_scheduled_for.as_ref()));
            out.due.push(opt_ms(
                schedule::due_at(
                    &claim.request.loop_id,
                    advance.next_run_at,
                    advance.retry_scheduled_for,
                    lp.jitter_ms,
                )
                .as_ref(),
            ));
        }
        out
    }

    /// [`ADVANCE`]'s parameters, at `now`.
    fn params<'p>(&'p self, now: &'p i64) -> [&'p (dyn ToSql + Sync); 9] {
        [
            &self.loops,
            &self.runs,
            &self.slots,
            &self.attempts,
            &self.status,
            &self.next,
            &self.retry,
            &self.due,
            now,
        ]
    }
}

/// Moves each loop of [`Advances`] whose run's row is there, returning the moved loops'
/// briefs. The run and the loop are each looked up by their key, as in [`LOCK_LOOPS`];
/// the loop's row is then updated where the probe found it (`ctid`), which is where it
/// stays: this transaction holds the loops it advances locked ([`LOCK_LOOPS`]).
pub(crate) const ADVANCE: &str = "UPDATE loops SET status = t.st, next_run_at = t.nx, \
       retry_scheduled_for = t.rt, due_at = t.du, updated_at = $9 \
     FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], \
                 $6::bigint[], $7::bigint[], $8::bigint[]) \
       AS t(id, run, s, a, st, nx, rt, du) \
     CROSS JOIN LATERAL (SELECT 1 FROM runs WHERE runs.id = t.run AND runs.loop_id = t.id \
                           AND runs.scheduled_for = t.s AND runs.attempt = t.a OFFSET 0) AS r \
     CROSS JOIN LATERAL (SELECT ctid AS at FROM loops WHERE loops.id = t.id OFFSET 0) AS l \
     WHERE loops.ctid = l.at \
     RETURNING loops.id, loops.name, loops.status, loops.next_run_at, loops.due_at";

/// Each claim's slot state, in the order of the loop ids (`$1`) and slots (`$2`): the
/// loop's running rows, and its slot's running, finished (succeeded or skipped) and
/// latest attempts.
pub(crate) const SLOT_STATES: &str = "SELECT q.n, c.busy, c.running, c.done, c.last \
     FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(l, s, n) \
     CROSS JOIN LATERAL ( \
       SELECT COUNT(*) FILTER (WHERE status = 'running') AS busy, \
              COUNT(*) FILTER (WHERE scheduled_for = q.s AND status = 'running') AS running, \
              COUNT(*) FILTER (WHERE scheduled_for = q.s \
                                 AND status IN ('succeeded', 'skipped')) AS done, \
              COALESCE(MAX(attempt) FILTER (WHERE scheduled_for = q.s), 0) AS last \
       FROM runs WHERE loop_id = q.l AND (scheduled_for = q.s OR status = 'running')) c \
     ORDER BY q.n";

/// Locks every loop of the ids `$1` that no other transaction holds (`SKIP LOCKED`).
///
/// Each loop, as each row these statements read or write by key, is looked up by its
/// key in a probe of its own that the planner keeps apart (`LATERAL … OFFSET 0`):
/// written as `id = ANY($1)` or a join, the generic plan PostgreSQL keeps for a
/// prepared statement, made while the table was small (a new store), read the whole
/// table on every batch once it had grown (`plan_tests`; BENCHMARKS.md §30).
pub(crate) const LOCK_LOOPS: &str = "SELECT l.* FROM unnest($1::text[]) AS x(id) \
     CROSS JOIN LATERAL ( \
       SELECT id, status, name, max_attempts, lease_ms, jitter_ms, next_run_at, \
              retry_scheduled_for, due_at, runs_on_json, target_json \
       FROM loops WHERE loops.id = x.id OFFSET 0 FOR UPDATE SKIP LOCKED) AS l";

/// Which of the ids `$1` are loops (each looked up by its key, as in [`LOCK_LOOPS`]).
pub(crate) const EXISTING_LOOPS: &str = "SELECT l.id FROM unnest($1::text[]) AS x(id) \
     CROSS JOIN LATERAL (SELECT id FROM loops WHERE loops.id = x.id OFFSET 0) AS l";

/// The loops [`LOCK_LOOPS`] locked, by id.
fn locked_loops(rows: &[tokio_postgres::Row]) -> Result<HashMap<String, LockedLoop>> {
    let mut out = HashMap::with_capacity(rows.len());
    for row in rows {
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
