//! The workflow runner: executes a workflow run's DAG with independent steps in
//! parallel (bounded by `maxParallel`), records every step transition and an event for
//! it, stops the run on the first failure that does not `continueOnFailure` (running
//! siblings are terminated, the rest skipped), honours per-step and workflow timeouts,
//! and cancellation requested from any process.
//!
//! A run started by a loop belongs to its slot (`loopId:scheduledFor`): a later attempt
//! of that slot continues the same run, rerunning only the steps that did not succeed.
//! A run whose runner died (still `running` when it is picked up again) continues the
//! same attempt: every step that finished keeps its result, and a step whose process
//! outlived the runner is waited for and recorded `failed` with its exit status unknown
//! — it is never started again, by this run or by a later attempt of its slot, since
//! its side effects may already have happened.

use crate::clock::Clock;
use crate::executor::{ExecResult, Invocation};
use crate::process::is_same_process_alive;
use crate::providers::{self, Verdict};
use crate::supervisor::{step_unit, Executed, UnitKey};
use crate::targets::{invocation, ExecSettings, ProcessTarget};
use loops_core::budget::BudgetHold;
use loops_core::failure::FailureClass;
use loops_core::hold::{AccountHold, HoldKey, StepLimit};
use loops_core::workflow::{
    Dag, NewEvent, Readiness, RunOrigin, Step, StepRun, StepTarget, Workflow, WorkflowError,
    WorkflowRun,
};
use loops_core::workflow_params::{self, ParamValues};
use loops_core::{
    format_instant, Instant, StepId, StepStatus, WorkflowEventType, WorkflowRunId,
    WorkflowRunStatus,
};
use loops_store::{Fence, Store, StoreError};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

mod holds;
mod recover;

use holds::*;
use recover::*;
pub use recover::{recover, RecoverError};

/// How often the runner looks for a cancellation requested by another process.
const CANCEL_POLL: Duration = Duration::from_millis(200);

/// Everything a workflow run needs besides its spec.
pub struct RunContext {
    pub store: Arc<dyn Store>,
    /// The daemon lease fence every write carries; `None` outside a daemon.
    pub fence: Option<Fence>,
    /// How step processes are started and supervised.
    pub exec: ExecSettings,
    /// Where `now` comes from (step and run timestamps).
    pub clock: Arc<dyn Clock>,
    /// The loop slot this run belongs to, when a loop started it.
    pub origin: Option<RunOrigin>,
    /// `LOOPS_*` metadata of the loop run, when a loop started it.
    pub loop_metadata: Vec<(&'static str, String)>,
    /// Whole-run timeout.
    pub timeout: Option<Duration>,
    /// The values given for the spec's params (`--param`, a loop's target): checked
    /// and completed with the defaults when the run is created; a continued run uses
    /// the values it was created with instead.
    pub params: ParamValues,
    /// Set by the owner to interrupt the run (daemon stop, lease loss).
    pub interrupt: watch::Receiver<Option<String>>,
}

impl RunContext {
    fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }
}

/// Why the run stopped starting steps.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    Failed { step: StepId, status: StepStatus },
    TimedOut(String),
    Cancelled(String),
    Interrupted(String),
}

/// How [`run`] left a workflow run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The attempt came to an end of its own: the run succeeded, failed, timed out or
    /// was cancelled.
    Finished(WorkflowRun),
    /// The run's owner stopped the attempt (daemon stop, lease lost, Ctrl-C): the run
    /// is recorded `failed` ("interrupted: …"), but the attempt did not complete, so
    /// the loop run it belongs to is `abandoned` rather than failed.
    Interrupted(WorkflowRun),
    /// Stopped while a step process left by an earlier runner still ran, before
    /// anything changed: the run stays `running`, for whoever continues it next.
    Untouched(WorkflowRun),
}

impl RunEnd {
    /// The run record as it was left.
    pub fn run(&self) -> &WorkflowRun {
        match self {
            RunEnd::Finished(run) | RunEnd::Interrupted(run) | RunEnd::Untouched(run) => run,
        }
    }

    /// The run record as it was left.
    pub fn into_run(self) -> WorkflowRun {
        match self {
            RunEnd::Finished(run) | RunEnd::Interrupted(run) | RunEnd::Untouched(run) => run,
        }
    }
}

/// Runs (or continues) a workflow run to its end and says how it was left.
pub async fn run(ctx: &RunContext, workflow: &Workflow) -> Result<RunEnd, StoreError> {
    run_observed(ctx, workflow, None).await
}

/// [`run`], sending the run's record to `started` as soon as its attempt is recorded
/// (before any step starts), so a caller that does not wait for the end learns its id.
pub async fn run_observed(
    ctx: &RunContext,
    workflow: &Workflow,
    started: Option<tokio::sync::oneshot::Sender<WorkflowRun>>,
) -> Result<RunEnd, StoreError> {
    let now = ctx.now();
    let given = workflow_params::resolve(&workflow.spec, &ctx.params);
    let (mut run, created) = ctx.store.create_workflow_run(
        workflow,
        ctx.origin.as_ref(),
        given.as_ref().unwrap_or(&ParamValues::new()),
        now,
        ctx.fence(),
    )?;
    // A continued run executes the spec version it was created with, with the params
    // it was created with.
    let stored = if created || run.workflow_id == workflow.id {
        workflow.clone()
    } else {
        ctx.store
            .get_workflow(run.workflow_id.as_str())?
            .ok_or_else(|| StoreError::WorkflowNotFound(run.workflow_id.to_string()))?
    };
    let spec = if created {
        given.and_then(|values| workflow_params::substitute(&stored.spec, &values))
    } else {
        workflow_params::substitute(&stored.spec, &run.params)
    };
    let mut steps = ctx.store.step_runs(run.id.as_str())?;
    let workflow = match spec {
        Ok(spec) => Workflow { spec, ..stored },
        // Its params do not fit its spec (a loop's values, after the spec changed):
        // the run fails before any step starts, saying why.
        Err(e) => return refuse(ctx, run, &mut steps, &e, started).map(RunEnd::Finished),
    };
    // Still `running`: its runner died mid-run, and this continues the same attempt.
    let interrupted = !created && run.status == WorkflowRunStatus::Running;
    let mut reset = Vec::new();
    let mut unknown = Vec::new();
    if !created {
        for step in steps.iter_mut() {
            if step.status == StepStatus::Running && step.pid.is_some() {
                reclaim_step(ctx, &workflow, step).await?;
            }
        }
        if !wait_for_orphans(&steps, &ctx.interrupt).await {
            // Stopped while a step's process still runs: leave everything as it is
            // for whoever continues the run next.
            return Ok(RunEnd::Untouched(run));
        }
        for step in steps.iter_mut() {
            let rerun = match step.status {
                StepStatus::Running if step.pid.is_some() => {
                    record_orphan_outcome(ctx, step, now)?;
                    unknown.push(step.step_id.clone());
                    false
                }
                // Never got a process (its runner died before the spawn was recorded).
                StepStatus::Running => true,
                StepStatus::Succeeded | StepStatus::Pending => false,
                // The same attempt continues with what finished; a new attempt of the
                // slot reruns what did not succeed, unless it may have run already.
                _ => !interrupted && !step.exit_status_unknown,
            };
            if rerun {
                reset.push(step.step_id.clone());
                reset_step(step);
                ctx.store.save_step_run(step, &[], now, ctx.fence())?;
            }
        }
    }
    run.attempt += 1;
    run.status = WorkflowRunStatus::Running;
    run.finished_at = None;
    run.duration_ms = None;
    run.error = None;
    run.cancel_requested = None;
    let attempt_event = NewEvent::new(
        WorkflowEventType::AttemptStarted,
        None,
        json!({
            "attempt": run.attempt,
            "continued": !created,
            "afterRunnerDied": interrupted,
            "rerunSteps": reset,
            "exitStatusUnknownSteps": unknown,
        }),
    );
    ctx.store
        .save_workflow_run(&run, &[attempt_event], now, ctx.fence())?;
    if let Some(started) = started {
        // A caller that went away does not stop the run.
        let _ = started.send(run.clone());
    }

    let stop = drive(ctx, &workflow, &run, &mut steps).await?;
    let finished = ctx.now();
    let (status, error, event) = match &stop {
        None => (
            WorkflowRunStatus::Succeeded,
            None,
            WorkflowEventType::Succeeded,
        ),
        Some(Stop::Failed { step, status }) => (
            if *status == StepStatus::TimedOut {
                WorkflowRunStatus::TimedOut
            } else {
                WorkflowRunStatus::Failed
            },
            Some(format!("step {step:?} {status}")),
            if *status == StepStatus::TimedOut {
                WorkflowEventType::TimedOut
            } else {
                WorkflowEventType::Failed
            },
        ),
        Some(Stop::TimedOut(why)) => (
            WorkflowRunStatus::TimedOut,
            Some(why.clone()),
            WorkflowEventType::TimedOut,
        ),
        Some(Stop::Cancelled(why)) => (
            WorkflowRunStatus::Cancelled,
            Some(format!("cancelled: {why}")),
            WorkflowEventType::Cancelled,
        ),
        Some(Stop::Interrupted(why)) => (
            WorkflowRunStatus::Failed,
            Some(format!("interrupted: {why}")),
            WorkflowEventType::Interrupted,
        ),
    };
    run.status = status;
    run.error = error.clone();
    run.finished_at = Some(finished);
    run.duration_ms = run
        .started_at
        .map(|s| u64::try_from((finished - s).num_milliseconds()).unwrap_or(0));
    let event = NewEvent::new(
        event,
        None,
        json!({ "attempt": run.attempt, "error": error }),
    );
    ctx.store
        .save_workflow_run(&run, &[event], finished, ctx.fence())?;
    Ok(match stop {
        Some(Stop::Interrupted(_)) => RunEnd::Interrupted(run),
        _ => RunEnd::Finished(run),
    })
}

/// Records `step` skipped, with `reason` as its error and in its event.
fn skip_step(
    ctx: &RunContext,
    step: &mut StepRun,
    reason: &str,
    now: Instant,
) -> Result<(), StoreError> {
    step.status = StepStatus::Skipped;
    step.error = Some(reason.to_owned());
    let ev = NewEvent::new(
        WorkflowEventType::StepSkipped,
        Some(&step.step_id),
        json!({ "reason": reason }),
    );
    ctx.store.save_step_run(step, &[ev], now, ctx.fence())
}

/// Ends `run` failed before any step started: its params do not fit its spec. Every
/// pending step is skipped with the reason.
fn refuse(
    ctx: &RunContext,
    mut run: WorkflowRun,
    steps: &mut [StepRun],
    error: &WorkflowError,
    started: Option<tokio::sync::oneshot::Sender<WorkflowRun>>,
) -> Result<WorkflowRun, StoreError> {
    let now = ctx.now();
    let reason = format!("params: {error}");
    for step in steps.iter_mut().filter(|s| s.status == StepStatus::Pending) {
        skip_step(ctx, step, &reason, now)?;
    }
    run.attempt += 1;
    run.status = WorkflowRunStatus::Failed;
    run.error = Some(reason.clone());
    run.finished_at = Some(now);
    run.duration_ms = run
        .started_at
        .map(|s| u64::try_from((now - s).num_milliseconds()).unwrap_or(0));
    let event = NewEvent::new(
        WorkflowEventType::Failed,
        None,
        json!({ "attempt": run.attempt, "error": reason }),
    );
    ctx.store
        .save_workflow_run(&run, &[event], now, ctx.fence())?;
    if let Some(started) = started {
        let _ = started.send(run.clone());
    }
    Ok(run)
}

/// The scheduling loop. Returns why it stopped early, or `None` when every step ended
/// without stopping the run.
async fn drive(
    ctx: &RunContext,
    workflow: &Workflow,
    run: &WorkflowRun,
    steps: &mut [StepRun],
) -> Result<Option<Stop>, StoreError> {
    let spec = &workflow.spec;
    let dag = Dag::new(spec);
    let ids: Vec<&str> = spec.steps.iter().map(|s| s.id.as_str()).collect();
    let mut order: Vec<usize> = Vec::with_capacity(steps.len());
    for (i, step) in spec.steps.iter().enumerate() {
        if steps.iter().any(|s| s.step_id == step.id) {
            order.push(i);
        }
    }
    // steps[] follows spec order (sequence); map spec index → slot in `steps`.
    let slot_of: Vec<Option<usize>> = spec
        .steps
        .iter()
        .map(|s| steps.iter().position(|r| r.step_id == s.id))
        .collect();
    let max_parallel = spec.max_parallel();
    let deadline = ctx.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut interrupt = ctx.interrupt.clone();
    let mut running: JoinSet<(usize, Executed)> = JoinSet::new();
    let mut cancels: Vec<Option<watch::Sender<bool>>> = vec![None; spec.steps.len()];
    // A continued run keeps its finished steps: one that already failed in a way that
    // stops the run stops it again, before anything new starts.
    let mut stop: Option<Stop> = spec.steps.iter().enumerate().find_map(|(i, step)| {
        let status = slot_of[i].map(|slot| steps[slot].status)?;
        (matches!(status, StepStatus::Failed | StepStatus::TimedOut) && dag.failure_stops_run(i))
            .then(|| Stop::Failed {
                step: step.id.clone(),
                status,
            })
    });
    let mut last_poll = tokio::time::Instant::now();
    let mut holds = Holds::default();
    // Per spec index: the hold end a pending step was last recorded waiting for, in
    // milliseconds (as the store keeps instants).
    let mut held: Vec<Option<i64>> = vec![None; spec.steps.len()];

    loop {
        let states: Vec<StepStatus> = spec
            .steps
            .iter()
            .enumerate()
            .map(|(i, _)| slot_of[i].map_or(StepStatus::Skipped, |s| steps[s].status))
            .collect();
        if stop.is_none() {
            for &i in &order {
                let Some(slot) = slot_of[i] else { continue };
                if steps[slot].status != StepStatus::Pending {
                    continue;
                }
                match dag.readiness(i, &states, &ids) {
                    Readiness::Waiting => {}
                    Readiness::Blocked(reason) => {
                        skip_step(ctx, &mut steps[slot], &reason, ctx.now())?;
                    }
                    Readiness::Ready if running.len() < max_parallel => {
                        if let Some(key) = step_key(&spec.steps[i]) {
                            let current = holds.fresh(ctx.store.as_ref())?;
                            if let Some((until, reason)) = loops_core::budget::step_held(
                                key.provider,
                                Some(&key.account),
                                &current.accounts,
                                &current.budgets,
                                ctx.now(),
                            ) {
                                if held[i] != Some(until.timestamp_millis()) {
                                    held[i] = Some(until.timestamp_millis());
                                    hold_step(ctx, &mut steps[slot], until, &reason, false)?;
                                }
                                continue;
                            }
                        }
                        if held[i].take().is_some() {
                            steps[slot].error = None;
                        }
                        let (tx, rx) = watch::channel(false);
                        cancels[i] = Some(tx);
                        start_step(
                            ctx,
                            workflow,
                            run,
                            &spec.steps[i],
                            &mut steps[slot],
                            rx,
                            &mut running,
                            i,
                        )?;
                    }
                    Readiness::Ready => {}
                }
            }
        }
        if running.is_empty() {
            let pending = steps.iter().any(|s| s.status == StepStatus::Pending);
            if stop.is_some() || !pending {
                break;
            }
            // A step waiting for its held key: wait for the hold's end (asking the
            // store again at most once a second), a cancellation, the workflow's
            // timeout or the owner's interrupt, below.
            let waiting = held.iter().zip(&slot_of).any(|(h, slot)| {
                h.is_some() && slot.is_some_and(|s| steps[s].status == StepStatus::Pending)
            });
            if !waiting {
                // Pending steps whose dependencies are all terminal were handled
                // above; if any remain, their dependencies were just skipped: go
                // round again.
                continue;
            }
        }
        let sleep_until =
            deadline.map_or(last_poll + CANCEL_POLL, |d| d.min(last_poll + CANCEL_POLL));
        tokio::select! {
            joined = running.join_next(), if !running.is_empty() => {
                let Some(joined) = joined else { continue };
                let (i, executed) = match joined {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::error!(error = %e, "workflow step task failed");
                        continue;
                    }
                };
                cancels[i] = None;
                let Some(slot) = slot_of[i] else { continue };
                // Its supervisor ended it (the loop run's deadline passed): the run
                // stops as an interrupted one, whoever continues it decides the rest.
                if let (None, Some(why)) = (&stop, &executed.terminated_by) {
                    stop = Some(Stop::Interrupted(why.clone()));
                    cancel_all(&cancels);
                }
                let (status, held_until) = finish_step(ctx, &spec.steps[i], &mut steps[slot], executed.result, stop.as_ref())?;
                ctx.exec.launcher.ack(&step_unit(steps[slot].id.as_str()));
                if let Some(until) = held_until {
                    // It met its key's usage limit: it waits, pending, and runs again.
                    held[i] = Some(until.timestamp_millis());
                    holds.expire();
                } else if let Some(key) = step_key(&spec.steps[i]) {
                    release_past_hold(ctx, &holds, &key)?;
                }
                if stop.is_none()
                    && matches!(status, StepStatus::Failed | StepStatus::TimedOut)
                    && dag.failure_stops_run(i)
                {
                    stop = Some(Stop::Failed { step: spec.steps[i].id.clone(), status });
                    cancel_all(&cancels);
                }
            }
            changed = interrupt.changed(), if stop.is_none() => {
                if changed.is_ok() {
                    if let Some(why) = interrupt.borrow().clone() {
                        stop = Some(Stop::Interrupted(why));
                        cancel_all(&cancels);
                    }
                }
            }
            _ = tokio::time::sleep_until(sleep_until) => {
                last_poll = tokio::time::Instant::now();
                if stop.is_none() {
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        let limit = ctx
                            .timeout
                            .and_then(|t| loops_core::Duration::from_millis(u64::try_from(t.as_millis()).unwrap_or(u64::MAX)))
                            .map(|d| d.to_string())
                            .unwrap_or_default();
                        stop = Some(Stop::TimedOut(format!("workflow timed out after {limit}")));
                        cancel_all(&cancels);
                    } else if let Some(reason) = ctx.store.get_workflow_run(run.id.as_str())?.and_then(|r| r.cancel_requested) {
                        stop = Some(Stop::Cancelled(reason));
                        cancel_all(&cancels);
                    }
                }
            }
        }
    }

    // Whatever never started: skipped after a failure or timeout, cancelled on cancel.
    if let Some(stop) = &stop {
        let (status, reason) = match stop {
            Stop::Failed { step, status } => (
                StepStatus::Skipped,
                format!("workflow stopped: step {step:?} {status}"),
            ),
            Stop::TimedOut(why) => (StepStatus::Skipped, format!("workflow stopped: {why}")),
            Stop::Cancelled(why) => (StepStatus::Cancelled, format!("cancelled: {why}")),
            Stop::Interrupted(why) => (StepStatus::Cancelled, format!("interrupted: {why}")),
        };
        for step in steps.iter_mut().filter(|s| s.status == StepStatus::Pending) {
            step.status = status;
            step.error = Some(reason.clone());
            let ev = NewEvent::new(
                WorkflowEventType::step_ended(status),
                Some(&step.step_id),
                json!({ "reason": reason }),
            );
            ctx.store
                .save_step_run(step, &[ev], ctx.now(), ctx.fence())?;
        }
    }
    Ok(stop)
}

fn cancel_all(cancels: &[Option<watch::Sender<bool>>]) {
    for tx in cancels.iter().flatten() {
        let _ = tx.send(true);
    }
}

#[allow(clippy::too_many_arguments)]
fn start_step(
    ctx: &RunContext,
    workflow: &Workflow,
    run: &WorkflowRun,
    step: &Step,
    record: &mut StepRun,
    mut cancel: watch::Receiver<bool>,
    running: &mut JoinSet<(usize, Executed)>,
    index: usize,
) -> Result<(), StoreError> {
    let now = ctx.now();
    record.status = StepStatus::Running;
    record.attempts += 1;
    record.started_at = Some(now);
    let ev = NewEvent::new(
        WorkflowEventType::StepStarted,
        Some(&step.id),
        json!({ "attempt": run.attempt, "stepAttempt": record.attempts }),
    );
    ctx.store.save_step_run(record, &[ev], now, ctx.fence())?;

    let invocation = step_invocation(ctx, workflow, run, step).map(|mut invocation| {
        invocation.spool = ctx
            .exec
            .spool
            .as_ref()
            .map(|s| s.for_step(record.id.as_str()));
        invocation
    });
    let store = Arc::clone(&ctx.store);
    let fence = ctx.fence.clone();
    let clock = Arc::clone(&ctx.clock);
    let snapshot = record.clone();
    let launcher = ctx.exec.launcher.clone();
    let key = UnitKey::step(
        record.id.as_str(),
        ctx.origin.as_ref().map(|o| &o.loop_run_id),
    );
    running.spawn(async move {
        let on_spawn = move |pid: u32, start: Option<u64>| {
            let mut with_pid = snapshot;
            with_pid.pid = Some(pid);
            with_pid.pid_start_time = start;
            if let Err(e) = store.save_step_run(&with_pid, &[], clock.now(), fence.as_ref()) {
                tracing::warn!(step = %with_pid.step_id, error = %e, "could not record step pid");
            }
        };
        let cancelled = async move {
            if cancel.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let executed = match invocation {
            Ok(invocation) => launcher.execute(key, invocation, on_spawn, cancelled).await,
            Err(message) => Executed {
                result: ExecResult::unspecified(message, now),
                terminated_by: None,
            },
        };
        (index, executed)
    });
    Ok(())
}

/// Records how a step's process ended, and says how the step was left: its status, and
/// the end of its key's hold when it met its account's usage limit (it is then left
/// `pending`, waiting to run again, its attempt not counted as a failure).
fn finish_step(
    ctx: &RunContext,
    step: &Step,
    record: &mut StepRun,
    result: ExecResult,
    stop: Option<&Stop>,
) -> Result<(StepStatus, Option<Instant>), StoreError> {
    // The pid is kept: it tells `recover` and a continuing run which process ran.
    record.pid = result.pid.or(record.pid);
    record.pid_start_time = result.pid_start_time.or(record.pid_start_time);
    let verdict = match &step.target {
        StepTarget::Agent(agent) => providers::judge(agent, &result),
        StepTarget::Command(_) => Verdict::of_process(&result),
    };
    let limit = match (step_key(step), stop, verdict.failure) {
        (Some(key), None, Some(failure)) if failure.class == FailureClass::UsageLimit => Some((
            key,
            StepLimit::new(
                failure.retry_at,
                step.id.as_str(),
                record.workflow_run_id.as_str(),
            ),
        )),
        _ => None,
    };
    if let Some((key, limit)) = limit {
        let finished = result.finished_at;
        let hold = ctx
            .store
            .hold_after_step(&key, Some(&limit), finished, ctx.fence())?;
        let until = hold.map_or(finished, |h| h.held_until);
        // What the CLI said stays with the step (output, redacted where output is);
        // the rest of the attempt is gone, as it will run again.
        let error_output = verdict.error_output;
        reset_step(record);
        record.error_output = error_output;
        record.usage = verdict.usage;
        hold_step(ctx, record, until, &limit.reason, true)?;
        if let Some(spool) = &ctx.exec.spool {
            spool.for_step(record.id.as_str()).remove();
        }
        return Ok((StepStatus::Pending, Some(until)));
    }
    let status = verdict.step_status();
    record.summary = verdict.summary;
    record.usage = verdict.usage;
    let error = match (status, stop) {
        (StepStatus::Cancelled, Some(Stop::Failed { step, status })) => {
            Some(format!("cancelled: step {step:?} {status}"))
        }
        (StepStatus::Cancelled, Some(Stop::TimedOut(why))) => Some(format!("cancelled: {why}")),
        (StepStatus::Cancelled, Some(Stop::Cancelled(why))) => Some(format!("cancelled: {why}")),
        (StepStatus::Cancelled, Some(Stop::Interrupted(why))) => {
            Some(format!("interrupted: {why}"))
        }
        _ => verdict.error,
    };
    record.status = status;
    record.finished_at = Some(result.finished_at);
    record.exit_code = result.exit_code;
    record.duration_ms = record
        .started_at
        .map(|s| u64::try_from((result.finished_at - s).num_milliseconds()).unwrap_or(0));
    record.stdout = Some(result.stdout);
    record.stderr = Some(result.stderr);
    record.error = error.clone();
    record.error_output = verdict.error_output;
    let ev = NewEvent::new(
        WorkflowEventType::step_ended(status),
        Some(&record.step_id),
        json!({ "exitCode": record.exit_code, "durationMs": record.duration_ms, "error": error }),
    );
    ctx.store
        .save_step_run(record, &[ev], ctx.now(), ctx.fence())?;
    if let Some(spool) = &ctx.exec.spool {
        spool.for_step(record.id.as_str()).remove();
    }
    Ok((status, None))
}

/// The process for one step: direct exec unless `shell: true`, prompt on stdin for
/// agents, the step's account, the `LOOPS_WORKFLOW_*` metadata on top of the loop's.
fn step_invocation(
    ctx: &RunContext,
    workflow: &Workflow,
    run: &WorkflowRun,
    step: &Step,
) -> Result<Invocation, String> {
    let mut metadata = ctx.loop_metadata.clone();
    metadata.extend([
        ("LOOPS_WORKFLOW_ID", workflow.id.to_string()),
        ("LOOPS_WORKFLOW_NAME", workflow.name.clone()),
        ("LOOPS_WORKFLOW_RUN_ID", run.id.to_string()),
        ("LOOPS_WORKFLOW_STEP_ID", step.id.to_string()),
    ]);
    let target = match &step.target {
        StepTarget::Command(c) => ProcessTarget::Command(c),
        // A step always starts fresh (validation refuses `session: continue` there).
        StepTarget::Agent(a) => ProcessTarget::Agent(a, None),
    };
    invocation(
        target,
        step.account(),
        step.effective_timeout(),
        metadata,
        &ctx.exec,
    )
    .map_err(|e| e.0)
}
