//! Claims: a slot attempt becomes a `running` row in one conditional write, under the
//! loop row's lock, and a scheduling pass's claims (with their loops' advances, and the
//! skipped slots of busy loops) share one transaction.
//!
//! Several runners race for the same due loops; exactly one wins each slot attempt:
//! the loop row is locked (`FOR UPDATE`), the slot's attempts are read under that lock,
//! and the insert's `(loop, scheduledFor, attempt)` key is the final guard
//! (`ON CONFLICT DO NOTHING`). A scheduling pass takes the lock with `SKIP LOCKED`: a
//! loop another runner is claiming right now is theirs, and passed over without
//! waiting. A pass's plan was made from the loop as it read it a moment before, so its
//! claim (or skip, or advance) applies only while the loop still points at (or before)
//! one of the planned slots: otherwise another runner moved it meanwhile, and a stale
//! advance must not move it back.

use crate::codec::{get, ms, new_id, run_cols, run_from_row, text, ID_ATTEMPTS};
use crate::error::{Error, Result};
use crate::loops::apply_advance_known;
use crate::session::{Conn, Db};
use loops_core::caps::{self, Caps, InFlight, RunKeys};
use loops_core::event::{EventKind, LoopBrief};
use loops_core::{Instant, LoopId, LoopStatus, Provider, Run, RunSource, RunStatus, Target};
use loops_store::claim::{attempt_due_at, SlotAttempts};
use loops_store::{BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, LoopAdvance, OnRefusal};
use std::collections::HashMap;

/// The reason recorded on a slot skipped because its loop was still running.
pub(crate) const SKIPPED_BUSY: &str = "previous run still active";

/// `epoch`: the claiming runner's (its fence's), recorded on each row it claims.
pub(crate) async fn claim_runs(
    db: &Db<'_, impl Conn>,
    claims: &[BatchClaim],
    epoch: Option<i64>,
) -> Result<Vec<ClaimOutcome>> {
    let (out, briefs) = if set_based(claims) {
        crate::claim_set::claim_set(db, claims, epoch).await?
    } else {
        let mut out = Vec::with_capacity(claims.len());
        for claim in claims {
            out.push(batch_claim_in(db, claim, epoch).await?);
        }
        (out, HashMap::new())
    };
    log_outcomes(db, &out, claims.first().map(|c| c.request.now), briefs).await?;
    Ok(out)
}

/// Whether a batch can be claimed set-based ([`crate::claim_set`]): a scheduling pass's
/// batch — every claim passing over on refusal, uncapped, of a scheduled slot, at the
/// same instant, each of another loop (so no claim depends on an earlier one's row).
/// A batch of one too: the set-based way is three round trips, the one-by-one way six.
fn set_based(claims: &[BatchClaim]) -> bool {
    let Some(first) = claims.first() else {
        return false;
    };
    let mut loops = std::collections::HashSet::with_capacity(claims.len());
    claims.iter().all(|c| {
        matches!(c.on_refusal, OnRefusal::PassOver { .. })
            // A counted claim counts the rows the batch's earlier claims inserted.
            && c.caps.is_empty()
            && c.request.source != RunSource::AdHoc
            && c.request.now == first.request.now
            && c.request.runner_id == first.request.runner_id
            && loops.insert(c.request.loop_id.clone())
    })
}

/// Logs `run.started` for each claimed run and `run.finished` for each skipped slot,
/// with their loops as the batch left them, as the transaction's last statements.
/// `known` holds the briefs of loops the batch's set-based claims wrote.
async fn log_outcomes(
    db: &Db<'_, impl Conn>,
    outcomes: &[ClaimOutcome],
    now: Option<Instant>,
    known: HashMap<LoopId, LoopBrief>,
) -> Result<()> {
    let Some(now) = now else {
        return Ok(());
    };
    let mut runs = Vec::new();
    for outcome in outcomes {
        match outcome {
            ClaimOutcome::Claimed(run) => runs.push((EventKind::RunStarted, run.as_ref())),
            ClaimOutcome::Skipped(skipped) => {
                runs.extend(skipped.iter().map(|r| (EventKind::RunFinished, r)));
            }
            _ => {}
        }
    }
    if runs.is_empty() {
        return Ok(());
    }
    let bodies = crate::events::run_bodies_knowing(db, &runs, known).await?;
    crate::events::append_all(db, &bodies, now).await
}

/// The loop row as a claim reads it, locked.
pub(crate) struct LockedLoop {
    pub(crate) status: String,
    pub(crate) name: String,
    pub(crate) max_attempts: i64,
    pub(crate) lease_ms: i64,
    pub(crate) jitter_ms: u64,
    pub(crate) next_run_at: Option<i64>,
    pub(crate) retry_for: Option<i64>,
    pub(crate) due_at: Option<i64>,
    /// The runner labels the loop requires (`runsOn`, JSON).
    pub(crate) runs_on: String,
    /// The loop's target (JSON): what its run counts against, and its account pool.
    pub(crate) target_json: String,
}

enum Lock {
    Locked(LockedLoop),
    /// Another transaction holds the row (a pass's `SKIP LOCKED`).
    Busy,
    Missing,
}

async fn lock_loop(db: &Db<'_, impl Conn>, id: &LoopId, skip: bool) -> Result<Lock> {
    let sql = if skip {
        "SELECT status, name, max_attempts, lease_ms, jitter_ms, next_run_at, \
         retry_scheduled_for, due_at, runs_on_json, target_json FROM loops WHERE id = $1 \
         FOR UPDATE SKIP LOCKED"
    } else {
        "SELECT status, name, max_attempts, lease_ms, jitter_ms, next_run_at, \
         retry_scheduled_for, due_at, runs_on_json, target_json FROM loops WHERE id = $1 FOR UPDATE"
    };
    let Some(row) = db.query_opt(sql, &[&id.as_str()]).await? else {
        if skip
            && db
                .query_opt("SELECT 1 FROM loops WHERE id = $1", &[&id.as_str()])
                .await?
                .is_some()
        {
            return Ok(Lock::Busy);
        }
        return Ok(Lock::Missing);
    };
    Ok(Lock::Locked(LockedLoop {
        status: get(&row, 0, "status")?,
        name: get(&row, 1, "name")?,
        max_attempts: get(&row, 2, "max_attempts")?,
        lease_ms: get(&row, 3, "lease_ms")?,
        jitter_ms: u64::try_from(get::<i64>(&row, 4, "jitter_ms")?).unwrap_or(0),
        next_run_at: get(&row, 5, "next_run_at")?,
        retry_for: get(&row, 6, "retry_scheduled_for")?,
        due_at: get(&row, 7, "due_at")?,
        runs_on: get(&row, 8, "runs_on_json")?,
        target_json: get(&row, 9, "target_json")?,
    }))
}

/// The claim itself, inside the caller's transaction, with the loop row locked: its
/// status, then (for overlap `skip`) whether it is busy, then the slot's attempts, then
/// the insert, whose slot-attempt key is the final guard. On success, applies
/// `advance` to the loop in the same transaction.
pub(crate) async fn claim_locked(
    db: &Db<'_, impl Conn>,
    lp: &LockedLoop,
    req: &ClaimRequest,
    advance: Option<&LoopAdvance>,
    epoch: Option<i64>,
    caps: &Caps,
) -> Result<std::result::Result<Run, ClaimRefused>> {
    let now = ms(&req.now);
    let slot = ms(&req.scheduled_for);
    let ad_hoc = req.source == RunSource::AdHoc;
    let due_at = attempt_due_at(req, lp.retry_for, lp.due_at, lp.jitter_ms);
    if !ad_hoc && lp.status != LoopStatus::Active.as_str() {
        return Ok(Err(ClaimRefused::LoopNotActive));
    }
    // One read: whether the loop is busy (for overlap `skip`), and the slot's attempts.
    let counts = db
        .query_one(
            "SELECT COUNT(*) FILTER (WHERE status = 'running'), \
                    COUNT(*) FILTER (WHERE scheduled_for = $2 AND status = 'running'), \
                    COUNT(*) FILTER (WHERE scheduled_for = $2 AND status IN ('succeeded', 'skipped')), \
                    COALESCE(MAX(attempt) FILTER (WHERE scheduled_for = $2), 0), \
                    COUNT(*) FILTER (WHERE scheduled_for = $2 AND failure_class = 'usage_limit') \
             FROM runs WHERE loop_id = $1 AND (scheduled_for = $2 OR status = 'running')",
            &[&req.loop_id.as_str(), &slot],
        )
        .await?;
    let busy: i64 = get(&counts, 0, "busy")?;
    let slot_attempts = SlotAttempts {
        running: get(&counts, 1, "running")?,
        done: get(&counts, 2, "done")?,
        last_attempt: get(&counts, 3, "attempt")?,
        // The batch's fast path sends a slot past `maxAttempts` here.
        held: get(&counts, 4, "held")?,
    };
    // Before the slot's own state: "the loop is busy" is the answer that explains a
    // refused exclusive claim, whatever its slot looks like.
    if req.require_no_running && busy > 0 {
        return Ok(Err(ClaimRefused::LoopBusy));
    }
    let attempt = match slot_attempts.next_attempt(lp.max_attempts, ad_hoc) {
        Ok(attempt) => attempt,
        Err(refused) => return Ok(Err(refused)),
    };
    // Last: the caps count the running rows of every runner, the batch's own claims
    // before this one included.
    let keys = match admit_in(db, &lp.target_json, caps, ad_hoc, req.now).await? {
        Ok(keys) => keys,
        Err(wait) => return Ok(Err(ClaimRefused::AtCap(wait.text()))),
    };
    let provider = keys.provider.map(|p| p.as_str());
    let account = keys.recorded_account();
    for _ in 0..ID_ATTEMPTS {
        let id = new_id();
        let row = db
            .query_opt(
                concat!(
                    "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, \
                     source, started_at, claimed_by, lease_expires_at, created_at, updated_at, \
                     due_at, runner_epoch, run_kind, provider, account) \
                     VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8, $9, $7, $7, $10, $11, \
                       $12, $13, $14) \
                     ON CONFLICT DO NOTHING RETURNING ",
                    run_cols!()
                ),
                &[
                    &id,
                    &req.loop_id.as_str(),
                    &lp.name,
                    &slot,
                    &attempt,
                    &req.source.as_str(),
                    &now,
                    &text(&req.runner_id).as_ref(),
                    &now.saturating_add(lp.lease_ms),
                    &due_at,
                    &epoch,
                    &keys.kind,
                    &provider,
                    &account,
                ],
            )
            .await?;
        if let Some(row) = row {
            let run = run_from_row(&row)?;
            if let Some(advance) = advance {
                apply_advance_known(db, &req.loop_id, lp.jitter_ms, advance, req.now).await?;
            }
            return Ok(Ok(run));
        }
        // Nothing inserted: the slot attempt exists (the final guard), or the id did.
        let taken = db
            .query_opt(
                "SELECT 1 FROM runs WHERE loop_id = $1 AND scheduled_for = $2 AND attempt = $3",
                &[&req.loop_id.as_str(), &slot, &attempt],
            )
            .await?;
        if taken.is_some() {
            return Ok(Err(ClaimRefused::SlotRunning));
        }
    }
    Err(Error::ids_exhausted("run"))
}

/// Inserts the next attempt of scheduled slot `slot` (milliseconds) of `lp` as a run
/// that never ran and ended as `status` at `now` with `error`: one statement for a
/// busy loop's skipped slot and a parked loop's failed run.
pub(crate) async fn insert_ended(
    db: &Db<'_, impl Conn>,
    lp: &LoopId,
    name: &str,
    slot: i64,
    status: RunStatus,
    error: &str,
    now: Instant,
) -> Result<Run> {
    let row = db
        .insert_with_new_id(
            concat!(
                "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, \
                 source, started_at, finished_at, duration_ms, error, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, \
                   (SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs \
                    WHERE loop_id = $2 AND scheduled_for = $4), \
                   $5, $6, $7, $7, 0, $8, $7, $7) \
                 ON CONFLICT (id) DO NOTHING RETURNING ",
                run_cols!()
            ),
            &[
                &lp.as_str(),
                &name,
                &slot,
                &status.as_str(),
                &RunSource::Scheduled.as_str(),
                &ms(&now),
                &error,
            ],
            "run",
        )
        .await?;
    run_from_row(&row)
}

/// Whether the runner of `epoch` advertises every label of `runs_on` (a JSON array).
async fn runner_has(db: &Db<'_, impl Conn>, epoch: Option<i64>, runs_on: &str) -> Result<bool> {
    let Some(epoch) = epoch else {
        return Ok(false);
    };
    let row = db
        .query_opt(
            "SELECT labels_json::jsonb @> ($2::text)::jsonb FROM runners WHERE epoch = $1",
            &[&epoch, &runs_on],
        )
        .await?;
    match row {
        Some(row) => get(&row, 0, "has"),
        None => Ok(false),
    }
}

/// Whether the latest attempt of the request's slot was claimed by the request's runner.
pub(crate) async fn own_slot(db: &Db<'_, impl Conn>, req: &ClaimRequest) -> Result<bool> {
    let row = db
        .query_opt(
            "SELECT claimed_by FROM runs WHERE loop_id = $1 AND scheduled_for = $2 \
             ORDER BY attempt DESC LIMIT 1",
            &[&req.loop_id.as_str(), &ms(&req.scheduled_for)],
        )
        .await?;
    Ok(match row {
        Some(row) => {
            get::<Option<String>>(&row, 0, "claimed_by")?.as_deref() == Some(req.runner_id.as_str())
        }
        None => false,
    })
}

/// One claim of a batch and what its refusal implies, inside the caller's transaction.
async fn batch_claim_in(
    db: &Db<'_, impl Conn>,
    claim: &BatchClaim,
    epoch: Option<i64>,
) -> Result<ClaimOutcome> {
    let req = &claim.request;
    let pass = match &claim.on_refusal {
        OnRefusal::Keep => None,
        OnRefusal::PassOver { skip_slots } => Some(skip_slots),
    };
    let lp = match lock_loop(db, &req.loop_id, pass.is_some()).await? {
        Lock::Locked(lp) => lp,
        // Another runner is claiming this loop at this very moment: it is theirs.
        Lock::Busy => return Ok(ClaimOutcome::Moved),
        Lock::Missing => {
            return Ok(match pass {
                None => ClaimOutcome::Refused(ClaimRefused::LoopNotActive),
                Some(_) => ClaimOutcome::NotActive,
            })
        }
    };
    claim_with_lock(db, claim, &lp, epoch).await
}

/// [`batch_claim_in`] once the loop row is locked: the stale-plan check of a pass, the
/// claim, and what its refusal implies.
pub(crate) async fn claim_with_lock(
    db: &Db<'_, impl Conn>,
    claim: &BatchClaim,
    lp: &LockedLoop,
    epoch: Option<i64>,
) -> Result<ClaimOutcome> {
    let req = &claim.request;
    let advance = claim.advance.as_ref();
    let pass = match &claim.on_refusal {
        OnRefusal::Keep => None,
        OnRefusal::PassOver { skip_slots } => Some(skip_slots),
    };
    if let Some(slots) = pass {
        if lp.status != LoopStatus::Active.as_str() {
            return Ok(ClaimOutcome::NotActive);
        }
        // A loop that requires runner labels is scheduled only by a runner with them
        // all (its plan came from `due_loops`; this is the store's own word on it).
        if lp.runs_on != "[]" && !runner_has(db, epoch, &lp.runs_on).await? {
            return Ok(ClaimOutcome::Moved);
        }
        // The plan is stale when the loop no longer points at (or before) one of its
        // slots: another runner claimed and advanced it, or finished its run and
        // moved it. Then nothing is claimed, skipped or advanced — unless the slot is
        // this runner's own (an earlier claim of the same batch or pass), whose
        // advance the contract applies.
        let last = slots
            .iter()
            .map(ms)
            .chain(std::iter::once(ms(&req.scheduled_for)))
            .max()
            .unwrap_or(i64::MIN);
        let pointer = lp.retry_for.or(lp.next_run_at);
        if pointer.is_none_or(|p| p > last) {
            if own_slot(db, req).await? {
                if let Some(advance) = advance {
                    apply_advance_known(db, &req.loop_id, lp.jitter_ms, advance, req.now).await?;
                }
            }
            return Ok(ClaimOutcome::Moved);
        }
    }
    let refused = match claim_locked(db, lp, req, advance, epoch, &claim.caps).await? {
        Ok(run) => return Ok(ClaimOutcome::Claimed(Box::new(run))),
        Err(refused) => refused,
    };
    let Some(skip_slots) = pass else {
        return Ok(ClaimOutcome::Refused(refused));
    };
    match refused {
        ClaimRefused::LoopBusy => {
            let mut skipped = Vec::with_capacity(skip_slots.len());
            for slot in skip_slots {
                let (status, slot) = (RunStatus::Skipped, ms(slot));
                skipped.push(
                    insert_ended(
                        db,
                        &req.loop_id,
                        &lp.name,
                        slot,
                        status,
                        SKIPPED_BUSY,
                        req.now,
                    )
                    .await?,
                );
            }
            if let Some(advance) = advance {
                apply_advance_known(db, &req.loop_id, lp.jitter_ms, advance, req.now).await?;
            }
            Ok(ClaimOutcome::Skipped(skipped))
        }
        ClaimRefused::SlotDone | ClaimRefused::SlotRunning => {
            if let Some(advance) = advance {
                apply_advance_known(db, &req.loop_id, lp.jitter_ms, advance, req.now).await?;
            }
            Ok(ClaimOutcome::Moved)
        }
        ClaimRefused::LoopNotActive => Ok(ClaimOutcome::NotActive),
        // The loop waits for a free slot, still due: nothing changes.
        ClaimRefused::AtCap(_) => Ok(ClaimOutcome::Refused(refused)),
    }
}

/// The advisory lock every counted claim holds for its transaction ("caps"): two
/// runners' claims never count the running rows at once, so together they never
/// exceed a cap.
const CAPS_LOCK: i64 = 0x6361_7073;

/// What a run of the loop whose target is `target` counts against, with the account
/// its pool chose — or why it must wait (`loops_core::caps::admit`, with the running
/// rows and holds as this transaction sees them after taking [`CAPS_LOCK`]). A pool
/// passes over held accounts for scheduled claims only: a run-now is a person asking.
async fn admit_in(
    db: &Db<'_, impl Conn>,
    target: &str,
    caps: &Caps,
    ad_hoc: bool,
    now: Instant,
) -> Result<std::result::Result<RunKeys, caps::Wait>> {
    let target: Target =
        serde_json::from_str(target).map_err(|e| Error::invalid(format!("loop target: {e}")))?;
    let pooled = caps::pool_of(&target).is_some();
    if caps.is_empty() && !pooled {
        return Ok(Ok(RunKeys::of(&target, None)));
    }
    if !caps.is_empty() {
        db.execute("SELECT pg_advisory_xact_lock($1)", &[&CAPS_LOCK])
            .await?;
    }
    let in_flight = running_keys(db).await?;
    let holds = if ad_hoc || !pooled {
        Vec::new()
    } else {
        let mut holds = crate::holds::account_holds(db).await?;
        holds.extend(loops_core::budget::pool_holds(
            &crate::budgets::budget_holds(db).await?,
        ));
        holds
    };
    Ok(caps::admit(&target, caps, &in_flight, &holds, now))
}

/// The running rows of every runner, grouped by what they count against.
pub(crate) async fn running_keys(db: &Db<'_, impl Conn>) -> Result<InFlight> {
    let rows = db
        .query(
            "SELECT run_kind, provider, account, COUNT(*) FROM runs \
             WHERE status = 'running' AND run_kind IS NOT NULL \
             GROUP BY run_kind, provider, account",
            &[],
        )
        .await?;
    let mut in_flight = InFlight::new();
    for row in &rows {
        let provider = get::<Option<String>>(row, 1, "provider")?
            .map(|p| p.parse::<Provider>())
            .transpose()
            .map_err(Error::invalid)?;
        let keys = RunKeys::recorded(get(row, 0, "run_kind")?, provider, get(row, 2, "account")?);
        in_flight.add(
            &keys,
            usize::try_from(get::<i64>(row, 3, "count")?).unwrap_or(0),
        );
    }
    Ok(in_flight)
}
