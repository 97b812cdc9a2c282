//! Workflow specs and their runs: create, look up, list, archive, cancel, recover.

use super::*;

/// Workflow specs and runs.
impl Client {
    /// Validates and stores a spec (see [`loops_store::WorkflowStore::create_workflow`]).
    pub fn create_workflow(
        &self,
        spec: &WorkflowSpec,
        replace: bool,
        now: Instant,
    ) -> Result<Workflow> {
        loops_core::workflow::validate(spec)?;
        self.check_new_name(RecordKind::Workflow, &spec.name)?;
        Ok(self.store.create_workflow(spec, replace, now)?)
    }

    /// Resolves a workflow like [`Client::get`] resolves a loop: an exact id (of any
    /// version, archived or not) wins, then an active spec's exact name, then an
    /// unambiguous id prefix.
    pub fn get_workflow(&self, key: &str) -> Result<Workflow> {
        let store = self.store.as_ref();
        resolve(
            RecordKind::Workflow,
            key,
            |id| store.get_workflow(id),
            Some(&|name: &str| store.get_active_workflow(name)),
            |prefix, limit| store.workflows_with_id_prefix(prefix, limit),
            |w| format!("{} ({} v{})", w.id, w.name, w.version),
        )
    }

    /// Specs, optionally of one status.
    pub fn list_workflows(&self, status: Option<WorkflowStatus>) -> Result<Vec<Workflow>> {
        Ok(self.store.list_workflows(status)?)
    }

    /// Archives a spec (loops naming it stop finding it).
    pub fn archive_workflow(&self, key: &str, now: Instant) -> Result<Workflow> {
        let wf = self.get_workflow(key)?;
        Ok(self.store.archive_workflow(wf.id.as_str(), now)?)
    }

    /// Resolves a workflow run by exact id, then unambiguous id prefix (runs have no
    /// names).
    pub fn get_workflow_run(&self, key: &str) -> Result<WorkflowRun> {
        let store = self.store.as_ref();
        resolve(
            RecordKind::WorkflowRun,
            key,
            |id| store.get_workflow_run(id),
            None,
            |prefix, limit| store.workflow_runs_with_id_prefix(prefix, limit),
            |r| format!("{} ({})", r.id, r.workflow_name),
        )
    }

    /// Runs newest first, of one workflow (by name) or all.
    pub fn workflow_runs(
        &self,
        workflow: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowRun>> {
        let name = match workflow {
            Some(key) => Some(match self.get_workflow(key) {
                Ok(w) => w.name,
                Err(ClientError::WorkflowNotFound(_)) => {
                    // Archived specs' runs are still listed by name.
                    let known = self
                        .store
                        .list_workflows(None)?
                        .into_iter()
                        .any(|w| w.name == key);
                    if !known {
                        return Err(ClientError::WorkflowNotFound(key.to_owned()));
                    }
                    key.to_owned()
                }
                Err(e) => return Err(e),
            }),
            None => None,
        };
        Ok(self.store.list_workflow_runs(name.as_deref(), limit)?)
    }

    /// Asks a running workflow run to stop; its runner cancels within a second.
    pub fn cancel_workflow_run(
        &self,
        key: &str,
        reason: &str,
        now: Instant,
    ) -> Result<WorkflowRun> {
        let run = self.get_workflow_run(key)?;
        if run.status != loops_core::WorkflowRunStatus::Running {
            return Err(ClientError::Invalid(format!(
                "workflow run {} is {}, not running",
                run.id, run.status
            )));
        }
        Ok(self
            .store
            .request_workflow_cancel(run.id.as_str(), reason, now)?)
    }

    /// The stored workflow of exactly this id (any version, archived or not): the spec
    /// a workflow run executed.
    pub fn workflow_by_id(&self, id: &WorkflowId) -> Result<Option<Workflow>> {
        Ok(self.store.get_workflow(id.as_str())?)
    }

    /// The step runs of a workflow run, in spec order.
    pub fn step_runs(&self, run: &WorkflowRunId) -> Result<Vec<StepRun>> {
        Ok(self.store.step_runs(run.as_str())?)
    }

    /// A workflow run's event log, oldest first: all of it, or its last `limit` events.
    pub fn workflow_events(
        &self,
        run: &WorkflowRunId,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowEvent>> {
        Ok(self.store.workflow_events(run.as_str(), limit)?)
    }

    /// Runs `workflow` with `params` to its end in this process (`workflows run`): not
    /// for a loop's slot, no daemon fence, timestamps from the system clock. Params
    /// that do not fit the spec are refused before anything is recorded. `interrupt`
    /// stops it (Ctrl-C): running steps are terminated and the run ends
    /// [`RunEnd::Interrupted`].
    pub async fn run_workflow(
        &self,
        workflow: &Workflow,
        timeout: Option<std::time::Duration>,
        params: &loops_core::workflow_params::ParamValues,
        interrupt: tokio::sync::watch::Receiver<Option<String>>,
    ) -> Result<RunEnd> {
        started::check_params(workflow, params)?;
        let ctx = self.workflow_context(timeout, params, interrupt);
        Ok(crate::workflow::run(&ctx, workflow).await?)
    }

    /// Resets steps whose processes are gone to `pending`; refuses while any lives.
    pub fn recover_workflow_run(
        &self,
        key: &str,
        reason: &str,
        now: Instant,
    ) -> Result<(WorkflowRun, Vec<StepRun>)> {
        let run = self.get_workflow_run(key)?;
        let steps = crate::workflow::recover(self.store.as_ref(), &run.id, reason, now)?;
        Ok((run, steps))
    }
}
