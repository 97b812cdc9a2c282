//! Executing one claimed run: its process (or workflow), then its finalization; and
//! the rest of a catch-up batch on the same task.

use super::{lock, Engine};
use crate::executor::{ExecResult, ExecStatus};
use crate::providers::{self, Verdict};
use crate::supervisor::{Executed, UnitKey};
use crate::targets::{loop_invocation, SpecError};
use loops_core::{session, Instant, Loop, Overlap, Run, RunOutcome, RunSource};
use loops_store::{ClaimRequest, RunWrite};
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

impl Engine {
    /// Executes `first` and then the remaining catch-up slots of the batch, in order,
    /// on one task (they are one loop's backlog and must not overlap each other).
    pub(super) fn spawn_batch(
        self: &Arc<Self>,
        lp: Loop,
        first: Run,
        rest: Vec<Instant>,
        permit: OwnedSemaphorePermit,
    ) {
        let engine = Arc::clone(self);
        let task = self.task();
        tokio::spawn(async move {
            let _task = task;
            let _permit = permit;
            let mut next = Some(first);
            let mut rest = rest.into_iter();
            while let Some(run) = next.take() {
                let finished = engine.execute_claimed(&lp, run).await;
                let retry_pending = finished
                    .as_ref()
                    .is_some_and(|r| loops_core::transitions::retries(&lp, r));
                if finished.is_none() || retry_pending || engine.lease_lost() {
                    break;
                }
                // The rest of a catch-up batch: claim each slot in order; skip any that
                // someone else already ran.
                for slot in rest.by_ref() {
                    let req = ClaimRequest {
                        loop_id: lp.id.clone(),
                        scheduled_for: slot,
                        runner_id: engine.cfg.runner_id.clone(),
                        source: RunSource::Scheduled,
                        now: engine.clock.now(),
                        require_no_running: lp.overlap == Overlap::Skip,
                    };
                    match engine.store.claim_run(&req, None, engine.fence()) {
                        Ok(Ok(claimed)) => {
                            next = Some(claimed);
                            break;
                        }
                        Ok(Err(_)) => {}
                        Err(e) => {
                            let _ = engine.note_store_error(e);
                            break;
                        }
                    }
                }
            }
        });
    }

    /// Executes one claimed run to its end, finalizes it and advances its loop.
    /// Returns the finalized run (`None` when finalizing was rejected).
    pub async fn execute_claimed(&self, lp: &Loop, run: Run) -> Option<Run> {
        let lease = std::time::Duration::from_millis(lp.lease_ms);
        let cancel_rx = self.hold(&run, lease);
        self.log_start(&run);
        if self.lease_lost() {
            let _ = lock(&self.inflight)
                .get(&run.id)
                .map(|f| f.cancel.send(Some("daemon lease lost".into())));
        }
        if let loops_core::Target::Workflow(target) = &lp.target {
            let mut outcome = self.run_workflow_target(lp, &run, target, cancel_rx).await;
            if let Some(outcome) = outcome.as_mut() {
                self.check_stop(lp, &run, outcome).await;
            }
            self.release(&run.id);
            return match outcome {
                Some(outcome) => self.finalize_and_advance(&run, &outcome).await,
                None => None,
            };
        }
        let key = UnitKey::run(&run.id);
        let resume = self.session_to_resume(lp);
        let mut session_note = resume.as_deref().map(session::resumed_note);
        let mut launched = self
            .launch(
                lp,
                &run,
                resume.as_deref(),
                session_note.as_deref(),
                &key,
                cancel_rx.clone(),
            )
            .await;
        if let (Some(id), Ok(done), loops_core::Target::Agent(agent)) =
            (&resume, &launched, &lp.target)
        {
            if done.terminated_by.is_none()
                && providers::resume_refused(agent.provider, &done.result)
            {
                // The CLI does not know the session (deleted, another home or working
                // directory): the same attempt runs again, fresh, and says so. The first
                // process is over and forgotten by its supervisor before its unit name
                // is used again.
                tracing::warn!(run = %run.id, session = %id, "session could not be resumed; starting fresh");
                self.cfg.exec.launcher.ack(&key.unit);
                session_note = Some(session::not_resumed_note(id));
                launched = self
                    .launch(lp, &run, None, session_note.as_deref(), &key, cancel_rx)
                    .await;
            }
        }
        let mut outcome = match launched {
            Ok(Executed {
                result,
                terminated_by,
            }) => {
                // The stop conditions are checked while the run is still held (its
                // lease renewed, its interruption reaching the check).
                let reason = lock(&self.inflight)
                    .get(&run.id)
                    .and_then(|f| f.cancel.borrow().clone());
                let mut outcome = outcome_of(Some(lp), result, reason, terminated_by);
                self.check_stop(lp, &run, &mut outcome).await;
                self.release(&run.id);
                outcome
            }
            Err(SpecError(message)) => {
                self.release(&run.id);
                RunOutcome::failed(self.clock.now(), message)
            }
        };
        outcome.session_note = session_note;
        let finalized = self.finalize_and_advance(&run, &outcome).await;
        // Recorded (or refused for good): its supervisor may forget it now.
        self.cfg.exec.launcher.ack(&key.unit);
        finalized
    }
}

impl Engine {
    /// Builds and launches the process of `run` (resuming session `resume`, which
    /// `session_note` describes: recorded with the pid), and waits for its end;
    /// `cancel_rx` stops it.
    async fn launch(
        &self,
        lp: &Loop,
        run: &Run,
        resume: Option<&str>,
        session_note: Option<&str>,
        key: &UnitKey,
        mut cancel_rx: tokio::sync::watch::Receiver<Option<String>>,
    ) -> Result<Executed, SpecError> {
        let mut spec = loop_invocation(lp, run, resume, &self.cfg.exec)?;
        spec.spool = self.cfg.exec.spool.as_ref().map(|s| s.for_run(&run.id));
        let on_spawn = |pid: u32, start: Option<u64>| {
            self.recorder.send(RunWrite::Spawned {
                run: run.id.clone(),
                pid,
                pid_start_time: start,
                session_note: session_note.map(str::to_owned),
                at: self.clock.now(),
            });
        };
        let cancel = async move {
            if cancel_rx.wait_for(Option::is_some).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        Ok(self
            .cfg
            .exec
            .launcher
            .execute(key.clone(), spec, on_spawn, cancel)
            .await)
    }

    /// The session a `session: continue` agent loop's next run resumes: its last
    /// finished run's, when [`session::resumable`] accepts it; `None` (a fresh run)
    /// otherwise, and when the store cannot tell (the error is noted; finalizing the
    /// run will meet the store again).
    fn session_to_resume(&self, lp: &Loop) -> Option<String> {
        let loops_core::Target::Agent(agent) = &lp.target else {
            return None;
        };
        if !session::continues(agent.session) {
            return None;
        }
        match self.store.last_session_run(&lp.id) {
            Ok(last) => last
                .as_ref()
                .and_then(session::resumable)
                .map(str::to_owned),
            Err(e) => {
                self.note_store_error_ref(&e);
                None
            }
        }
    }
}

/// A loop run's outcome from how its process ended, judged by its target (an agent's
/// provider reads its output); see [`run_outcome`].
pub(super) fn outcome_of(
    lp: Option<&Loop>,
    result: ExecResult,
    cancel_reason: Option<String>,
    terminated_by: Option<String>,
) -> RunOutcome {
    let verdict = match lp.map(|l| &l.target) {
        Some(loops_core::Target::Agent(agent)) => providers::judge(agent, &result),
        _ => Verdict::of_process(&result),
    };
    run_outcome(result, verdict, cancel_reason, terminated_by)
}

/// A loop run's outcome from its process and the verdict on it. A stopped attempt
/// (daemon stop, lease lost) is interrupted, with its owner's reason; one its
/// supervisor terminated (its deadline passed) is abandoned with the supervisor's.
fn run_outcome(
    result: ExecResult,
    verdict: Verdict,
    cancel_reason: Option<String>,
    terminated_by: Option<String>,
) -> RunOutcome {
    let status = verdict.run_status();
    let mut outcome = match (verdict.status, cancel_reason, terminated_by) {
        (ExecStatus::Terminated, Some(reason), _) => {
            RunOutcome::interrupted(result.finished_at, &reason)
        }
        (ExecStatus::Terminated, None, Some(why)) => RunOutcome::abandoned(result.finished_at, why),
        (ExecStatus::Terminated, None, None) => {
            RunOutcome::interrupted(result.finished_at, "cancelled")
        }
        _ => RunOutcome {
            error: verdict.error,
            error_output: verdict.error_output,
            ..RunOutcome::new(status, result.finished_at)
        },
    }
    .with_output(result.stdout, result.stderr);
    outcome.exit_code = result.exit_code;
    outcome.summary = verdict.summary;
    outcome.usage = verdict.usage;
    outcome.failure_class = verdict.failure.map(|f| f.class);
    outcome.retry_at = verdict.failure.and_then(|f| f.retry_at);
    outcome.session_id = verdict.session_id;
    outcome
}
