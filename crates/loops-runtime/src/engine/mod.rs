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

mod finalize;
pub mod lease_renewal;
mod pass;
mod reattach;
mod recover;
mod run;
mod run_now;
pub use run_now::ServedRequests;
mod stop;
mod workflow_target;

pub use crate::clock::{Clock, ManualClock, SystemClock};
use crate::notify::DeliveryQueue;
use crate::process::{hostname, process_start_time};
use crate::recorder::Recorder;
use crate::targets::ExecSettings;
use loops_core::{LoopId, RunId};
use loops_store::{Fence, Store, StoreError};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, Notify, Semaphore};

/// Default bound on runs executing at once.
pub const DEFAULT_MAX_CONCURRENT: NonZeroUsize = NonZeroUsize::MIN.saturating_add(63);
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

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Identifies this engine in `claimedBy`: `host/pid/start-time`.
    pub runner_id: String,
    /// Most runs executing at once (never zero: the type says so, nobody clamps).
    pub max_concurrent: NonZeroUsize,
    /// Most runs at once per provider, account or kind (`--max-concurrent-per`), within
    /// `max_concurrent`; counted over the store's running rows (`loops_core::caps`).
    pub caps: loops_core::caps::Caps,
    /// Daemon lease fence; `None` for CLI engines.
    pub fence: Option<Fence>,
    /// Adopt live processes of runs whose runner died (daemon only).
    pub adopt_orphans: bool,
    /// How run processes are started and supervised.
    pub exec: ExecSettings,
    /// The runner labels this engine's runner advertises: it claims only loops whose
    /// `runsOn` it has (`daemon run --runner-label`).
    pub runner_labels: Vec<String>,
}

impl EngineConfig {
    /// Defaults for a runner in this process.
    pub fn for_this_process() -> Self {
        Self {
            runner_id: this_runner_id(),
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            caps: loops_core::caps::Caps::new(),
            fence: None,
            adopt_orphans: false,
            exec: ExecSettings::for_this_process(),
            runner_labels: Vec::new(),
        }
    }

    /// [`Self::for_this_process`], spooling output in `data_dir`.
    pub fn for_data_dir(data_dir: &std::path::Path) -> Self {
        Self {
            exec: ExecSettings::for_data_dir(data_dir),
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
pub struct PassReport {
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
    /// Due loops left waiting for a concurrency cap (or for an account of their pool),
    /// with why (`loops_core::caps::Wait::text`): still due, nothing recorded.
    pub waiting: Vec<(LoopId, String)>,
}

/// The runs an engine executes or watches, counted by guards.
#[derive(Default)]
struct Tasks {
    count: AtomicUsize,
    /// Signalled whenever a run finishes (`drain`, `tick` waits).
    finished: Notify,
}

/// Counts one run of the engine from its creation until it is dropped — when the run's
/// task ends, returns early or panics — so `drain` can never wait on a count that a
/// failed task forgot to give back.
struct TaskGuard(Arc<Tasks>);

impl TaskGuard {
    fn new(tasks: &Arc<Tasks>) -> Self {
        tasks.count.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(tasks))
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.finished.notify_waiters();
    }
}

struct InFlight {
    cancel: watch::Sender<Option<String>>,
    /// The run's lease, which the heartbeat renews every third of.
    lease: std::time::Duration,
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
    /// Notifications queued by this engine's finalizations, for whoever delivers them
    /// (the daemon's notifier; `tick` / `run-now` before they exit).
    deliveries: Arc<DeliveryQueue>,
    /// Runs executing (or being adopted); each counted by a [`TaskGuard`].
    tasks: Arc<Tasks>,
    /// Signalled when a finished run changes what is due (see [`Engine::replan_needed`]).
    replan: Notify,
    /// Signalled when a run starts whose lease needs a shorter heartbeat period than
    /// the one planned ([`Engine::heartbeat_every`]), so the heartbeat re-plans.
    run_started: Arc<Notify>,
    /// The heartbeat task's current period, in milliseconds.
    beat_every_ms: AtomicU64,
    /// The last pass left due work for want of a free slot.
    saturated: AtomicBool,
    /// How many due loops the last pass left waiting for a cap: the next pass fetches
    /// that many more, so the loops behind them are not starved.
    cap_waiting: AtomicUsize,
    lease_lost: AtomicBool,
    host: String,
}

impl Engine {
    /// Counts a run until the returned guard is dropped.
    fn task(&self) -> TaskGuard {
        TaskGuard::new(&self.tasks)
    }

    /// Registers a run this engine holds until [`Engine::release`]: its cancel switch
    /// and its lease, renewed from now on by the heartbeat. `run`'s recorded lease
    /// expiry says when the store's lease ends (its supervisor's deadline follows it).
    fn hold(
        &self,
        run: &loops_core::Run,
        lease: std::time::Duration,
    ) -> watch::Receiver<Option<String>> {
        let (cancel, rx) = watch::channel(None::<String>);
        let remaining = run
            .lease_expires_at
            .and_then(|t| (t - self.clock.now()).to_std().ok())
            .unwrap_or_default()
            .min(lease);
        self.cfg.exec.launcher.hold(&run.id, lease, remaining);
        let run = &run.id;
        lock(&self.inflight).insert(run.clone(), InFlight { cancel, lease });
        // Most runs share the default lease: only a shorter one wakes the heartbeat.
        if duration_ms(lease_renewal::renewal_period(lease))
            < self.beat_every_ms.load(Ordering::SeqCst)
        {
            self.run_started.notify_one();
        }
        rx
    }

    /// Forgets a run this engine held; returns why it was cancelled, if it was.
    fn release(&self, run: &RunId) -> Option<String> {
        self.cfg.exec.launcher.release(run);
        lock(&self.inflight)
            .remove(run)
            .and_then(|f| f.cancel.borrow().clone())
    }

    pub fn new(
        store: Arc<dyn Store>,
        cfg: EngineConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, EngineError> {
        let permits = Arc::new(Semaphore::new(cfg.max_concurrent.get()));
        if let Some(spool) = &cfg.exec.spool {
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
            deliveries: Arc::new(DeliveryQueue::default()),
            tasks: Arc::new(Tasks::default()),
            replan: Notify::new(),
            run_started: Arc::new(Notify::new()),
            beat_every_ms: AtomicU64::new(duration_ms(lease_renewal::RENEWAL_MAX)),
            saturated: AtomicBool::new(false),
            cap_waiting: AtomicUsize::new(0),
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

    /// The notifications this engine's finalizations queued (see [`crate::notify`]).
    pub fn deliveries(&self) -> &Arc<DeliveryQueue> {
        &self.deliveries
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
        self.tasks.count.load(Ordering::SeqCst)
    }

    /// Resolves when some run of this engine finishes.
    pub async fn run_finished(&self) {
        self.tasks.finished.notified().await;
    }

    /// Waits until every run this engine started has been finalized.
    pub async fn drain(&self) {
        loop {
            let notified = self.tasks.finished.notified();
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

    /// The first rejected fenced write marks the lease lost and cancels every run.
    fn note_store_error_ref(&self, e: &StoreError) {
        if matches!(e, StoreError::LeaseLost) && !self.lease_lost.swap(true, Ordering::SeqCst) {
            tracing::error!("daemon lease lost: cancelling all runs");
            self.cancel_all("daemon lease lost");
            // Wherever it was noticed (a heartbeat, a finalization), the daemon's loop
            // wakes to stop.
            self.replan.notify_one();
        }
    }
}

fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the map inconsistent (single inserts
    // and removes), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_gives_its_count_back() {
        let tasks = Arc::new(Tasks::default());
        let guard = TaskGuard::new(&tasks);
        assert_eq!(tasks.count.load(Ordering::SeqCst), 1);
        let finished = tasks.finished.notified();
        let joined = tokio::spawn(async move {
            let _guard = guard;
            panic!("a bug in a run task");
        })
        .await;
        assert!(joined.is_err(), "the task panicked");
        assert_eq!(tasks.count.load(Ordering::SeqCst), 0);
        tokio::time::timeout(std::time::Duration::from_secs(1), finished)
            .await
            .expect("waiters are woken");
    }
}
