//! Persistence for `loops`: the [`Store`] trait the engine and CLI program against,
//! and its SQLite backend.
//!
//! Invariants every backend keeps:
//! - a slot attempt `(loop, scheduledFor, attempt)` is claimed at most once;
//! - every claim is a single conditional write (ports to PostgreSQL row locks);
//! - writes made on behalf of a daemon carry a [`Fence`] and apply only while that
//!   daemon's lease is still held, so a stalled daemon can never overwrite newer state.

mod error;
mod paths;

pub use error::{BackendErrorKind, BoxError, CorruptKind, StoreError};
pub use paths::{
    data_dir, inspect_data_dir, prepare_data_dir, secure_data_dir, PermissionReport, DATA_DIR_ENV,
    DB_FILE, PRIVATE_FILES,
};

use loops_core::workflow::{
    NewEvent, RunOrigin, StepRun, WorkflowEvent, WorkflowRecord, WorkflowRun, WorkflowSpec,
};
use loops_core::{
    Instant, Loop, LoopId, LoopStatus, NewLoop, Run, RunId, RunOutcome, RunSource, WorkflowStatus,
};

/// Result alias for store calls.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Proof that a daemon holds the store's lease. Writes carrying it apply only while the
/// lease row still has this `token`: nobody else has acquired the lease since. The
/// lease's expiry decides only when another daemon may take it over; a daemon whose
/// lease expired without anyone taking it (it was stalled, or its writes failed on a
/// full disk) still holds it and renews it with its next heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub token: u64,
}

/// Who holds (or wants) the daemon lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub runner_id: String,
    pub pid: u32,
    /// Process start time (clock ticks since boot), to tell a reused PID apart.
    pub pid_start_time: Option<u64>,
    pub host: String,
}

/// The daemon lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonLease {
    pub holder: LeaseHolder,
    pub token: u64,
    pub acquired_at: Instant,
    pub heartbeat_at: Instant,
    pub expires_at: Instant,
}

/// Outcome of [`Store::acquire_daemon_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAcquire {
    /// The caller now holds the lease.
    Acquired(DaemonLease),
    /// Someone else holds a live lease.
    Held(DaemonLease),
}

/// A request to claim one attempt of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub loop_id: LoopId,
    pub scheduled_for: Instant,
    pub runner_id: String,
    pub source: RunSource,
    pub now: Instant,
    /// When true (overlap `skip`), the claim fails if the loop has any running row.
    pub require_no_running: bool,
}

/// One claim of a batch ([`Store::claim_runs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchClaim {
    pub request: ClaimRequest,
    /// Loop transition applied in the same transaction when this claim succeeds, or
    /// when its slot turns out to be another runner's or the loop is busy.
    pub advance: Option<LoopAdvance>,
    /// The slots recorded `skipped` when the loop is busy (overlap `skip`): every due
    /// slot of the batch, the request's first.
    pub skip_slots: Vec<Instant>,
}

/// What one claim of a batch did ([`Store::claim_runs`]); every change it made is part
/// of the batch's one transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The slot attempt is ours: a `running` row, and the loop advanced.
    Claimed(Box<Run>),
    /// The loop is busy (overlap `skip`): each of `skip_slots` recorded `skipped`, and
    /// the loop advanced.
    Skipped(Vec<Run>),
    /// Someone else has the slot (running it, or done with it): the loop advanced past
    /// it.
    Moved,
    /// The loop is gone or no longer active: nothing changed.
    NotActive,
}

/// A write about a claimed run; many are applied in one transaction by
/// [`Store::record_run_writes`].
#[derive(Debug, Clone, PartialEq)]
pub enum RunWrite {
    /// The run's child was spawned: record its pid and process start time.
    Spawned {
        run: RunId,
        pid: u32,
        pid_start_time: Option<u64>,
        at: Instant,
    },
    /// The run ended: finalize it, then move its loop as the domain's transition rules
    /// decide (`loops_core::transitions::on_finish`).
    Finished { run: RunId, outcome: RunOutcome },
}

/// What one [`RunWrite`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum RunWritten {
    Spawned,
    /// The finalized row, and whether the loop's schedule state was changed.
    Finished {
        run: Box<Run>,
        loop_moved: bool,
    },
}

/// Why a claim did not produce a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRefused {
    /// The loop is gone, or no longer `active` (ad-hoc claims ignore status).
    LoopNotActive,
    /// This slot already has a running attempt.
    SlotRunning,
    /// The slot already succeeded, or used all `maxAttempts`.
    SlotDone,
    /// Overlap `skip` and another run of the loop is active.
    LoopBusy,
}

/// Changes to a loop's schedule state after a run or a CLI action. The domain computes
/// it (`loops_core::transitions`); the store persists it.
pub use loops_core::transitions::LoopAdvance;

/// A due loop row that can no longer be decoded (a stored time zone, cron expression
/// or enum value this build does not understand). The engine parks it
/// ([`Store::park_loop`]) so it neither stops nor spins the other loops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableLoop {
    pub id: LoopId,
    pub name: String,
    /// Why the row could not be decoded.
    pub error: String,
}

impl UnreadableLoop {
    /// The error a listing that needs every loop reports for this row.
    pub fn into_error(self) -> StoreError {
        StoreError::Decode(format!(
            "loop {:?} ({}) cannot be read: {} (`loops remove {}` deletes it)",
            self.name, self.id, self.error, self.id
        ))
    }
}

/// Filter for [`Store::list_runs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub loop_id: Option<LoopId>,
    /// Newest first; `None` = all.
    pub limit: Option<usize>,
}

/// Retention policy for finished runs. Running rows are never pruned.
///
/// A finished run is deleted when it matches ANY rule that is set, i.e. it survives
/// only when it is both newer than `older_than` and among the `keep_per_loop` newest
/// finished runs of its loop. With no rule set nothing is deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrunePolicy {
    /// Delete finished runs that finished before this instant.
    pub older_than: Option<Instant>,
    /// Delete finished runs beyond the newest N (by creation) of each loop.
    pub keep_per_loop: Option<usize>,
}

/// The persistence API. One implementation per backend; the engine never sees SQL.
pub trait Store: WorkflowStore + Send + Sync {
    // ---- loops ----
    /// Inserts a loop (status `active`); fails with [`StoreError::DuplicateName`] when a
    /// loop with that name exists.
    fn create_loop(&self, new: NewLoop, now: Instant) -> Result<Loop>;
    fn get_loop(&self, id: &LoopId) -> Result<Option<Loop>>;
    fn get_loop_by_name(&self, name: &str) -> Result<Option<Loop>>;
    /// Loops whose id starts with `prefix` (at most `limit`).
    fn loops_with_id_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<Loop>>;
    /// All loops ordered by name, optionally of one status; a row that cannot be
    /// decoded is returned as an [`UnreadableLoop`] in its place.
    fn loop_rows(
        &self,
        status: Option<LoopStatus>,
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>>;
    /// [`Store::loop_rows`], failing on the first row that cannot be decoded (with an
    /// error naming that loop).
    fn list_loops(&self, status: Option<LoopStatus>) -> Result<Vec<Loop>> {
        self.loop_rows(status)?
            .into_iter()
            .map(|row| row.map_err(UnreadableLoop::into_error))
            .collect()
    }
    /// Sets status/nextRunAt/retryScheduledFor. Fenced when `fence` is given.
    fn update_loop_schedule(
        &self,
        id: &LoopId,
        advance: &LoopAdvance,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Loop>;
    /// Deletes a loop and its runs. Returns false when it did not exist.
    fn remove_loop(&self, id: &LoopId) -> Result<bool>;
    /// Active loops with `nextRunAt <= now`, earliest first (an index range scan). A
    /// row that cannot be decoded is returned as an [`UnreadableLoop`] in its place, so
    /// one bad row never hides the others.
    fn due_loops(
        &self,
        now: Instant,
        limit: usize,
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>>;
    /// Earliest `nextRunAt` among active loops (for the daemon's sleep).
    fn next_due_at(&self) -> Result<Option<Instant>>;
    /// Takes an active loop out of scheduling because it can no longer be scheduled
    /// (its stored schedule does not parse, or its row does not decode): sets it
    /// `paused` (its `nextRunAt` kept, so `resume` tries again) and records a `failed`
    /// run at that slot (or `now`) whose error is `reason`, in one transaction. Returns
    /// that run; `None` when the loop is gone or no longer active.
    fn park_loop(
        &self,
        id: &LoopId,
        reason: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Option<Run>>;
    /// Marks active loops with `expiresAt <= now` as `expired` (nextRunAt cleared).
    fn expire_loops(&self, now: Instant, fence: Option<&Fence>) -> Result<Vec<Loop>>;

    // ---- runs ----
    /// Atomically creates the next attempt row for `(loop, scheduledFor)` in status
    /// `running` with a lease of the loop's `leaseMs`. Exactly one of any number of
    /// concurrent callers for the same slot attempt wins.
    fn claim_run(
        &self,
        req: &ClaimRequest,
        fence: Option<&Fence>,
    ) -> Result<std::result::Result<Run, ClaimRefused>>;
    /// [`Store::claim_run`], and when the claim succeeds, sets the loop's schedule state
    /// to `advance` (as [`Store::update_loop_schedule`] would) in the same transaction,
    /// so a crash never leaves a claimed slot with the loop still pointing at it. A
    /// refused claim changes nothing.
    fn claim_run_and_advance(
        &self,
        req: &ClaimRequest,
        advance: Option<&LoopAdvance>,
        fence: Option<&Fence>,
    ) -> Result<std::result::Result<Run, ClaimRefused>>;
    /// A scheduling pass's claims in one transaction, one outcome per claim, in order:
    /// each claim as [`Store::claim_run_and_advance`], and for a refused one what the
    /// pass does about it — a busy loop's slots recorded `skipped` and the loop
    /// advanced, a slot that is someone else's passed over — in that same transaction.
    /// The fence is checked once, at the first request's instant.
    fn claim_runs(&self, claims: &[BatchClaim], fence: Option<&Fence>)
        -> Result<Vec<ClaimOutcome>>;
    /// Records a `skipped` row for a slot (overlap `skip`).
    fn record_skipped_run(
        &self,
        lp: &Loop,
        scheduled_for: Instant,
        reason: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Run>;
    /// Records the child's pid and its start time on a running row.
    fn mark_run_pid(
        &self,
        run: &RunId,
        pid: u32,
        pid_start_time: Option<u64>,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<()>;
    /// Extends the lease of every listed running row claimed by `runner_id` to
    /// `now + lease_ms` of its loop, in one write. Returns how many rows were renewed.
    fn heartbeat_runs(
        &self,
        runs: &[RunId],
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<usize>;
    /// Moves a running row to its terminal status. Fails with
    /// [`StoreError::NotRunning`] when the row is not running (already finalized).
    fn finalize_run(&self, run: &RunId, outcome: &RunOutcome, fence: Option<&Fence>)
        -> Result<Run>;
    /// Applies `writes` in order in one transaction (fenced at `now`): pid records and
    /// finalizations, each finalization followed by its loop's transition, decided by
    /// the domain (`loops_core::transitions::on_finish`, with the loop as stored and its
    /// deferred retry looked up in the same transaction).
    /// A write about a row that is no longer running fails alone
    /// ([`StoreError::NotRunning`] / [`StoreError::RunNotFound`]); any other error
    /// fails the whole batch and writes nothing.
    fn record_run_writes(
        &self,
        writes: &[RunWrite],
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Vec<Result<RunWritten>>>;
    /// Moves a running row claimed by `from` (`None`: by nobody) to `runner_id`, with a
    /// fresh lease of its loop's `leaseMs` from `now`: a daemon adopting the run of a
    /// runner that died. Fails with [`StoreError::NotRunning`] when the row is no longer
    /// running or was taken by someone else meanwhile.
    fn take_over_run(
        &self,
        run: &RunId,
        from: Option<&str>,
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Run>;
    /// Running rows whose lease has expired at `now` (`leaseExpiresAt <= now`), the
    /// earliest expiry first.
    fn expired_running_runs(&self, now: Instant) -> Result<Vec<Run>>;
    /// All running rows (optionally of one loop).
    fn running_runs(&self, loop_id: Option<&LoopId>) -> Result<Vec<Run>>;
    fn get_run(&self, id: &RunId) -> Result<Option<Run>>;
    /// Runs newest first (by start/creation), filtered.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>>;
    /// The oldest slot of `loop_id` other than `except` whose latest attempt failed with
    /// attempts left under `max_attempts` (a deferred retry).
    fn next_retryable_slot(
        &self,
        loop_id: &LoopId,
        max_attempts: u32,
        except: Instant,
    ) -> Result<Option<Instant>>;
    /// Deletes finished runs by policy; with `dry_run` only counts. Returns the count.
    fn prune_runs(&self, policy: &PrunePolicy, dry_run: bool) -> Result<usize>;

    // ---- daemon lease ----
    /// Takes the lease when it is free, expired, or `takeover` says the holder is gone;
    /// otherwise reports the holder. A successful acquire bumps the fencing token.
    fn acquire_daemon_lease(
        &self,
        holder: &LeaseHolder,
        ttl_ms: u64,
        now: Instant,
        takeover: &dyn Fn(&DaemonLease) -> bool,
    ) -> Result<LeaseAcquire>;
    /// Extends the lease (also one that expired while nobody took it over); false when
    /// it is no longer held with this fence.
    fn heartbeat_daemon_lease(&self, fence: &Fence, ttl_ms: u64, now: Instant) -> Result<bool>;
    /// Gives the lease up (no-op when not held).
    fn release_daemon_lease(&self, fence: &Fence) -> Result<()>;
    fn current_daemon_lease(&self) -> Result<Option<DaemonLease>>;

    // ---- maintenance ----
    /// Tunes the store for a long-lived, write-heavy owner (the daemon): housekeeping
    /// that would otherwise stall a commit now and then (SQLite's WAL checkpoints with
    /// their fsyncs) moves to a background thread. Lasts until the store is dropped.
    fn start_background_maintenance(&self) -> Result<()> {
        Ok(())
    }
}

/// Persistence of workflow specs, workflow runs, step runs and their event logs.
/// Runner writes carry the daemon's fence like every other daemon write.
pub trait WorkflowStore {
    /// Stores a new spec. An active spec with the same name is an error
    /// ([`StoreError::DuplicateWorkflow`]) unless `replace`, which archives it and gives
    /// the new one a higher version, in one transaction.
    fn create_workflow(
        &self,
        spec: &WorkflowSpec,
        replace: bool,
        now: Instant,
    ) -> Result<WorkflowRecord>;
    fn get_workflow(&self, id: &str) -> Result<Option<WorkflowRecord>>;
    /// The active spec with this name.
    fn get_active_workflow(&self, name: &str) -> Result<Option<WorkflowRecord>>;
    /// Specs whose id starts with `prefix` (at most `limit`).
    fn workflows_with_id_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<WorkflowRecord>>;
    /// Specs by name then version, optionally of one status.
    fn list_workflows(&self, status: Option<WorkflowStatus>) -> Result<Vec<WorkflowRecord>>;
    /// Marks a spec archived.
    fn archive_workflow(&self, id: &str, now: Instant) -> Result<WorkflowRecord>;

    /// Creates a run of `workflow` with every step `pending` and a `created` event —
    /// or, when `origin`'s slot already has a run, returns that one (`false`): a slot
    /// never has two workflow runs.
    fn create_workflow_run(
        &self,
        workflow: &WorkflowRecord,
        origin: Option<&RunOrigin>,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<(WorkflowRun, bool)>;
    fn get_workflow_run(&self, id: &str) -> Result<Option<WorkflowRun>>;
    fn workflow_runs_with_id_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<WorkflowRun>>;
    /// Runs newest first, optionally of one workflow name.
    fn list_workflow_runs(
        &self,
        workflow_name: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<WorkflowRun>>;
    /// Step runs of a run, in spec order.
    fn step_runs(&self, run_id: &str) -> Result<Vec<StepRun>>;
    /// Events of a run in sequence order; with `limit`, the last `limit` of them.
    fn workflow_events(&self, run_id: &str, limit: Option<usize>) -> Result<Vec<WorkflowEvent>>;
    /// Writes a run's mutable fields and appends `events`, in one transaction.
    fn save_workflow_run(
        &self,
        run: &WorkflowRun,
        events: &[NewEvent],
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<()>;
    /// Writes a step run's mutable fields and appends `events`, in one transaction.
    fn save_step_run(
        &self,
        step: &StepRun,
        events: &[NewEvent],
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<()>;
    /// Records a cancellation request (from any process); the runner acts on it.
    fn request_workflow_cancel(
        &self,
        run_id: &str,
        reason: &str,
        now: Instant,
    ) -> Result<WorkflowRun>;
    /// Deletes finished workflow runs by the same policy as loop runs (per workflow).
    fn prune_workflow_runs(&self, policy: &PrunePolicy, dry_run: bool) -> Result<usize>;
}
