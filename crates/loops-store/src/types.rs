//! The values the [`Store`](crate::Store) trait takes and returns, shared by every
//! backend.

use crate::StoreError;
use loops_core::caps::Caps;
use loops_core::workflow::{Workflow, WorkflowSpec};
use loops_core::{
    Instant, Loop, LoopId, LoopStatus, NewLoop, Run, RunId, RunOutcome, RunSource, RunStatus,
    StepId, Usage, WorkflowId,
};

/// Changes to a loop's schedule state after a run or a CLI action. The domain computes
/// it (`loops_core::transitions`); the store persists it.
pub use loops_core::transitions::LoopAdvance;

/// Proof that a daemon holds the store's lease. Writes carrying it apply only while the
/// lease row still has this `token`: nobody else has acquired the lease since. The
/// lease's expiry decides only when another daemon may take it over; a daemon whose
/// lease expired without anyone taking it (it was stalled, or its writes failed on a
/// full disk) still holds it and renews it with its next renewal.
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

/// Outcome of [`Store::acquire_daemon_lease`](crate::Store::acquire_daemon_lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAcquire {
    /// The caller now holds the lease.
    Acquired(DaemonLease),
    /// Someone else holds a live lease.
    Held(DaemonLease),
}

/// One try of a notification delivery, as the runner that claimed it records it
/// ([`crate::Store::record_delivery`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTry {
    /// The delivery's id.
    pub id: String,
    /// The claimer: a try by anyone else records nothing.
    pub runner_id: String,
    /// `delivered` / `failed` end the delivery and drop the claim; `pending` keeps it.
    pub status: loops_core::DeliveryStatus,
    /// Tries so far, this one included.
    pub attempts: u32,
    pub last_error: Option<String>,
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

/// One claim of a batch ([`Store::claim_runs`](crate::Store::claim_runs)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchClaim {
    pub request: ClaimRequest,
    /// Loop transition applied in the same transaction when this claim succeeds — and,
    /// with [`OnRefusal::PassOver`], when its loop is busy or its slot is someone
    /// else's.
    pub advance: Option<LoopAdvance>,
    /// What a refused claim does.
    pub on_refusal: OnRefusal,
    /// The claiming daemon's concurrency caps (`--max-concurrent-per`; empty: none):
    /// the claim is refused ([`ClaimRefused::AtCap`], nothing changed whatever
    /// `on_refusal` says) when its run would exceed one, counting the store's running
    /// rows of every runner in the claim's transaction, under a lock on PostgreSQL
    /// (`loops_core::caps::admit`).
    pub caps: Caps,
}

/// What a refused claim of a batch does, in the batch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnRefusal {
    /// Nothing: the outcome is [`ClaimOutcome::Refused`] with the reason, and the loop
    /// is left as it is (run-now; the later slots of a catch-up batch).
    Keep,
    /// What a scheduling pass does about a due slot it cannot have: when the loop is
    /// busy (overlap `skip`), each of `skip_slots` is recorded `skipped` and the loop
    /// advanced ([`ClaimOutcome::Skipped`]); when the slot is someone else's (running
    /// it, or done with it), the loop is advanced past it ([`ClaimOutcome::Moved`]);
    /// when the loop is gone or no longer active, nothing changes
    /// ([`ClaimOutcome::NotActive`]).
    PassOver {
        /// Every due slot of the batch, the request's first.
        skip_slots: Vec<Instant>,
    },
}

/// What one claim of a batch did ([`Store::claim_runs`](crate::Store::claim_runs));
/// every change it made is part of the batch's one transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The slot attempt is ours: a `running` row, and the loop advanced.
    Claimed(Box<Run>),
    /// ([`OnRefusal::PassOver`]) The loop is busy: each of `skip_slots` recorded
    /// `skipped`, and the loop advanced.
    Skipped(Vec<Run>),
    /// ([`OnRefusal::PassOver`]) Someone else has the slot (running it, or done with
    /// it): the loop advanced past it.
    Moved,
    /// ([`OnRefusal::PassOver`]) The loop is gone or no longer active: nothing changed.
    NotActive,
    /// ([`OnRefusal::Keep`]) Refused, for this reason: nothing changed.
    Refused(ClaimRefused),
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
    /// A run would exceed a concurrency cap, or every account of the loop's pool is
    /// held: the loop waits, still due (`loops_core::caps::Wait::text`).
    AtCap(String),
}

/// A write about a claimed run; many are applied in one transaction by
/// [`Store::record_run_writes`](crate::Store::record_run_writes).
// `Finished` carries a whole outcome (its output tails live on the heap already); a
// run is written once spawned and once finished, so boxing it would only add an
// allocation per run.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum RunWrite {
    /// The run's child was spawned: record its pid and process start time, and what
    /// became of the session it was to resume (`sessionNote`, our words): whoever
    /// records the run's end — this runner, or one that re-attaches to it or reads its
    /// supervisor's status file — finds the note on the row.
    Spawned {
        run: RunId,
        pid: u32,
        pid_start_time: Option<u64>,
        session_note: Option<String>,
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
    /// The finalized row, whether the loop's schedule state was changed, and the
    /// notification deliveries queued (`pending`) for it in the same transaction.
    Finished {
        run: Box<Run>,
        loop_moved: bool,
        notifications: Vec<loops_core::Delivery>,
    },
}

/// A due loop row that can no longer be decoded (a stored time zone, cron expression
/// or enum value this build does not understand). The engine parks it
/// ([`Store::park_loop`](crate::Store::park_loop)) so it neither stops nor spins the
/// other loops.
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

/// Filter for [`Store::list_runs`](crate::Store::list_runs). Every filter that is set
/// must match (an empty list matches everything); each is served by an index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub loop_id: Option<LoopId>,
    /// Newest first; `None` = all.
    pub limit: Option<usize>,
    /// Only runs with one of these statuses.
    pub statuses: Vec<RunStatus>,
    /// Only runs created (claimed or skipped) at or after this instant.
    pub since: Option<Instant>,
    /// Only runs created before this instant.
    pub until: Option<Instant>,
    /// Only runs of loops carrying every one of these labels.
    pub labels: Vec<String>,
}

/// Filter for [`Store::loop_rows_matching`](crate::Store::loop_rows_matching).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopFilter {
    /// Only loops of this status; `None`: every status but `archived`, unless
    /// `include_archived`.
    pub status: Option<LoopStatus>,
    /// With `status: None`, archived loops too.
    pub include_archived: bool,
    /// Only loops carrying every one of these labels (found through the label index,
    /// not by reading every loop).
    pub labels: Vec<String>,
    /// Only loops whose name sorts after this one (the store's order of names, as
    /// [`LoopOrder::Name`] lists them): a walk over every loop a page at a time that a
    /// loop created or removed meanwhile does not shift.
    pub after_name: Option<String>,
    /// Only loops whose id sorts after this one (the store's order of ids, as
    /// [`LoopOrder::Id`] lists them): the same walk, a batch of loops at a time whose
    /// runs lie side by side in the runs' index (`loops health`).
    pub after_id: Option<LoopId>,
    /// Skip this many of the matching loops (in `order`) first. Paging is done by
    /// the store, so a page of a large store reads and decodes that page only.
    pub offset: usize,
    /// At most this many (after `offset`); `None`: all.
    pub limit: Option<usize>,
    /// The order (and, for [`LoopOrder::NextSlot`], which loops take part).
    pub order: LoopOrder,
}

/// The order of [`Store::loop_rows_matching`](crate::Store::loop_rows_matching).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LoopOrder {
    /// By name: the listing order.
    #[default]
    Name,
    /// By next slot, then name: only active loops that have one, their slot the
    /// earlier of a pending retry's and `nextRunAt` (jitter aside). What the
    /// dashboard's "next up" asks for, without reading every loop.
    NextSlot,
    /// By id: the order of the runs' index by loop, so that a batch of loops taken in
    /// this order has its runs in one range of it ([`Store::run_facts`](crate::Store::run_facts)
    /// of each batch reads each run once over the whole walk).
    Id,
}

/// A loop's new definition and schedule state, written by
/// [`Store::update_loop_definition`](crate::Store::update_loop_definition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopUpdate {
    /// Name, description, schedule, target, policy, labels (sorted, each once),
    /// notification settings, and the loop's next slot (`next_run_at`).
    pub definition: NewLoop,
    pub status: LoopStatus,
    pub retry_scheduled_for: Option<Instant>,
}

/// The state of a loop row a caller read before deciding an update: the update
/// applies only while the row still has it (nobody moved, paused or edited the loop
/// meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopVersion {
    pub status: LoopStatus,
    pub next_run_at: Option<Instant>,
    pub retry_scheduled_for: Option<Instant>,
    pub updated_at: Instant,
}

impl LoopVersion {
    /// The version of `lp` as read.
    pub fn of(lp: &Loop) -> Self {
        Self {
            status: lp.status,
            next_run_at: lp.next_run_at,
            retry_scheduled_for: lp.retry_scheduled_for,
            updated_at: lp.updated_at,
        }
    }
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
    /// Keep at most the newest N entries of the event log (the live feed of
    /// `/v1/events`), whatever they are about; the rules above also prune the events of
    /// the runs they delete, and events older than `older_than`.
    pub keep_events: Option<usize>,
}

/// A daemon registering as one of a store's runners
/// ([`Store::register_runner`](crate::Store::register_runner)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerRegistration {
    /// `host/pid/start-time`, as its runs' `claimedBy`.
    pub runner_id: String,
    pub host: String,
    pub pid: u32,
    pub pid_start_time: Option<u64>,
    /// The labels it advertises (`daemon run --runner-label`), sorted.
    pub labels: Vec<String>,
    /// Runs it executes at once at most (`--max-concurrent`).
    pub capacity: usize,
}

/// A request that a live runner start a run of a loop now, as `run-now` would start it
/// here (`run-now --on-runner`; stores with runners only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    pub id: String,
    pub loop_id: LoopId,
    /// Start it even while another run of the loop is in flight (`--allow-overlap`).
    pub allow_overlap: bool,
    /// Who asked: `host/pid/start-time` of the requesting process.
    pub requested_by: String,
    pub requested_at: Instant,
    /// No runner takes it from then on (by the store's clock).
    pub expires_at: Instant,
    /// The runner's answer, once one answered.
    pub answer: Option<RunRequestAnswer>,
}

/// How a runner answered a [`RunRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunRequestAnswer {
    /// It claimed this run (of the due slot, a pending retry, or ad hoc) and started it.
    Started {
        runner_id: String,
        run_id: RunId,
        source: RunSource,
    },
    /// It could not start one, for this reason (the loop is busy under overlap `skip`,
    /// or it is gone).
    Refused { runner_id: String, reason: String },
}

/// A runner's lease: its epoch (the fence of its writes) and until when the store
/// considers it live, by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerLease {
    pub fence: Fence,
    pub expires_at: Instant,
    /// The store's clock when it granted or renewed the lease.
    pub now: Instant,
}

/// One runner as `loops runners` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerInfo {
    pub epoch: u64,
    pub runner_id: String,
    pub host: String,
    pub pid: u32,
    pub pid_start_time: Option<u64>,
    pub labels: Vec<String>,
    pub capacity: usize,
    pub started_at: Instant,
    pub heartbeat_at: Instant,
    pub expires_at: Instant,
    /// Live (not expired, not released) by the store's clock at the time of the read.
    pub live: bool,
    /// Released by a clean shutdown.
    pub released: bool,
    /// Its running rows.
    pub running: usize,
    /// The store's clock at the time of the read.
    pub now: Instant,
}

/// The numbers of the event log ([`Store::event_bounds`](crate::Store::event_bounds)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventBounds {
    /// The oldest event still kept; `None` when the log is empty.
    pub oldest: Option<u64>,
    /// The newest number ever given (0 before the first event), also when that event
    /// was pruned since.
    pub latest: u64,
}

/// One run as a dashboard shows it in a loop's strip of recent runs
/// ([`Store::recent_runs`](crate::Store::recent_runs)): no output, no error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub id: RunId,
    pub scheduled_for: Instant,
    pub attempt: u32,
    pub status: RunStatus,
    pub created_at: Instant,
    pub started_at: Option<Instant>,
    pub finished_at: Option<Instant>,
    pub exit_code: Option<i32>,
}

impl RunSummary {
    /// The summary of a full run row.
    pub fn of(run: &Run) -> Self {
        Self {
            id: run.id.clone(),
            scheduled_for: run.scheduled_for,
            attempt: run.attempt,
            status: run.status,
            created_at: run.created_at,
            started_at: run.started_at,
            finished_at: run.finished_at,
            exit_code: run.exit_code,
        }
    }
}

/// An agent's reported usage on one finished run or step run
/// ([`Store::usage_since`](crate::Store::usage_since)).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub source: UsageSource,
    pub finished_at: Instant,
    pub usage: Usage,
}

/// Which run a [`UsageRow`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageSource {
    /// A loop's run (an agent target).
    Run { loop_id: LoopId, loop_name: String },
    /// An agent step of a workflow run; `loop_id` when a loop's slot started the run.
    Step {
        workflow_id: WorkflowId,
        workflow_name: String,
        step_id: StepId,
        loop_id: Option<LoopId>,
    },
}

/// Everything one import writes ([`Store::import`](crate::Store::import)): new
/// workflow specs, then new loops with their schedule state and optional history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportBatch {
    /// Stored as new active specs, in order.
    pub workflows: Vec<WorkflowSpec>,
    /// Created in order, after the workflows (a workflow target may name one of them).
    pub loops: Vec<ImportLoop>,
}

/// One loop of an [`ImportBatch`].
#[derive(Debug, Clone, PartialEq)]
pub struct ImportLoop {
    /// The definition, created as [`Store::create_loop`](crate::Store::create_loop)
    /// creates one (a new id, `createdAt` the import's instant) …
    pub new: NewLoop,
    /// … then given this schedule state (status, next slot, pending retry).
    pub state: LoopAdvance,
    /// Finished runs to keep as its history (oldest first): each gets a new id and the
    /// new loop's id and name, and keeps no process or lease (pid, its start time, the
    /// lease's expiry); everything else is stored as given. A `running` row is refused.
    pub history: Vec<Run>,
}

impl ImportLoop {
    /// The loop as the import leaves it: `created` (its definition as just created) with
    /// this item's schedule state, and the due instant that state gives it.
    pub fn stored(&self, created: Loop) -> Loop {
        Loop {
            status: self.state.status,
            next_run_at: self.state.next_run_at,
            retry_scheduled_for: self.state.retry_scheduled_for,
            due_at: loops_core::schedule::due_at(
                &created.id,
                self.state.next_run_at,
                self.state.retry_scheduled_for,
                created.jitter_ms,
            ),
            ..created
        }
    }

    /// `run` of the history as a row of `created` (the loop just created for this
    /// item): its id and name, no process or lease; its own id is left for the backend
    /// to draw. A `running` run is refused.
    pub fn history_row(created: &Loop, run: &Run) -> Result<Run, StoreError> {
        if run.status == RunStatus::Running {
            return Err(StoreError::running_history(&created.name));
        }
        Ok(Run {
            loop_id: created.id.clone(),
            loop_name: created.name.clone(),
            pid: None,
            pid_start_time: None,
            lease_expires_at: None,
            ..run.clone()
        })
    }
}

/// One loop's next slot to move back after the wall clock went back
/// ([`Store::move_slots_back`](crate::Store::move_slots_back)).
#[derive(Debug, Clone, PartialEq)]
pub struct SlotMove {
    /// The loop as it was read; the move is made only while its status, next slot,
    /// pending retry and jitter are still these.
    pub read: Loop,
    /// Its new next slot.
    pub to: Instant,
}

impl SlotMove {
    /// The due instant of the moved slot (its jitter applied, the retry kept).
    pub fn due_at(&self) -> Option<Instant> {
        loops_core::schedule::due_at(
            &self.read.id,
            Some(self.to),
            self.read.retry_scheduled_for,
            self.read.jitter_ms,
        )
    }
}

/// What an import wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub workflows: Vec<Workflow>,
    pub loops: Vec<Loop>,
    /// History rows written.
    pub runs: usize,
}

/// The JSON columns of a loop's definition, encoded once for every backend's inserts
/// and updates of `loops` ([`DefinitionJson::of_new`], [`DefinitionJson::of_loop`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionJson {
    /// `schedule_json`.
    pub schedule: String,
    /// `target_json`.
    pub target: String,
    /// `labels_json`.
    pub labels: String,
    /// `runs_on_json` (a backend without runner labels leaves it unused).
    pub runs_on: String,
    /// `notify_json`: NULL when the loop has no settings of its own.
    pub notify: Option<String>,
    /// `ops_json` ([`encode_ops`](crate::codec::encode_ops)).
    pub ops: Option<String>,
}
