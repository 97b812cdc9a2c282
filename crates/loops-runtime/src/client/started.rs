//! Runs started in this process without waiting for their end: a loop's run-now and a
//! workflow run, as a front end that answers at once needs them (the MCP tools
//! `loops_run_now` and `workflow_run` return the run's id and let it go on). The
//! blocking verbs ([`Client::run_now`], [`Client::run_workflow`]) are these, awaited.
//!
//! A started run lives in this process: whoever holds it must let it finish (await
//! [`StartedRun::finish`], or keep the task that does) or interrupt it before the
//! process exits, or it is left to the daemon's recovery (`abandoned`, or adopted
//! while its process lives).

use super::{Client, ClientError, Result, RunNowOutcome};
use crate::engine::Engine;
use crate::workflow::{RunContext, RunEnd};
use loops_core::workflow::{Workflow, WorkflowRun};
use loops_core::{Loop, Run, RunSource, WorkflowStatus};
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// A loop run claimed by [`Client::start_run_now`]: `running` in the store, its
/// process not started until [`StartedRun::finish`] is polled.
pub struct StartedRun {
    /// The run as claimed (`running`).
    pub run: Run,
    /// Which slot it is (see [`RunNowOutcome::source`]).
    pub source: RunSource,
    lp: Loop,
    engine: Arc<Engine>,
    /// This process's runner lease on a store with runners (PostgreSQL): held until
    /// the run ended, so its writes are fenced and it is recovered should we die.
    _runner: Option<super::CliRunner>,
    client: Client,
}

impl StartedRun {
    /// Executes the run here and returns it as recorded once it ended and the
    /// notifications it queued were delivered (bounded by
    /// [`crate::notify::CLI_DELIVERY_BOUND`]); a daemon is poked to re-plan (the loop's
    /// next slot may have moved).
    pub async fn finish(self) -> Result<RunNowOutcome> {
        let _renewal = self.engine.spawn_lease_renewal();
        let run = self.engine.finish_claimed(&self.lp, self.run).await?;
        // The loop's next slot may have moved: let a daemon re-plan.
        crate::wake::poke(self.client.data_dir());
        self.client.deliver_queued(&self.engine).await;
        Ok(RunNowOutcome {
            run,
            source: self.source,
        })
    }

    /// A handle that interrupts the run from elsewhere (its process group terminated;
    /// recorded `abandoned` with `reason`).
    pub fn interrupter(&self) -> Interrupter {
        Interrupter(Interrupt::Engine(Arc::clone(&self.engine)))
    }
}

/// A workflow run started by [`Client::start_workflow_run`]: its attempt is recorded,
/// and it goes on in a task of this process.
pub struct StartedWorkflowRun {
    /// The run as its attempt started (`running`).
    pub run: WorkflowRun,
    interrupt: Arc<watch::Sender<Option<String>>>,
    task: tokio::task::JoinHandle<Result<RunEnd>>,
}

impl StartedWorkflowRun {
    /// Waits for the run's end.
    pub async fn finish(self) -> Result<RunEnd> {
        join(self.task).await
    }

    /// A handle that interrupts the run from elsewhere (running steps terminated; the
    /// run ends [`RunEnd::Interrupted`] with `reason`).
    pub fn interrupter(&self) -> Interrupter {
        Interrupter(Interrupt::Workflow(Arc::clone(&self.interrupt)))
    }
}

/// Interrupts a started run (see [`StartedRun::interrupter`],
/// [`StartedWorkflowRun::interrupter`]).
#[derive(Clone)]
pub struct Interrupter(Interrupt);

#[derive(Clone)]
enum Interrupt {
    Engine(Arc<Engine>),
    Workflow(Arc<watch::Sender<Option<String>>>),
}

impl Interrupter {
    /// Asks the run to stop, recording `reason`; returns at once.
    pub fn interrupt(&self, reason: &str) {
        match &self.0 {
            Interrupt::Engine(engine) => engine.cancel_all(reason),
            Interrupt::Workflow(tx) => {
                tx.send_replace(Some(reason.to_owned()));
            }
        }
    }
}

async fn join<T>(task: tokio::task::JoinHandle<Result<T>>) -> Result<T> {
    task.await.unwrap_or_else(|e| {
        Err(ClientError::Refused(format!(
            "the run's task ended abnormally: {e}"
        )))
    })
}

impl Client {
    /// Claims a run of a loop as [`Client::run_now`] does (the due slot or pending
    /// retry when one is due, else an ad-hoc slot; refused with a run in flight under
    /// overlap `skip` unless `allow_overlap`) and returns it without executing it.
    pub fn start_run_now(&self, key: &str, allow_overlap: bool) -> Result<StartedRun> {
        let lp = self.get(key)?;
        super::refuse_archived(&lp)?;
        let (engine, runner) = self.engine(crate::engine::DEFAULT_MAX_CONCURRENT)?;
        let (run, source) = engine.claim_now(&lp, allow_overlap)?;
        Ok(StartedRun {
            run,
            source,
            lp,
            engine,
            _runner: runner,
            client: self.clone(),
        })
    }

    /// Resolves a workflow to run: as [`Client::get_workflow`], refusing an archived
    /// version.
    pub fn runnable_workflow(&self, key: &str) -> Result<Workflow> {
        let workflow = self.get_workflow(key)?;
        if workflow.status != WorkflowStatus::Active {
            return Err(ClientError::Invalid(format!(
                "workflow {} v{} is archived",
                workflow.name, workflow.version
            )));
        }
        Ok(workflow)
    }

    /// Starts `workflow` with `params` in a task of this process, as
    /// [`Client::run_workflow`] runs it, and returns once its attempt is recorded.
    /// Params that do not fit the spec are refused before anything is recorded.
    pub async fn start_workflow_run(
        &self,
        workflow: &Workflow,
        timeout: Option<std::time::Duration>,
        params: &loops_core::workflow_params::ParamValues,
    ) -> Result<StartedWorkflowRun> {
        check_params(workflow, params)?;
        let (interrupt, rx) = watch::channel(None::<String>);
        let (started_tx, started_rx) = oneshot::channel();
        let ctx = self.workflow_context(timeout, params, rx);
        let workflow = workflow.clone();
        let task = tokio::spawn(async move {
            Ok(crate::workflow::run_observed(&ctx, &workflow, Some(started_tx)).await?)
        });
        match started_rx.await {
            Ok(run) => Ok(StartedWorkflowRun {
                run,
                interrupt: Arc::new(interrupt),
                task,
            }),
            // The run ended before its attempt was recorded: say why.
            Err(_) => match join(task).await {
                Err(e) => Err(e),
                Ok(end) => Err(ClientError::Refused(format!(
                    "workflow run {} ended before it started",
                    end.run().id
                ))),
            },
        }
    }

    /// What a workflow run started by this client needs: this store, no daemon fence,
    /// the system clock, not a loop's slot.
    pub(super) fn workflow_context(
        &self,
        timeout: Option<std::time::Duration>,
        params: &loops_core::workflow_params::ParamValues,
        interrupt: watch::Receiver<Option<String>>,
    ) -> RunContext {
        RunContext {
            params: params.clone(),
            store: Arc::clone(&self.store),
            fence: None,
            exec: crate::targets::ExecSettings::for_data_dir(&self.data_dir),
            clock: Arc::new(crate::clock::SystemClock),
            origin: None,
            loop_metadata: Vec::new(),
            timeout,
            interrupt,
        }
    }
}

/// Refuses `params` that do not fit `workflow`'s spec, in the spec's own words: a name
/// it does not declare, a required one left out, a value that makes a step invalid.
pub(super) fn check_params(
    workflow: &Workflow,
    params: &loops_core::workflow_params::ParamValues,
) -> Result<()> {
    use loops_core::workflow_params::{resolve, substitute};
    resolve(&workflow.spec, params)
        .and_then(|values| substitute(&workflow.spec, &values))
        .map(|_| ())
        .map_err(|e| ClientError::Invalid(e.0))
}
