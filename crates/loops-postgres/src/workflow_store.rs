//! The [`WorkflowStore`] half of the trait on PostgreSQL: each method one call into
//! `workflows`, in one transaction where it writes.

use super::*;

impl WorkflowStore for PgStore {
    fn create_workflow(
        &self,
        spec: &WorkflowSpec,
        replace: bool,
        now: Instant,
    ) -> StoreResult<Workflow> {
        let spec = spec.clone();
        write!(self, None, |db| workflows::create_workflow(
            db, &spec, replace, now
        ))
    }

    fn get_workflow(&self, id: &str) -> StoreResult<Option<Workflow>> {
        let id = id.to_owned();
        read!(self, |db| by_id::<Workflow>(db, &id))
    }

    fn get_active_workflow(&self, name: &str) -> StoreResult<Option<Workflow>> {
        let name = name.to_owned();
        read!(self, |db| workflows::get_active_workflow(db, &name))
    }

    fn workflows_with_id_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Workflow>> {
        let prefix = prefix.to_owned();
        read!(self, |db| workflows::workflows_with_id_prefix(
            db, &prefix, limit
        ))
    }

    fn list_workflows(&self, status: Option<WorkflowStatus>) -> StoreResult<Vec<Workflow>> {
        read!(self, |db| workflows::list_workflows(db, status))
    }

    fn archive_workflow(&self, id: &str, now: Instant) -> StoreResult<Workflow> {
        let id = id.to_owned();
        write!(self, None, |db| workflows::archive_workflow(db, &id, now))
    }

    fn create_workflow_run(
        &self,
        workflow: &Workflow,
        origin: Option<&RunOrigin>,
        params: &loops_core::workflow_params::ParamValues,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<(WorkflowRun, bool)> {
        let (workflow, origin, params) = (workflow.clone(), origin.cloned(), params.clone());
        write!(self, fenced(fence, now), |db| {
            workflows::create_workflow_run(db, &workflow, origin.as_ref(), &params, now)
        })
    }

    fn get_workflow_run(&self, id: &str) -> StoreResult<Option<WorkflowRun>> {
        let id = id.to_owned();
        read!(self, |db| by_id::<WorkflowRun>(db, &id))
    }

    fn workflow_runs_with_id_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<WorkflowRun>> {
        let prefix = prefix.to_owned();
        read!(self, |db| workflows::workflow_runs_with_id_prefix(
            db, &prefix, limit
        ))
    }

    fn list_workflow_runs(
        &self,
        workflow_name: Option<&str>,
        limit: Option<usize>,
    ) -> StoreResult<Vec<WorkflowRun>> {
        let name = workflow_name.map(str::to_owned);
        read!(self, |db| workflows::list_workflow_runs(
            db,
            name.as_deref(),
            limit
        ))
    }

    fn step_runs(&self, run_id: &str) -> StoreResult<Vec<StepRun>> {
        let run_id = run_id.to_owned();
        read!(self, |db| workflows::step_runs(db, &run_id))
    }

    fn workflow_events(
        &self,
        run_id: &str,
        limit: Option<usize>,
    ) -> StoreResult<Vec<WorkflowEvent>> {
        let run_id = run_id.to_owned();
        read!(self, |db| workflows::workflow_events(db, &run_id, limit))
    }

    fn save_workflow_run(
        &self,
        run: &WorkflowRun,
        events: &[NewEvent],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<()> {
        let (run, events) = (run.clone(), events.to_vec());
        write!(self, fenced(fence, now), |db| workflows::save_workflow_run(
            db, &run, &events, now
        ))
    }

    fn save_step_run(
        &self,
        step: &StepRun,
        events: &[NewEvent],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<()> {
        let (step, events) = (step.clone(), events.to_vec());
        write!(self, fenced(fence, now), |db| workflows::save_step_run(
            db, &step, &events, now
        ))
    }

    fn request_workflow_cancel(
        &self,
        run_id: &str,
        reason: &str,
        now: Instant,
    ) -> StoreResult<WorkflowRun> {
        let (run_id, reason) = (run_id.to_owned(), reason.to_owned());
        write!(self, None, |db| workflows::request_workflow_cancel(
            db, &run_id, &reason, now
        ))
    }

    fn prune_workflow_runs(&self, policy: &PrunePolicy, dry_run: bool) -> StoreResult<usize> {
        let policy = policy.clone();
        if dry_run {
            return read!(self, |db| workflows::prune_workflow_runs(db, &policy, true));
        }
        write!(self, None, |db| workflows::prune_workflow_runs(
            db, &policy, false
        ))
    }
}
