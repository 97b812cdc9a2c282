//! Recovering a workflow run whose runner is gone: steps whose processes still live are
//! waited for or reclaimed, the others reset to pending and run again.

use super::*;

/// Steps left `running` by a runner that died may still have live processes: never
/// start a second copy while the first runs. False when interrupted while waiting.
pub(super) async fn wait_for_orphans(
    steps: &[StepRun],
    interrupt: &watch::Receiver<Option<String>>,
) -> bool {
    let mut interrupt = interrupt.clone();
    loop {
        let alive = steps.iter().any(|s| {
            s.status == StepStatus::Running
                && s.pid
                    .is_some_and(|pid| is_same_process_alive(pid, s.pid_start_time))
        });
        if !alive {
            return true;
        }
        if interrupt.borrow().is_some() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(CANCEL_POLL) => {}
            changed = interrupt.changed() => if changed.is_err() {
                // The owner is gone: nothing will interrupt us any more.
                tokio::time::sleep(CANCEL_POLL).await;
            }
        }
    }
}

/// A step left `running` by a runner that died, whose process a supervisor held: its
/// real end (waited for while it runs, or read from its status file), recorded as if
/// its runner had never left. Untouched when no supervisor knows it.
pub(super) async fn reclaim_step(
    ctx: &RunContext,
    workflow: &Workflow,
    step: &mut StepRun,
) -> Result<(), StoreError> {
    let unit = step_unit(step.id.as_str());
    let executed = if let Some(reclaimed) = ctx.exec.launcher.reclaim(&unit) {
        tracing::info!(step = %step.step_id, "re-attached to a step that outlived its runner");
        reclaimed.exited().await
    } else if let Some(report) = ctx
        .exec
        .supervise_dir
        .as_ref()
        .and_then(|dir| crate::supervisor::status::read(dir, &unit))
    {
        Executed {
            result: report.result,
            terminated_by: report.terminated_by,
        }
    } else {
        return Ok(());
    };
    let Some(spec) = workflow.spec.steps.iter().find(|s| s.id == step.step_id) else {
        return Ok(());
    };
    let stop = executed.terminated_by.clone().map(Stop::Interrupted);
    finish_step(ctx, spec, step, executed.result, stop.as_ref())?;
    ctx.exec.launcher.ack(&unit);
    if let Some(dir) = &ctx.exec.supervise_dir {
        crate::supervisor::status::remove(dir, &unit);
    }
    Ok(())
}

/// A step whose process outlived the runner that started it, and has now exited: not
/// our child, so its exit status is unknown. Recorded `failed` (what follows is
/// decided by `continueOnFailure`) with the output spooled before the runner died.
pub(super) fn record_orphan_outcome(
    ctx: &RunContext,
    step: &mut StepRun,
    now: Instant,
) -> Result<(), StoreError> {
    let pid = step.pid.unwrap_or(0);
    let spooled = ctx
        .exec
        .spool
        .as_ref()
        .map(|s| s.for_step(step.id.as_str()));
    if let Some(files) = &spooled {
        let (stdout, stderr) = files.read(ctx.exec.max_output_bytes);
        step.stdout = Some(stdout);
        step.stderr = Some(stderr);
    }
    let error = format!(
        "exit status unknown: process {pid} outlived the runner that started it; not started again"
    );
    step.status = StepStatus::Failed;
    step.exit_status_unknown = true;
    step.exit_code = None;
    step.finished_at = Some(now);
    step.duration_ms = step
        .started_at
        .map(|s| u64::try_from((now - s).num_milliseconds()).unwrap_or(0));
    step.error = Some(error.clone());
    let ev = NewEvent::new(
        WorkflowEventType::StepFailed,
        Some(&step.step_id),
        json!({ "exitCode": null, "exitStatusUnknown": true, "pid": pid, "error": error }),
    );
    ctx.store.save_step_run(step, &[ev], now, ctx.fence())?;
    if let Some(files) = spooled {
        files.remove();
    }
    Ok(())
}

pub(super) fn reset_step(step: &mut StepRun) {
    step.status = StepStatus::Pending;
    step.exit_status_unknown = false;
    step.started_at = None;
    step.finished_at = None;
    step.exit_code = None;
    step.pid = None;
    step.pid_start_time = None;
    step.duration_ms = None;
    step.stdout = None;
    step.stderr = None;
    step.error = None;
    step.error_output = None;
}

/// `workflows recover`: resets `running` steps whose process is gone to `pending` so a
/// later attempt reruns them; refuses while any of those processes is alive.
pub fn recover(
    store: &dyn Store,
    run_id: &WorkflowRunId,
    reason: &str,
    now: Instant,
) -> Result<Vec<StepRun>, RecoverError> {
    let steps = store.step_runs(run_id.as_str())?;
    let running: Vec<&StepRun> = steps
        .iter()
        .filter(|s| s.status == StepStatus::Running)
        .collect();
    let live: Vec<String> = running
        .iter()
        .filter(|s| {
            s.pid
                .is_some_and(|pid| is_same_process_alive(pid, s.pid_start_time))
        })
        .map(|s| format!("{} (pid {})", s.step_id, s.pid.unwrap_or(0)))
        .collect();
    if !live.is_empty() {
        return Err(RecoverError::Alive(live.join(", ")));
    }
    let mut recovered = Vec::new();
    for step in running {
        let mut step = step.clone();
        reset_step(&mut step);
        step.error = Some(reason.to_owned());
        let ev = NewEvent::new(
            WorkflowEventType::Recovered,
            Some(&step.step_id),
            json!({ "reason": reason, "at": format_instant(&now) }),
        );
        store.save_step_run(&step, &[ev], now, None)?;
        recovered.push(step);
    }
    Ok(recovered)
}

/// Why `recover` refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverError {
    #[error("cannot recover while step processes are still alive: {0}")]
    Alive(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
