//! Run writes: a batch of pid records and finalizations in one transaction, each
//! finalization followed by its loop's transition as the domain decides it
//! (`loops_core::transitions`), from the loop as stored and its deferred retry looked
//! up in the same transaction, and the notifications it calls for queued there too
//! (`crate::notify`).

use crate::codec::{instant_from_ms, ms, query_first, run_cols, run_from_row};
use crate::error::{Error, Result, StoreResult};
use crate::loops::apply_advance;
use crate::runs::not_running;
use crate::SqliteStore;
use loops_core::event::EventKind;
use loops_core::stop::StopMet;
use loops_core::transitions;
use loops_core::{Instant, Loop, LoopId, Run, RunId, RunOutcome};
use loops_store::finish::{self, PidRecord, Write};
use loops_store::{Fence, RunWrite, RunWritten};
use rusqlite::{params, Connection, OptionalExtension};

pub(crate) fn record_run_writes(
    store: &SqliteStore,
    writes: &[RunWrite],
    now: Instant,
    fence: Option<&Fence>,
) -> StoreResult<Vec<StoreResult<RunWritten>>> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    store.write(fence.map(|f| (f, now)), |tx| {
        let mut done = Vec::with_capacity(writes.len());
        for write in writes {
            let result = match write.to_write() {
                Write::Pid(record) => mark_pid_in(tx, &record).map(|()| RunWritten::Spawned),
                Write::Finish { run, outcome } => finish::outcome_usage_json(outcome)
                    .map_err(Error::from)
                    .and_then(|usage| finalize_in(tx, run, outcome, usage.as_deref()))
                    .and_then(|finished| {
                        // The loop as stored (`None`: removed).
                        let lp = crate::loops::loop_in(tx, &finished.loop_id)?;
                        let Some(lp) = lp else {
                            crate::events::append_run(tx, EventKind::RunFinished, &finished, now)?;
                            return Ok(RunWritten::finished(finished, false, Vec::new()));
                        };
                        let (loop_moved, event) =
                            advance_after_finish(tx, &lp, &finished, outcome.stop)?;
                        crate::events::append_run(tx, EventKind::RunFinished, &finished, now)?;
                        let mut notifications =
                            crate::notify::queue_for_run(tx, &lp, &finished, now)?;
                        if let Some(event) = event {
                            notifications.extend(crate::notify::queue_event(
                                tx, &lp, &finished, event, now,
                            )?);
                        }
                        notifications.extend(crate::holds::after_finish(tx, &lp, &finished, now)?);
                        notifications
                            .extend(crate::budgets::after_finish(tx, &lp, &finished, now)?);
                        Ok(RunWritten::finished(finished, loop_moved, notifications))
                    }),
            };
            match result {
                Ok(written) => done.push(Ok(written)),
                // A bad outcome fails alone, like a row that is no longer running.
                Err(e) => done.push(Err(e.alone_in_batch()?)),
            }
        }
        Ok(done)
    })
}

/// Records the child's pid on a running row, inside the caller's transaction.
fn mark_pid_in(conn: &Connection, record: &PidRecord<'_>) -> Result<()> {
    let n = conn
        .prepare_cached(
            "UPDATE runs SET pid = ?2, pid_start_time = ?3, updated_at = ?4, session_note = ?5 \
             WHERE id = ?1 AND status = 'running'",
        )?
        .execute(params![
            record.run.as_str(),
            record.pid,
            record.pid_start_time,
            ms(&record.at),
            record.session_note
        ])?;
    if n == 0 {
        return Err(not_running(conn, record.run));
    }
    Ok(())
}

/// Moves a running row to its terminal status, inside the caller's transaction.
fn finalize_in(
    conn: &Connection,
    run: &RunId,
    outcome: &RunOutcome,
    usage: Option<&str>,
) -> Result<Run> {
    let sql = concat!(
        "UPDATE runs SET status = ?2, finished_at = ?3, exit_code = ?4, \
           duration_ms = CASE WHEN started_at IS NULL THEN NULL ELSE MAX(0, ?3 - started_at) END, \
           stdout = ?5, stderr = ?6, error = ?7, summary = ?8, usage_json = ?9, updated_at = ?3, \
           error_output = ?10, failure_class = ?11, retry_at = ?12, session_id = ?13, \
           session_note = ?14 \
         WHERE id = ?1 AND status = 'running' RETURNING ",
        run_cols!()
    );
    let params = params![
        run.as_str(),
        outcome.status.as_str(),
        ms(&outcome.finished_at),
        outcome.exit_code,
        outcome.stdout,
        outcome.stderr,
        outcome.error,
        outcome.summary,
        usage,
        outcome.error_output,
        outcome.failure_class.map(|c| c.as_str()),
        outcome.retry_at.as_ref().map(ms),
        outcome.session_id,
        outcome.session_note,
    ];
    match query_first(conn, sql, params, run_from_row)? {
        Some(r) => Ok(r),
        None => Err(not_running(conn, run)),
    }
}

/// After `run` was finalized in this transaction: applies its loop's transition and
/// engine state, as the domain decides them from the loop as stored (`lp`). Returns
/// whether the loop's schedule state changed, and the notification about the loop the
/// transition calls for (parked by the circuit breaker, done by a stop condition:
/// `stop` is what the runner found met, [`loops_core::RunOutcome::stop`]). A loop whose schedule no
/// longer computes is left as it is (logged): the next scheduling pass parks it.
fn advance_after_finish(
    conn: &Connection,
    lp: &Loop,
    run: &Run,
    stop: Option<StopMet>,
) -> Result<(bool, Option<loops_core::NotifyEvent>)> {
    let deferred = if transitions::wants_deferred_retry(lp, run) {
        retryable_slot(conn, &lp.id, lp.max_attempts, run.scheduled_for)?
    } else {
        None
    };
    let plan = finish::plan(lp, run, stop, deferred);
    let moved = match &plan.advance {
        Some(advance) => apply_advance(conn, &lp.id, advance, finish::advanced_at(run))?,
        None => false,
    };
    if let Some(state) = &plan.state {
        crate::loops::set_state(conn, &lp.id, state)?;
    }
    Ok((moved, plan.event))
}

/// The oldest slot of `loop_id` other than `except` whose latest attempt failed with
/// attempts left under `max_attempts` (a deferred retry); usable inside a transaction.
fn retryable_slot(
    conn: &Connection,
    loop_id: &LoopId,
    max_attempts: u32,
    except: Instant,
) -> Result<Option<Instant>> {
    let slot: Option<i64> = conn
        .prepare_cached(loops_store::retryable_slot_sql!("?1", "?2", "?3"))?
        .query_row(params![loop_id.as_str(), max_attempts, ms(&except)], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(slot
        .map(|v| instant_from_ms(v, "scheduled_for"))
        .transpose()?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use loops_core::{
        Anchor, CommandTarget, NewLoop, Policy, RunSource, RunStatus, Schedule, Target,
    };
    use loops_store::{ClaimRequest, Store};

    fn t(offset_ms: i64) -> Instant {
        chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + offset_ms).unwrap()
    }

    /// The lookup behind a deferred retry, on its own (the suite checks its effect on
    /// the loop through `record_run_writes`).
    #[test]
    fn next_retryable_slot_finds_oldest_failed_slot_with_attempts_left() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut new = NewLoop {
            name: "a".to_owned(),
            description: None,
            schedule: Schedule::Interval {
                every_ms: 60_000,
                anchor: Anchor::FixedRate,
            },
            target: Target::Command(CommandTarget {
                command: "echo hi".to_owned(),
                args: vec![],
                cwd: None,
                shell: true,
                env: Default::default(),
                timeout: None,
                idle_timeout: None,
                account: None,
            }),
            policy: Policy::default(),
            labels: Vec::new(),
            notify: None,
            next_run_at: Some(t(0)),
        };
        new.policy.max_attempts = 3;
        let lp = store.create_loop(new, t(0)).unwrap();
        let slot = |i: i64| t(i * 60_000);
        let claim = |s: Instant, source: RunSource| {
            let req = ClaimRequest {
                loop_id: lp.id.clone(),
                scheduled_for: s,
                runner_id: "runner-a".to_owned(),
                source,
                now: s,
                require_no_running: false,
            };
            store.claim_run(&req, None, None).unwrap().unwrap()
        };
        let finish = |run: &Run, status: RunStatus, at: Instant| {
            let outcome = RunOutcome {
                status,
                finished_at: at,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                error: None,
                error_output: None,
                summary: None,
                usage: None,
                failure_class: None,
                retry_at: None,
                stop: None,
                session_id: None,
                session_note: None,
            };
            let write = RunWrite::Finished {
                run: run.id.clone(),
                outcome,
            };
            store.record_run_writes(&[write], at, None).unwrap()[0]
                .as_ref()
                .unwrap();
        };
        let fail = |s: Instant, status: RunStatus| {
            let r = claim(s, RunSource::Scheduled);
            finish(&r, status, s);
        };
        // slot 0: failed twice, then succeeded → done.
        fail(slot(0), RunStatus::Failed);
        fail(slot(0), RunStatus::Failed);
        fail(slot(0), RunStatus::Succeeded);
        // slot 1: failed 3 times → out of attempts.
        for _ in 0..3 {
            fail(slot(1), RunStatus::Failed);
        }
        // slot 2: timed out once → retryable.
        fail(slot(2), RunStatus::TimedOut);
        // slot 3: abandoned once → retryable.
        fail(slot(3), RunStatus::Abandoned);
        // slot 4: failed once, retry currently running → not retryable.
        fail(slot(4), RunStatus::Failed);
        claim(slot(4), RunSource::Scheduled);
        // ad hoc failure → ignored.
        let r = claim(t(-5), RunSource::AdHoc);
        finish(&r, RunStatus::Failed, t(-4));

        let next =
            |max: u32, except: Instant| retryable_slot(&store.lock(), &lp.id, max, except).unwrap();
        assert_eq!(next(3, slot(99)), Some(slot(2)));
        assert_eq!(next(3, slot(2)), Some(slot(3)));
        // With fewer attempts allowed, the once-failed slots are exhausted too.
        assert_eq!(next(1, slot(99)), None);
        assert_eq!(next(2, slot(99)), Some(slot(2)));
    }
}
