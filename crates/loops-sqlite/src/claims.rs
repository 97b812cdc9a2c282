//! Claims: a slot attempt becomes a `running` row in one conditional write, and a
//! scheduling pass's claims (with their loops' advances, and the skipped slots of busy
//! loops) share one transaction.

use crate::codec::{insert_with_new_id, ms, new_id, run_cols, run_from_row, ID_ATTEMPTS};
use crate::error::{Error, Result, StoreResult};
use crate::loops::apply_advance;
use crate::SqliteStore;
use loops_core::caps::{self, Caps, InFlight, RunKeys};
use loops_core::event::EventKind;
use loops_core::{Instant, LoopId, LoopStatus, Provider, Run, RunSource, RunStatus, Target};
use loops_store::claim::{attempt_due_at, SlotAttempts};
use loops_store::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, Fence, LoopAdvance, OnRefusal, StoreError,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// The reason recorded on a slot skipped because its loop was still running.
const SKIPPED_BUSY: &str = "previous run still active";

pub(crate) fn claim_runs(
    store: &SqliteStore,
    claims: &[BatchClaim],
    fence: Option<&Fence>,
) -> StoreResult<Vec<ClaimOutcome>> {
    let Some(first) = claims.first() else {
        return Ok(Vec::new());
    };
    store.write(fence.map(|f| (f, first.request.now)), |tx| {
        claims.iter().map(|c| batch_claim_in(tx, c)).collect()
    })
}

/// The claim itself, inside the caller's write transaction: the loop's status, then
/// (for overlap `skip`) whether it is busy, then the slot's attempts, then the insert,
/// whose slot-attempt key is the final guard. On success, applies `advance` to the
/// loop in the same transaction.
fn claim_in_tx(
    tx: &Transaction<'_>,
    req: &ClaimRequest,
    advance: Option<&LoopAdvance>,
    caps: &Caps,
) -> Result<std::result::Result<Run, ClaimRefused>> {
    let now = ms(&req.now);
    let slot = ms(&req.scheduled_for);
    let ad_hoc = req.source == RunSource::AdHoc;
    type LoopRow = (
        String,
        String,
        i64,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        String,
    );
    let lp: Option<LoopRow> = tx
        .prepare_cached(
            "SELECT status, name, max_attempts, lease_ms, jitter_ms, retry_scheduled_for, due_at, \
             target_json FROM loops WHERE id = ?1",
        )?
        .query_row([req.loop_id.as_str()], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .optional()?;
    let Some((status, name, max_attempts, lease_ms, jitter_ms, retry_for, loop_due, target)) = lp
    else {
        return Ok(Err(ClaimRefused::LoopNotActive));
    };
    let due_at = attempt_due_at(
        req,
        retry_for,
        loop_due,
        u64::try_from(jitter_ms).unwrap_or(0),
    );
    if !ad_hoc && status != LoopStatus::Active.as_str() {
        return Ok(Err(ClaimRefused::LoopNotActive));
    }

    // Before the slot's own state: "the loop is busy" is the answer that explains a
    // refused exclusive claim, whatever its slot looks like.
    if req.require_no_running {
        let busy: bool = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE loop_id = ?1 AND status = 'running')",
            )?
            .query_row([req.loop_id.as_str()], |r| r.get(0))?;
        if busy {
            return Ok(Err(ClaimRefused::LoopBusy));
        }
    }

    let slot_attempts = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(status = 'running'), 0), \
                        COALESCE(SUM(status IN ('succeeded', 'skipped')), 0), \
                        COALESCE(MAX(attempt), 0), \
                        COALESCE(SUM(failure_class = 'usage_limit'), 0) \
                 FROM runs WHERE loop_id = ?1 AND scheduled_for = ?2",
        )?
        .query_row(params![req.loop_id.as_str(), slot], |r| {
            Ok(SlotAttempts {
                running: r.get(0)?,
                done: r.get(1)?,
                last_attempt: r.get(2)?,
                held: r.get(3)?,
            })
        })?;
    let attempt = match slot_attempts.next_attempt(max_attempts, ad_hoc) {
        Ok(attempt) => attempt,
        Err(refused) => return Ok(Err(refused)),
    };
    // Last: the caps count the running rows this transaction sees, the batch's own
    // claims before this one included.
    let keys = match admit_in(tx, &target, caps, ad_hoc, req.now)? {
        Ok(keys) => keys,
        Err(wait) => return Ok(Err(ClaimRefused::AtCap(wait.text()))),
    };

    let mut stmt = tx.prepare_cached(concat!(
        "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
             started_at, claimed_by, lease_expires_at, created_at, updated_at, due_at, \
             run_kind, provider, account) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9, ?7, ?7, ?10, ?11, ?12, ?13) \
             RETURNING ",
        run_cols!()
    ))?;
    for _ in 0..ID_ATTEMPTS {
        let mut rows = stmt.query(params![
            new_id(),
            req.loop_id.as_str(),
            name,
            slot,
            attempt,
            req.source.as_str(),
            now,
            req.runner_id,
            now.saturating_add(lease_ms),
            due_at,
            keys.kind,
            keys.provider.map(|p| p.as_str()),
            keys.recorded_account(),
        ])?;
        match rows.next() {
            Ok(Some(row)) => {
                let run = run_from_row(row)?;
                drop(rows);
                if let Some(advance) = advance {
                    apply_advance(tx, &req.loop_id, advance, req.now)?;
                }
                crate::events::append_run(tx, EventKind::RunStarted, &run, req.now)?;
                return Ok(Ok(run));
            }
            Ok(None) => break,
            Err(e) if crate::codec::is_unique_violation(&e) => {
                // The slot-attempt key is the final guard of the claim.
                if e.to_string().contains("runs.scheduled_for") {
                    return Ok(Err(ClaimRefused::SlotRunning));
                }
                // A run id collision: draw another.
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::ids_exhausted("run"))
}

/// What a run of the loop whose `target_json` is `target` counts against, with the
/// account its pool chose — or why it must wait (`loops_core::caps::admit`, with the
/// running rows and holds as this transaction sees them). A pool passes over held
/// accounts for scheduled claims only: a run-now is a person asking.
fn admit_in(
    tx: &Transaction<'_>,
    target: &str,
    caps: &Caps,
    ad_hoc: bool,
    now: Instant,
) -> Result<std::result::Result<RunKeys, caps::Wait>> {
    let target: Target = serde_json::from_str(target)
        .map_err(|e| StoreError::Decode(format!("loop target: {e}")))?;
    if caps.is_empty() && caps::pool_of(&target).is_none() {
        return Ok(Ok(RunKeys::of(&target, None)));
    }
    let in_flight = running_keys_in(tx)?;
    let holds = if ad_hoc || caps::pool_of(&target).is_none() {
        Vec::new()
    } else {
        let mut holds = crate::holds::all_in(tx)?;
        holds.extend(loops_core::budget::pool_holds(
            &crate::budgets::budget_holds_in(tx)?,
        ));
        holds
    };
    Ok(caps::admit(&target, caps, &in_flight, &holds, now))
}

/// The running rows, grouped by what they count against.
pub(crate) fn running_keys_in(conn: &Connection) -> Result<InFlight> {
    let mut stmt = conn.prepare_cached(
        "SELECT run_kind, provider, account, COUNT(*) FROM runs \
         WHERE status = 'running' AND run_kind IS NOT NULL GROUP BY run_kind, provider, account",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut in_flight = InFlight::new();
    for row in rows {
        let (kind, provider, account, n) = row?;
        let provider = provider
            .map(|p| p.parse::<Provider>())
            .transpose()
            .map_err(StoreError::Decode)?;
        let keys = RunKeys::recorded(kind, provider, account);
        in_flight.add(&keys, usize::try_from(n).unwrap_or(0));
    }
    Ok(in_flight)
}

/// Inserts the next attempt of scheduled slot `slot` (milliseconds) of `lp` as a run
/// that never ran and ended as `status` at `now` with `error`: one statement for a
/// busy loop's skipped slot and a parked loop's failed run.
pub(crate) fn insert_ended(
    conn: &Connection,
    lp: &LoopId,
    name: &str,
    slot: i64,
    status: RunStatus,
    error: &str,
    now: Instant,
) -> Result<Run> {
    insert_with_new_id(
        conn,
        concat!(
            "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
             started_at, finished_at, duration_ms, error, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, \
               (SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs WHERE loop_id = ?2 AND scheduled_for = ?4), \
               ?5, ?6, ?7, ?7, 0, ?8, ?7, ?7) RETURNING ",
            run_cols!()
        ),
        params![
            lp.as_str(),
            name,
            slot,
            status.as_str(),
            RunSource::Scheduled.as_str(),
            ms(&now),
            error,
        ],
        "run",
        run_from_row,
        // A run id collision draws another (the attempt number is computed under the
        // lock).
        |e| {
            crate::codec::is_foreign_key_violation(e)
                .then(|| StoreError::LoopNotFound(lp.to_string()).into())
        },
    )
}

/// One claim of a batch and what its refusal implies, inside the caller's transaction.
fn batch_claim_in(tx: &Transaction<'_>, claim: &BatchClaim) -> Result<ClaimOutcome> {
    let req = &claim.request;
    let advance = claim.advance.as_ref();
    let refused = match claim_in_tx(tx, req, advance, &claim.caps)? {
        Ok(run) => return Ok(ClaimOutcome::Claimed(Box::new(run))),
        Err(refused) => refused,
    };
    let skip_slots = match &claim.on_refusal {
        OnRefusal::Keep => return Ok(ClaimOutcome::Refused(refused)),
        OnRefusal::PassOver { skip_slots } => skip_slots,
    };
    match refused {
        ClaimRefused::LoopBusy => {
            let name: String = tx
                .prepare_cached("SELECT name FROM loops WHERE id = ?1")?
                .query_row([req.loop_id.as_str()], |r| r.get(0))?;
            let skipped = skip_slots
                .iter()
                .map(|slot| {
                    let (status, slot) = (RunStatus::Skipped, ms(slot));
                    insert_ended(tx, &req.loop_id, &name, slot, status, SKIPPED_BUSY, req.now)
                })
                .collect::<Result<Vec<_>>>()?;
            if let Some(advance) = advance {
                apply_advance(tx, &req.loop_id, advance, req.now)?;
            }
            for run in &skipped {
                crate::events::append_run(tx, EventKind::RunFinished, run, req.now)?;
            }
            Ok(ClaimOutcome::Skipped(skipped))
        }
        ClaimRefused::SlotDone | ClaimRefused::SlotRunning => {
            if let Some(advance) = advance {
                apply_advance(tx, &req.loop_id, advance, req.now)?;
            }
            Ok(ClaimOutcome::Moved)
        }
        ClaimRefused::LoopNotActive => Ok(ClaimOutcome::NotActive),
        // The loop waits for a free slot, still due: nothing changes.
        ClaimRefused::AtCap(_) => Ok(ClaimOutcome::Refused(refused)),
    }
}
