//! A loop whose target is a workflow: the slot's workflow run, started or continued,
//! and its result as the loop run's outcome.

use super::Engine;
use crate::workflow::RunEnd;
use loops_core::{Loop, Run, RunOutcome, RunStatus, WorkflowRunStatus};
use std::sync::Arc;
use tokio::sync::watch;

impl Engine {
    /// A loop whose target is a workflow: runs (or continues) the slot's workflow run
    /// and turns its result into the loop run's outcome. `None` when the run was
    /// interrupted before it changed anything (the loop run stays running).
    pub(super) async fn run_workflow_target(
        &self,
        lp: &Loop,
        run: &Run,
        target: &loops_core::WorkflowTarget,
        interrupt: watch::Receiver<Option<String>>,
    ) -> Option<RunOutcome> {
        let failed = |error: String| RunOutcome::failed(self.clock.now(), error);
        let origin = loops_core::workflow::RunOrigin {
            loop_id: lp.id.clone(),
            loop_run_id: run.id.clone(),
            scheduled_for: run.scheduled_for,
        };
        // A continued slot runs the version it started with; a new one the active spec.
        let workflow = match self.store.get_active_workflow(&target.workflow) {
            Ok(Some(w)) => w,
            Ok(None) => {
                return Some(failed(format!(
                    "no active workflow named {:?}",
                    target.workflow
                )))
            }
            Err(e) => {
                return Some(failed(format!(
                    "cannot load workflow {:?}: {e}",
                    target.workflow
                )))
            }
        };
        let ctx = crate::workflow::RunContext {
            store: Arc::clone(&self.store),
            fence: self.cfg.fence.clone(),
            exec: self.cfg.exec.clone(),
            clock: Arc::clone(&self.clock),
            origin: Some(origin),
            loop_metadata: crate::targets::run_metadata(lp, run),
            timeout: target.timeout.map(loops_core::Duration::to_std),
            params: target.params.clone(),
            interrupt,
        };
        let end = match crate::workflow::run(&ctx, &workflow).await {
            // Interrupted before the run changed (still waiting on a step process that
            // outlived a runner): left as it is, for the next daemon to adopt.
            Ok(RunEnd::Untouched(_)) => return None,
            Ok(end) => end,
            Err(e) => {
                self.note_store_error_ref(&e);
                return Some(failed(format!("workflow run failed to record: {e}")));
            }
        };
        // An interrupted attempt did not complete: the loop run is abandoned (and
        // retried), not failed.
        let status = match &end {
            RunEnd::Interrupted(_) => RunStatus::Abandoned,
            _ => match end.run().status {
                WorkflowRunStatus::Succeeded => RunStatus::Succeeded,
                WorkflowRunStatus::TimedOut => RunStatus::TimedOut,
                _ => RunStatus::Failed,
            },
        };
        let wf_run = end.into_run();
        let steps = self.store.step_runs(wf_run.id.as_str()).unwrap_or_default();
        let summary: Vec<serde_json::Value> = steps
            .iter()
            .map(|s| serde_json::json!({"stepId": s.step_id, "status": s.status, "exitCode": s.exit_code, "error": s.error, "errorOutput": s.error_output, "summary": s.summary}))
            .collect();
        let report = serde_json::to_string_pretty(
            &serde_json::json!({ "workflowRun": wf_run, "steps": summary }),
        )
        .unwrap_or_default();
        let mut outcome =
            RunOutcome::new(status, self.clock.now()).with_output(report, String::new());
        outcome.error = wf_run
            .error
            .as_ref()
            .map(|e| format!("workflow run {}: {e}", wf_run.id));
        outcome.summary = Some(format!("workflow run {} {}", wf_run.id, wf_run.status));
        Some(outcome)
    }
}
