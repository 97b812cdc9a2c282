//! The scheduler engine: one `tick` pass (recover → expire → due slots → claim →
//! dispatch), concurrent execution of claimed runs under a global limit, batched lease
//! heartbeats, finalization and loop advancement. Used by the daemon, `loops tick` and
//! `loops run-now`.
//!
//! Invariants:
//! - a slot attempt is claimed through the store's single conditional write, so any
//!   number of engines (daemon, CLI) never run the same attempt twice;
//! - a loop is advanced in the same transaction as its claim (see
//!   `loops_core::transitions`), so a due loop never stays due while its run executes;
//! - every run this engine claims is finalized, whatever happens to the child;
//! - with a fence (daemon mode) every write applies only while the daemon lease is held;
//!   the first rejected write marks the lease lost and cancels every run.

use crate::executor::{execute, ExecResult, ExecStatus};
use crate::process::{hostname, is_same_process_alive, process_start_time};
use crate::recorder::{plan_after_finish, Recorder};
use crate::spool::Spool;
use crate::targets::{exec_spec, SpecError};
use loops_core::schedule::due_slots;
use loops_core::transitions::on_claim;
use loops_core::{
    format_instant, Instant, Loop, LoopId, Overlap, Run, RunId, RunOutcome, RunSource, RunStatus,
};
use loops_store::{
    BatchClaim, ClaimRefused, ClaimRequest, Fence, RunWrite, RunWritten, Store, StoreError,
    UnreadableLoop,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

/// Default bound on runs executing at once.
pub const DEFAULT_MAX_CONCURRENT: usize = 64;
/// Most due loops looked at in one pass; the rest are picked up by the next pass.
const DUE_BATCH: usize = 2_048;

/// Errors that stop the engine (run failures are data, never errors).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("daemon lease lost")]
    LeaseLost,
    /// `run-now` of a loop with overlap `skip` while one of its runs is in flight.
    #[error("loop {name:?} is already running (run {run}, started {since}); its overlap policy is skip (use --allow-overlap to start another run anyway)")]
    Busy {
        name: String,
        run: RunId,
        since: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Schedule(#[from] loops_core::schedule::ScheduleError),
    #[error("cannot start the run recorder thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl EngineError {
    fn from_store(e: StoreError) -> Self {
        match e {
            StoreError::LeaseLost => EngineError::LeaseLost,
            other => EngineError::Store(other),
        }
    }
}

/// Source of the current instant; injected so scheduling decisions are testable.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        chrono::Utc::now()
    }
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Identifies this engine in `claimedBy`: `host/pid/start-time`.
    pub runner_id: String,
    pub max_concurrent: usize,
    pub kill_grace: Duration,
    pub max_output_bytes: usize,
    /// Daemon lease fence; `None` for CLI engines.
    pub fence: Option<Fence>,
    /// Adopt live processes of runs whose runner died (daemon only).
    pub adopt_orphans: bool,
    /// Home dir whose user bin dirs extend PATH.
    pub home: Option<PathBuf>,
    /// Where running output is spooled (`<data dir>/spool`); `None` keeps it in memory
    /// only, so a runner that dies loses it.
    pub spool: Option<Spool>,
}

impl EngineConfig {
    /// Defaults for a runner in this process.
    pub fn for_this_process() -> Self {
        Self {
            runner_id: this_runner_id(),
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            kill_grace: crate::executor::DEFAULT_KILL_GRACE,
            max_output_bytes: crate::executor::DEFAULT_MAX_OUTPUT_BYTES,
            fence: None,
            adopt_orphans: false,
            home: std::env::var_os("HOME").map(PathBuf::from),
            spool: None,
        }
    }

    /// [`Self::for_this_process`], spooling output in `data_dir`.
    pub fn for_data_dir(data_dir: &std::path::Path) -> Self {
        Self {
            spool: Some(Spool::in_data_dir(data_dir)),
            ..Self::for_this_process()
        }
    }
}

/// `host/pid/start-time` of the current process.
pub fn this_runner_id() -> String {
    let pid = std::process::id();
    let start = process_start_time(pid).unwrap_or(0);
    format!("{}/{pid}/{start}", hostname())
}

/// Splits a runner id into (host, pid, start time).
pub fn parse_runner_id(id: &str) -> Option<(&str, u32, Option<u64>)> {
    let mut parts = id.rsplitn(3, '/');
    let start = parts.next()?.parse::<u64>().ok();
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    Some((host, pid, start.filter(|s| *s != 0)))
}

/// What one `tick` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    pub claimed: Vec<RunId>,
    pub skipped: Vec<RunId>,
    pub recovered: Vec<RunId>,
    pub adopted: Vec<RunId>,
    pub expired: Vec<LoopId>,
    /// Due work was left because every concurrency slot is busy.
    pub saturated: bool,
    /// Rows of other runners are running (known only after a recovering pass): they
    /// need another look once their runner dies or their lease expires.
    pub foreign_running: bool,
    /// Loops taken out of scheduling because they can no longer be scheduled.
    pub parked: Vec<LoopId>,
}

struct InFlight {
    cancel: watch::Sender<Option<String>>,
}

/// The scheduler engine. Cheap to share: wrap in `Arc`.
pub struct Engine {
    store: Arc<dyn Store>,
    cfg: EngineConfig,
    clock: Arc<dyn Clock>,
    permits: Arc<Semaphore>,
    inflight: Mutex<HashMap<RunId, InFlight>>,
    /// Group-commits pid records and finalizations (see [`crate::recorder`]).
    recorder: Recorder,
    active_tasks: AtomicUsize,
    /// Signalled whenever a run finishes (`drain`, `tick` waits).
    finished: Notify,
    /// Signalled when a finished run changes what is due (see [`Engine::replan_needed`]).
    replan: Notify,
    /// The last pass left due work for want of a free slot.
    saturated: AtomicBool,
    lease_lost: AtomicBool,
    host: String,
}

impl Engine {
    pub fn new(
        store: Arc<dyn Store>,
        cfg: EngineConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, EngineError> {
        let permits = Arc::new(Semaphore::new(cfg.max_concurrent.max(1)));
        if let Some(spool) = &cfg.spool {
            if let Err(e) = spool.ensure() {
                // Runs still work; their output is only kept in memory until they end.
                tracing::warn!(dir = %spool.dir().display(), error = %e, "cannot create the output spool");
            }
        }
        let recorder = Recorder::start(Arc::clone(&store), cfg.fence.clone(), Arc::clone(&clock))
            .map_err(EngineError::Thread)?;
        Ok(Arc::new(Self {
            store,
            permits,
            inflight: Mutex::new(HashMap::new()),
            recorder,
            active_tasks: AtomicUsize::new(0),
            finished: Notify::new(),
            replan: Notify::new(),
            saturated: AtomicBool::new(false),
            lease_lost: AtomicBool::new(false),
            host: hostname(),
            cfg,
            clock,
        }))
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    fn fence(&self) -> Option<&Fence> {
        self.cfg.fence.as_ref()
    }

    /// Whether a fenced write was rejected.
    pub fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::SeqCst)
    }

    /// Runs currently executing (or being adopted) by this engine.
    pub fn running_count(&self) -> usize {
        self.active_tasks.load(Ordering::SeqCst)
    }

    /// Resolves when some run of this engine finishes.
    pub async fn run_finished(&self) {
        self.finished.notified().await;
    }

    /// Waits until every run this engine started has been finalized.
    pub async fn drain(&self) {
        loop {
            let notified = self.finished.notified();
            if self.running_count() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Asks every in-flight run to stop (SIGTERM, grace, SIGKILL); each is finalized
    /// with `reason` as its error.
    pub fn cancel_all(&self, reason: &str) {
        let inflight = lock(&self.inflight);
        for run in inflight.values() {
            let _ = run.cancel.send(Some(reason.to_owned()));
        }
    }

    fn note_store_error(&self, e: StoreError) -> EngineError {
        self.note_store_error_ref(&e);
        EngineError::from_store(e)
    }

    /// One full scheduling pass (recover, expire, dispatch). Claimed runs execute on
    /// spawned tasks; await [`Self::drain`] to wait for them.
    pub fn tick(self: &Arc<Self>) -> Result<TickReport, EngineError> {
        self.pass(true)
    }

    /// A scheduling pass; `recover` includes the (costlier) reconciliation of other
    /// runners' rows, which the daemon runs on its own cadence rather than on every
    /// wake-up.
    pub fn pass(self: &Arc<Self>, recover: bool) -> Result<TickReport, EngineError> {
        let now = self.clock.now();
        let mut report = TickReport::default();
        self.saturated.store(false, Ordering::SeqCst);
        if recover {
            self.recover(now, &mut report)?;
        }
        let expired = self
            .store
            .expire_loops(now, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        report.expired = expired.into_iter().map(|l| l.id).collect();
        // Fetch no more due loops than can start now: decoding rows that must wait for
        // a free slot is wasted work on every pass.
        let free = self.permits.available_permits();
        if free == 0 {
            report.saturated = true;
        } else {
            let due = self.store.due_loops(now, free.min(DUE_BATCH))?;
            let full = due.len() >= free.min(DUE_BATCH);
            report.saturated |= !self.dispatch(due, now, &mut report)?;
            // More may be due than were fetched: come back once a run frees a slot.
            report.saturated |= full && self.permits.available_permits() == 0;
        }
        if report.saturated {
            self.saturated.store(true, Ordering::SeqCst);
        }
        Ok(report)
    }

    /// Resolves when the daemon should plan again: a run finished while every slot was
    /// busy, or a finished run moved its loop's next slot.
    pub async fn replan_needed(&self) {
        self.replan.notified().await;
    }

    /// Claims a due slot of every loop in `due` in one transaction (each claim advancing
    /// its loop) and starts the claimed runs. Returns false when it ran out of
    /// concurrency slots before the end of `due`.
    fn dispatch(
        self: &Arc<Self>,
        due: Vec<Result<Loop, UnreadableLoop>>,
        now: Instant,
        report: &mut TickReport,
    ) -> Result<bool, EngineError> {
        struct Planned {
            lp: Loop,
            slots: Vec<Instant>,
            permit: OwnedSemaphorePermit,
        }
        let mut planned = Vec::with_capacity(due.len());
        let mut claims = Vec::with_capacity(due.len());
        let mut all_fit = true;
        // The claims' own instant: `startedAt` must not be the pass's start.
        let claim_now = self.clock.now();
        for lp in due {
            // One loop that cannot be scheduled must not stop the others (nor come
            // back due on every pass): it is parked, and the pass goes on.
            let lp = match lp {
                Ok(lp) => lp,
                Err(UnreadableLoop { id, name, error }) => {
                    let reason = format!("its stored definition cannot be read: {error}");
                    self.park(&id, &name, &reason, now, report)?;
                    continue;
                }
            };
            let plan = due_slots(&lp, now).and_then(|slots| {
                let last = slots.last().copied();
                let advance = match last {
                    Some(last) => on_claim(&lp, last, RunSource::Scheduled, now)?,
                    None => None,
                };
                Ok((slots, advance))
            });
            let (slots, advance) = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    let reason = format!("its schedule cannot be computed: {e}");
                    self.park(&lp.id, &lp.name, &reason, now, report)?;
                    continue;
                }
            };
            let Some(&first) = slots.first() else {
                continue;
            };
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                all_fit = false;
                break;
            };
            claims.push(BatchClaim {
                request: ClaimRequest {
                    loop_id: lp.id.clone(),
                    scheduled_for: first,
                    runner_id: self.cfg.runner_id.clone(),
                    source: RunSource::Scheduled,
                    now: claim_now,
                    require_no_running: lp.overlap == Overlap::Skip,
                },
                advance,
            });
            planned.push(Planned { lp, slots, permit });
        }
        let results = self
            .store
            .claim_runs(&claims, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        // Every claimed run is started, whatever happens to the others: an error while
        // recording one loop's skipped slot must not strand the runs claimed beside it.
        let mut failed = None;
        for ((plan, claim), result) in planned.into_iter().zip(claims).zip(results) {
            let Planned { lp, slots, permit } = plan;
            let name = lp.name.clone();
            let recorded = match result {
                Ok(run) => {
                    report.claimed.push(run.id.clone());
                    self.spawn_batch(lp, run, slots[1..].to_vec(), permit);
                    Ok(())
                }
                Err(ClaimRefused::LoopBusy) => {
                    drop(permit);
                    self.skip_slots(&lp, &slots, claim.advance, now, report)
                }
                Err(ClaimRefused::SlotDone | ClaimRefused::SlotRunning) => {
                    // Someone else (run-now, another runner) has this slot; move past it.
                    self.advance_without_run(&lp, claim.advance, now)
                }
                Err(ClaimRefused::LoopNotActive) => Ok(()),
            };
            match recorded {
                // Removed meanwhile: nothing left to record.
                Err(EngineError::Store(StoreError::LoopNotFound(_))) => {}
                Err(e) => {
                    // The loop was not advanced, so the next pass sees the slot again.
                    tracing::debug!(loop_name = %name, error = %e, "could not record a refused claim");
                    failed.get_or_insert(e);
                }
                Ok(()) => {}
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(all_fit),
        }
    }

    /// Overlap `skip`: records a `skipped` run for each due slot and advances the loop.
    fn skip_slots(
        &self,
        lp: &Loop,
        slots: &[Instant],
        advance: Option<loops_core::transitions::LoopAdvance>,
        now: Instant,
        report: &mut TickReport,
    ) -> Result<(), EngineError> {
        for slot in slots {
            let skipped = self
                .store
                .record_skipped_run(lp, *slot, "previous run still active", now, self.fence())
                .map_err(|e| self.note_store_error(e))?;
            report.skipped.push(skipped.id);
        }
        self.advance_without_run(lp, advance, now)
    }

    /// Takes a loop that cannot be scheduled out of scheduling: paused, with a failed
    /// run saying why. Logged once: a parked loop is no longer due.
    fn park(
        &self,
        id: &LoopId,
        name: &str,
        reason: &str,
        now: Instant,
        report: &mut TickReport,
    ) -> Result<(), EngineError> {
        let reason = format!("loop parked (paused): {reason}; fix it, then `loops resume`");
        let parked = self
            .store
            .park_loop(id, &reason, now, self.fence())
            .map_err(|e| self.note_store_error(e))?;
        if let Some(run) = parked {
            tracing::error!(loop_id = %id, name, run = %run.id, %reason, "loop parked");
            report.parked.push(id.clone());
        }
        Ok(())
    }

    fn advance_without_run(
        &self,
        lp: &Loop,
        advance: Option<loops_core::transitions::LoopAdvance>,
        now: Instant,
    ) -> Result<(), EngineError> {
        if let Some(advance) = advance {
            self.store
                .update_loop_schedule(&lp.id, &advance, now, self.fence())
                .map_err(|e| self.note_store_error(e))?;
        }
        Ok(())
    }

    /// Executes `first` and then the remaining catch-up slots of the batch, in order,
    /// on one task (they are one loop's backlog and must not overlap each other).
    fn spawn_batch(
        self: &Arc<Self>,
        lp: Loop,
        first: Run,
        rest: Vec<Instant>,
        permit: OwnedSemaphorePermit,
    ) {
        let engine = Arc::clone(self);
        self.active_tasks.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _permit = permit;
            let mut next = Some(first);
            let mut rest = rest.into_iter();
            while let Some(run) = next.take() {
                let finished = engine.execute_claimed(&lp, run).await;
                let retry_pending = finished
                    .as_ref()
                    .is_some_and(|r| r.status.is_failure() && r.attempt < lp.max_attempts);
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
                    match engine.store.claim_run(&req, engine.fence()) {
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
            engine.active_tasks.fetch_sub(1, Ordering::SeqCst);
            engine.finished.notify_waiters();
        });
    }

    /// Executes one claimed run to its end, finalizes it and advances its loop.
    /// Returns the finalized run (`None` when finalizing was rejected).
    pub async fn execute_claimed(&self, lp: &Loop, run: Run) -> Option<Run> {
        let (cancel_tx, mut cancel_rx) = watch::channel(None::<String>);
        lock(&self.inflight).insert(run.id.clone(), InFlight { cancel: cancel_tx });
        if self.lease_lost() {
            let _ = lock(&self.inflight)
                .get(&run.id)
                .map(|f| f.cancel.send(Some("daemon lease lost".into())));
        }
        if let loops_core::Target::Workflow(target) = &lp.target {
            let outcome = self.run_workflow_target(lp, &run, target, cancel_rx).await;
            lock(&self.inflight).remove(&run.id);
            return match outcome {
                Some(outcome) => self.finalize_and_advance(&run, &outcome).await,
                None => None,
            };
        }
        let (result, spec_error) = match exec_spec(lp, &run, &self.cfg) {
            Ok(mut spec) => {
                spec.spool = self.cfg.spool.as_ref().map(|s| s.for_run(&run.id));
                let on_spawn = |pid: u32, start: Option<u64>| {
                    self.recorder.send(RunWrite::Spawned {
                        run: run.id.clone(),
                        pid,
                        pid_start_time: start,
                        at: self.clock.now(),
                    });
                };
                let cancel = async move {
                    if cancel_rx.wait_for(Option::is_some).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                };
                (Some(execute(spec, on_spawn, cancel).await), None)
            }
            Err(SpecError(message)) => (None, Some(message)),
        };
        let reason = lock(&self.inflight)
            .remove(&run.id)
            .and_then(|f| f.cancel.borrow().clone());
        let outcome = match result {
            Some(result) => {
                let mut outcome = outcome_from(result, reason);
                if let loops_core::Target::Agent(agent) = &lp.target {
                    crate::providers::interpret(agent, &mut outcome);
                }
                outcome
            }
            None => RunOutcome {
                status: RunStatus::Failed,
                finished_at: self.clock.now(),
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                error: spec_error,
                summary: None,
                usage: None,
            },
        };
        self.finalize_and_advance(&run, &outcome).await
    }

    /// A loop whose target is a workflow: runs (or continues) the slot's workflow run
    /// and turns its result into the loop run's outcome. `None` when the run was
    /// interrupted before it changed anything (the loop run stays running).
    async fn run_workflow_target(
        &self,
        lp: &Loop,
        run: &Run,
        target: &loops_core::WorkflowTarget,
        interrupt: watch::Receiver<Option<String>>,
    ) -> Option<RunOutcome> {
        let failed = |error: String| RunOutcome {
            status: RunStatus::Failed,
            finished_at: self.clock.now(),
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            error: Some(error),
            summary: None,
            usage: None,
        };
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
            cfg: self.cfg.clone(),
            origin: Some(origin),
            loop_metadata: crate::targets::run_metadata(lp, run),
            timeout: target.timeout_ms.map(Duration::from_millis),
            interrupt,
        };
        match crate::workflow::run(&ctx, &workflow).await {
            // Interrupted before the run changed (still waiting on a step process that
            // outlived a runner): left as it is, for the next daemon to adopt.
            Ok(wf_run) if wf_run.status == loops_core::WorkflowRunStatus::Running => None,
            Ok(wf_run) => {
                let steps = self.store.step_runs(&wf_run.id).unwrap_or_default();
                let status = match wf_run.status {
                    loops_core::WorkflowRunStatus::Succeeded => RunStatus::Succeeded,
                    loops_core::WorkflowRunStatus::TimedOut => RunStatus::TimedOut,
                    _ if wf_run
                        .error
                        .as_deref()
                        .is_some_and(|e| e.starts_with("interrupted")) =>
                    {
                        RunStatus::Abandoned
                    }
                    _ => RunStatus::Failed,
                };
                let summary: Vec<serde_json::Value> = steps
                    .iter()
                    .map(|s| serde_json::json!({"stepId": s.step_id, "status": s.status, "exitCode": s.exit_code, "error": s.error, "summary": s.summary}))
                    .collect();
                Some(RunOutcome {
                    status,
                    finished_at: self.clock.now(),
                    exit_code: None,
                    stdout: serde_json::to_string_pretty(
                        &serde_json::json!({ "workflowRun": wf_run, "steps": summary }),
                    )
                    .unwrap_or_default(),
                    stderr: String::new(),
                    error: wf_run
                        .error
                        .clone()
                        .map(|e| format!("workflow run {}: {e}", wf_run.id)),
                    summary: Some(format!("workflow run {} {}", wf_run.id, wf_run.status)),
                    usage: None,
                })
            }
            Err(e) => {
                self.note_store_error_ref(&e);
                Some(failed(format!("workflow run failed to record: {e}")))
            }
        }
    }

    /// The first rejected fenced write marks the lease lost and cancels every run.
    fn note_store_error_ref(&self, e: &StoreError) {
        if matches!(e, StoreError::LeaseLost) && !self.lease_lost.swap(true, Ordering::SeqCst) {
            tracing::error!("daemon lease lost: cancelling all runs");
            self.cancel_all("daemon lease lost");
        }
    }

    /// Finalizes `run` and moves its loop in one transaction (shared with other runs'
    /// writes by the recorder). Returns the finalized run, `None` when rejected.
    async fn finalize_and_advance(&self, run: &Run, outcome: &RunOutcome) -> Option<Run> {
        let write = RunWrite::Finished {
            run: run.id.clone(),
            outcome: outcome.clone(),
        };
        match self.recorder.write(write).await {
            Ok(RunWritten::Finished { run, loop_moved }) => {
                if let Some(spool) = &self.cfg.spool {
                    spool.for_run(&run.id).remove();
                }
                if loop_moved || self.saturated.load(Ordering::SeqCst) {
                    self.replan.notify_one();
                }
                Some(*run)
            }
            Ok(RunWritten::Spawned) => None,
            Err(e) => {
                let e = self.note_store_error(e);
                tracing::warn!(run = %run.id, error = %e, "could not finalize run");
                None
            }
        }
    }

    /// Step 1 of a tick: running rows whose runner is gone (lease expired, or its
    /// process on this host no longer exists). A daemon adopts a row whose process
    /// still lives (watched until it exits) and a workflow target's row (its workflow
    /// run is continued where it stopped); every other such row is abandoned, keeping
    /// the output spooled before its runner died.
    fn recover(self: &Arc<Self>, now: Instant, report: &mut TickReport) -> Result<(), EngineError> {
        let running = self.store.running_runs(None)?;
        for run in running {
            if lock(&self.inflight).contains_key(&run.id) {
                continue;
            }
            if !self.runner_gone(&run, now) {
                report.foreign_running = true;
                continue;
            }
            let on_this_host = run
                .claimed_by
                .as_deref()
                .and_then(parse_runner_id)
                .is_none_or(|(host, _, _)| host == self.host);
            let alive = on_this_host
                && run
                    .pid
                    .is_some_and(|pid| is_same_process_alive(pid, run.pid_start_time));
            if alive {
                report.foreign_running = true;
                if self.cfg.adopt_orphans {
                    self.adopt(run, now, report)?;
                }
                continue;
            }
            let lp = self.store.get_loop(&run.loop_id)?;
            let workflow = lp
                .as_ref()
                .is_some_and(|l| matches!(l.target, loops_core::Target::Workflow(_)));
            if let (true, true, Some(lp)) = (workflow, self.cfg.adopt_orphans, lp) {
                self.continue_workflow(lp, run, now, report)?;
                continue;
            }
            let spooled = self.cfg.spool.as_ref().map(|s| s.for_run(&run.id));
            let (stdout, stderr) = spooled
                .as_ref()
                .map(|files| files.read(self.cfg.max_output_bytes))
                .unwrap_or_default();
            let outcome = RunOutcome {
                status: RunStatus::Abandoned,
                finished_at: now,
                exit_code: None,
                stdout: run
                    .stdout
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or(stdout),
                stderr: run
                    .stderr
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or(stderr),
                error: Some(match run.pid {
                    _ if workflow => "abandoned: runner gone; the slot's workflow run continues \
                                      with its next attempt"
                        .to_owned(),
                    Some(pid) => {
                        format!("abandoned: runner gone and process {pid} no longer exists")
                    }
                    None => "abandoned: runner gone before the process started".to_owned(),
                }),
                summary: None,
                usage: None,
            };
            let write = RunWrite::Finished {
                run: run.id.clone(),
                outcome,
            };
            let written = self
                .store
                .record_run_writes(&[write], now, self.fence(), &plan_after_finish)
                .map_err(|e| self.note_store_error(e))?;
            match written.into_iter().next() {
                Some(Ok(_)) => {
                    if let Some(files) = spooled {
                        files.remove();
                    }
                    report.recovered.push(run.id.clone());
                    self.replan.notify_one();
                }
                Some(Err(StoreError::NotRunning(_))) | None => {}
                Some(Err(e)) => return Err(self.note_store_error(e)),
            }
        }
        Ok(())
    }

    /// Moves a dead runner's row to this engine (fresh lease, renewed by our
    /// heartbeat). `None` when someone else finalized or took it meanwhile.
    fn take_over(&self, run: &Run, now: Instant) -> Result<Option<Run>, EngineError> {
        match self.store.take_over_run(
            &run.id,
            run.claimed_by.as_deref(),
            &self.cfg.runner_id,
            now,
            self.fence(),
        ) {
            Ok(run) => Ok(Some(run)),
            Err(e) if e.is_per_row() => Ok(None),
            Err(e) => Err(self.note_store_error(e)),
        }
    }

    /// Continues a workflow target's run whose runner died: the slot's workflow run
    /// picks up where it stopped (finished steps kept, a step whose process outlived
    /// the runner recorded, never started again), as this engine's run.
    fn continue_workflow(
        self: &Arc<Self>,
        lp: Loop,
        run: Run,
        now: Instant,
        report: &mut TickReport,
    ) -> Result<(), EngineError> {
        let Some(run) = self.take_over(&run, now)? else {
            return Ok(());
        };
        tracing::info!(run = %run.id, loop_name = %lp.name, "continuing a workflow run whose runner died");
        report.adopted.push(run.id.clone());
        let engine = Arc::clone(self);
        self.active_tasks.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            engine.execute_claimed(&lp, run).await;
            engine.active_tasks.fetch_sub(1, Ordering::SeqCst);
            engine.finished.notify_waiters();
        });
        Ok(())
    }

    /// Whether the runner that claimed `run` can no longer finish it.
    fn runner_gone(&self, run: &Run, now: Instant) -> bool {
        if run.lease_expires_at.is_none_or(|t| t <= now) {
            return true;
        }
        match run.claimed_by.as_deref().and_then(parse_runner_id) {
            Some((host, pid, start)) if host == self.host => {
                run.claimed_by.as_deref() != Some(self.cfg.runner_id.as_str())
                    && !is_same_process_alive(pid, start)
            }
            _ => false,
        }
    }

    /// Watches a live orphaned process until it exits, keeping its lease fresh, then
    /// records it as abandoned (its exit status cannot be known: it is not our child)
    /// with the output spooled before its runner died.
    fn adopt(
        self: &Arc<Self>,
        run: Run,
        now: Instant,
        report: &mut TickReport,
    ) -> Result<(), EngineError> {
        let Some(run) = self.take_over(&run, now)? else {
            return Ok(());
        };
        report.adopted.push(run.id.clone());
        let engine = Arc::clone(self);
        let (cancel_tx, mut cancel_rx) = watch::channel(None::<String>);
        lock(&self.inflight).insert(run.id.clone(), InFlight { cancel: cancel_tx });
        self.active_tasks.fetch_add(1, Ordering::SeqCst);
        tracing::info!(run = %run.id, pid = ?run.pid, "adopting a run whose process outlived its runner");
        tokio::spawn(async move {
            let pid = run.pid.unwrap_or(0);
            let mut cancelled = None;
            while is_same_process_alive(pid, run.pid_start_time) {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    r = cancel_rx.wait_for(Option::is_some) => {
                        cancelled = r.ok().and_then(|v| v.clone());
                        break;
                    }
                }
            }
            lock(&engine.inflight).remove(&run.id);
            if let Some(reason) = &cancelled {
                // Shutdown or lease loss: leave the process alone and the row running, so
                // the next daemon adopts it again.
                tracing::info!(run = %run.id, %reason, "stopped watching adopted run");
            } else {
                let (stdout, stderr) = engine
                    .cfg
                    .spool
                    .as_ref()
                    .map(|s| s.for_run(&run.id).read(engine.cfg.max_output_bytes))
                    .unwrap_or_default();
                let outcome = RunOutcome {
                    status: RunStatus::Abandoned,
                    finished_at: engine.clock.now(),
                    exit_code: None,
                    stdout,
                    stderr,
                    error: Some(format!(
                        "process {pid} exited while adopted after its runner died; exit status unknown"
                    )),
                    summary: None,
                    usage: None,
                };
                engine.finalize_and_advance(&run, &outcome).await;
            }
            engine.active_tasks.fetch_sub(1, Ordering::SeqCst);
            engine.finished.notify_waiters();
        });
        Ok(())
    }

    /// Moves back every active loop whose next slot lies further ahead than its
    /// schedule can explain, as after the wall clock went backwards (see
    /// [`loops_core::schedule::replan_after_clock_jump`]). Returns the loops moved.
    /// A loop whose schedule does not compute is left to the next pass, which parks it.
    pub fn replan_after_clock_jump(&self) -> Result<Vec<LoopId>, EngineError> {
        let now = self.clock.now();
        let mut moved = Vec::new();
        for lp in self
            .store
            .list_loops(Some(loops_core::LoopStatus::Active))?
        {
            let Ok(Some(next)) = loops_core::schedule::replan_after_clock_jump(&lp, now) else {
                continue;
            };
            let advance = loops_core::transitions::LoopAdvance {
                status: lp.status,
                next_run_at: Some(next),
                retry_scheduled_for: lp.retry_scheduled_for,
            };
            self.store
                .update_loop_schedule(&lp.id, &advance, now, self.fence())
                .map_err(|e| self.note_store_error(e))?;
            tracing::warn!(
                loop_name = %lp.name,
                was = %lp.next_run_at.map(|t| format_instant(&t)).unwrap_or_default(),
                now = %format_instant(&next),
                "next slot lay further ahead than the schedule allows (the clock went back?); moved it"
            );
            moved.push(lp.id);
        }
        Ok(moved)
    }

    /// Renews the lease of every run this engine holds, in one write.
    pub fn heartbeat(&self) -> Result<usize, EngineError> {
        let ids: Vec<RunId> = lock(&self.inflight).keys().cloned().collect();
        if ids.is_empty() {
            return Ok(0);
        }
        self.store
            .heartbeat_runs(&ids, &self.cfg.runner_id, self.clock.now(), self.fence())
            .map_err(|e| self.note_store_error(e))
    }

    /// Spawns the heartbeat task: renews run leases every `every` until the engine is
    /// dropped by every other owner.
    pub fn spawn_heartbeat(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                interval.tick().await;
                let Some(engine) = weak.upgrade() else { return };
                if let Err(e) = engine.heartbeat() {
                    tracing::warn!(error = %e, "run heartbeat failed");
                }
            }
        })
    }

    /// `run-now`: claims the loop's due slot (or pending retry slot) when there is one,
    /// else an ad-hoc slot at now, executes it here, and returns the finished run.
    ///
    /// A loop with overlap `skip` gets no second concurrent run: while one of its runs
    /// is in flight (daemon-started or another run-now) this fails with
    /// [`EngineError::Busy`] and claims nothing, unless `allow_overlap`. The check is
    /// part of the claim's transaction, so two concurrent run-nows cannot both pass.
    pub async fn run_now(
        &self,
        lp: &Loop,
        allow_overlap: bool,
    ) -> Result<(Run, RunSource), EngineError> {
        let now = self.clock.now();
        let exclusive = lp.overlap == Overlap::Skip && !allow_overlap;
        let due =
            lp.status == loops_core::LoopStatus::Active && lp.next_run_at.is_some_and(|t| t <= now);
        let mut attempt = None;
        if due {
            let (slot, source) = match (lp.retry_scheduled_for, lp.next_run_at) {
                (Some(retry), _) => (retry, RunSource::RetrySlot),
                (None, Some(next)) => (next, RunSource::DueSlot),
                (None, None) => (now, RunSource::AdHoc),
            };
            let last = if source == RunSource::DueSlot {
                // Catch-up `latest` would coalesce to the newest due slot; run-now takes the
                // persisted one and advances past everything due.
                due_slots(lp, now)?.last().copied().unwrap_or(slot)
            } else {
                slot
            };
            let advance = on_claim(lp, last, source, now)?;
            let req = self.claim_request(lp, slot, source, now, exclusive);
            match self
                .store
                .claim_run_and_advance(&req, advance.as_ref(), self.fence())
                .map_err(|e| self.note_store_error(e))?
            {
                Ok(run) => attempt = Some((run, source)),
                Err(ClaimRefused::LoopBusy) => return Err(self.busy(lp)),
                Err(refused) => tracing::debug!(?refused, "due slot not claimable; running ad hoc"),
            }
        }
        let (run, source) = match attempt {
            Some(found) => found,
            None => {
                let req = self.claim_request(lp, now, RunSource::AdHoc, now, exclusive);
                match self
                    .store
                    .claim_run(&req, self.fence())
                    .map_err(|e| self.note_store_error(e))?
                {
                    Ok(run) => (run, RunSource::AdHoc),
                    Err(ClaimRefused::LoopBusy) => return Err(self.busy(lp)),
                    Err(refused) => {
                        return Err(EngineError::Store(StoreError::Decode(format!(
                            "could not claim an ad-hoc run at {}: {refused:?}",
                            format_instant(&now)
                        ))))
                    }
                }
            }
        };
        self.active_tasks.fetch_add(1, Ordering::SeqCst);
        let finished = self.execute_claimed(lp, run.clone()).await;
        self.active_tasks.fetch_sub(1, Ordering::SeqCst);
        self.finished.notify_waiters();
        let finished = match finished {
            Some(r) => r,
            None => self.store.get_run(&run.id)?.unwrap_or(run),
        };
        Ok((finished, source))
    }

    /// The error for a run-now refused by overlap `skip`, naming the run in flight.
    fn busy(&self, lp: &Loop) -> EngineError {
        let running = self.store.running_runs(Some(&lp.id)).unwrap_or_default();
        let first = running.first();
        EngineError::Busy {
            name: lp.name.clone(),
            run: first
                .map(|r| r.id.clone())
                .unwrap_or_else(|| RunId::new("?")),
            since: first
                .and_then(|r| r.started_at)
                .map(|t| format_instant(&t))
                .unwrap_or_else(|| "just now".to_owned()),
        }
    }

    fn claim_request(
        &self,
        lp: &Loop,
        slot: Instant,
        source: RunSource,
        now: Instant,
        require_no_running: bool,
    ) -> ClaimRequest {
        ClaimRequest {
            loop_id: lp.id.clone(),
            scheduled_for: slot,
            runner_id: self.cfg.runner_id.clone(),
            source,
            now,
            require_no_running,
        }
    }
}

fn outcome_from(result: ExecResult, cancel_reason: Option<String>) -> RunOutcome {
    let (status, error) = match result.status {
        ExecStatus::Succeeded => (RunStatus::Succeeded, None),
        ExecStatus::Failed => (RunStatus::Failed, result.error),
        ExecStatus::TimedOut => (RunStatus::TimedOut, result.error),
        // Interrupted (daemon stop, lease loss): the attempt did not complete.
        ExecStatus::Cancelled => (
            RunStatus::Abandoned,
            Some(format!(
                "interrupted: {}",
                cancel_reason.unwrap_or_else(|| "cancelled".into())
            )),
        ),
    };
    RunOutcome {
        status,
        finished_at: result.finished_at,
        exit_code: result.exit_code,
        stdout: result.stdout,
        stderr: result.stderr,
        error,
        summary: None,
        usage: None,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the map inconsistent (single inserts
    // and removes), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
