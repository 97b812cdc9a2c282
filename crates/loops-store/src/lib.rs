//! Persistence for `loops`: the [`Store`] and [`WorkflowStore`] traits the engine, the
//! daemon and the client program against, the values they exchange, and — behind the
//! `suite` feature — the behaviour suite every backend runs (`suite`, `store_suite!`).
//! This crate knows no database: each backend is a crate of its own that depends on
//! it (`loops-sqlite`, the embedded default; PostgreSQL next).
//!
//! # What a backend promises
//!
//! The suite checks each of these; a second backend follows them and passes it.
//!
//! - **A slot attempt is claimed at most once.** Runs are unique on
//!   `(loop, scheduledFor, attempt)`; of any number of concurrent claims of the same
//!   slot attempt — from threads, processes or hosts — exactly one wins and the others
//!   are refused ([`ClaimRefused::SlotRunning`]). A new attempt is the next number after
//!   the slot's last, and only while the slot is neither running nor done (succeeded,
//!   skipped, or `maxAttempts` used; ad-hoc slots get one attempt).
//! - **Every claim is one conditional write.** [`Store::claim_runs`] applies its whole
//!   batch — each claim, its loop's advance, a busy loop's skipped slots — in one
//!   transaction, in order (a later claim sees an earlier one's row); an error writes
//!   nothing of the batch. On PostgreSQL that is row locks (`FOR UPDATE SKIP LOCKED`
//!   or a conditional `INSERT … RETURNING`), on SQLite a `BEGIN IMMEDIATE`
//!   transaction.
//! - **Daemon writes are fenced.** A write that takes `Some(fence)` first checks,
//!   inside its own transaction, that the lease still carries `fence.token`; otherwise
//!   it fails with [`StoreError::LeaseLost`] and writes nothing. Tokens only grow, also
//!   across a release. Expiry alone does not revoke a lease: only another acquire
//!   does ([`Fence`]).
//! - **Run writes are guarded.** A write about a run applies only while the row is
//!   `running` (and, for a take-over, still claimed by the expected runner); otherwise
//!   that write fails with [`StoreError::NotRunning`] or [`StoreError::RunNotFound`] —
//!   alone, inside a batch ([`StoreError::is_per_row`]).
//! - **The store applies the domain's transitions.** A claim applies the caller's
//!   [`LoopAdvance`] (computed by `loops_core::transitions::on_claim`); a finalization
//!   applies `loops_core::transitions::on_finish` to the loop as stored, with its
//!   deferred retry (the oldest other slot whose latest attempt failed with attempts
//!   left, not ad hoc, neither running nor done) looked up in the same transaction when
//!   `loops_core::transitions::wants_deferred_retry` asks for it.
//! - **A finalization queues its notifications.** In the same transaction,
//!   [`Store::record_run_writes`] asks `loops_core::notify::decide` (with the loop's
//!   own settings, else the store-wide default, and the loop's previous finished slot)
//!   and inserts one `pending` delivery per channel; a delivery is claimed by one
//!   runner at a time ([`Store::claim_delivery`]).
//! - **An import is all or nothing.** [`Store::import`] writes its specs, loops and
//!   history rows in one transaction; a duplicate name or any other error leaves the
//!   store as it was.
//! - **One bad row never hides the others.** Listings of loops return a row that does
//!   not decode as an [`UnreadableLoop`] in its place.
//! - **Changes are logged with their commit.** The writes that create, change or
//!   remove a loop, start or end a run (also a skipped slot and a parked loop's failed
//!   run) and append to a workflow run's log each append their
//!   [`Event`](loops_core::event::Event) in the same transaction
//!   ([`Store::events_after`]); numbers only grow, are never reused, and become visible
//!   in order. Pruning a run or workflow run prunes its events; removing a loop prunes
//!   the events of it and its runs; events older than the retention's age go too.
//! - **Values round-trip** with millisecond precision (instants are UTC); ids of loops
//!   and runs are 12 lowercase hex characters; listings keep the documented orders.
//! - **Errors are classified** ([`StoreError`]): a backend maps its library's errors
//!   onto the variants and [`BackendErrorKind`]s, so that `is_transient`, `is_corrupt`
//!   and the CLI's exit codes mean the same on every backend.
//!
//! The traits are synchronous and `Send + Sync`: one store is shared by the engine's
//! threads, and a call blocks its thread until the database answered.
//!
//! # Primitives and conveniences
//!
//! A backend implements the primitives: the loop rows and their queries, one batch of
//! claims ([`Store::claim_runs`]), one batch of run writes
//! ([`Store::record_run_writes`]), the lease renewal and take-over of running rows, the run
//! queries, pruning, the reports (health facts, usage), one import and the daemon
//! lease. [`Store::claim_run`] (one claim) and
//! [`Store::list_loops`] (every row decoded) are default methods on top of them.

pub mod budgets;
pub mod claim;
pub mod codec;
mod copy_set;
mod error;
pub mod facts;
pub mod finish;
mod held;
pub mod open_files;
mod paths;
pub mod prune;
pub mod rows;
pub mod schema;
#[cfg(feature = "suite")]
pub mod suite;
mod types;
pub mod user_file;
pub mod workflow_log;

pub use copy_set::CopySet;
pub use error::{BackendErrorKind, BoxError, CorruptKind, StoreError};
pub use held::{budget_covers, hold_channels, hold_covers, CoveredKey};
pub use paths::{
    data_dir, inspect_data_dir, prepare_data_dir, secure_data_dir, PermissionReport, DATA_DIR_ENV,
    DB_FILE, PRIVATE_FILES,
};
pub use types::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, DaemonLease, DefinitionJson, DeliveryTry,
    EventBounds, Fence, ImportBatch, ImportLoop, Imported, LeaseAcquire, LeaseHolder, LoopAdvance,
    LoopFilter, LoopOrder, LoopUpdate, LoopVersion, OnRefusal, PrunePolicy, RunFilter, RunRequest,
    RunRequestAnswer, RunSummary, RunWrite, RunWritten, RunnerInfo, RunnerLease,
    RunnerRegistration, SlotMove, UnreadableLoop, UsageRow, UsageSource,
};

use loops_core::health::{FactsQuery, RunFacts};
use loops_core::workflow::{
    NewEvent, RunOrigin, StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec,
};
use loops_core::{
    Delivery, Instant, Loop, LoopId, LoopStatus, NewLoop, Notify, Run, RunId, WorkflowStatus,
};

/// How long holds last ([`loops_core::hold::HoldTiming`]): the defaults, except that
/// `LOOPS_TEST_HOLD_CAP_MS` (read once; for the end-to-end tests only, which cannot
/// wait for a real reset) caps every hold at that many milliseconds after its run.
pub fn hold_timing() -> loops_core::hold::HoldTiming {
    static TIMING: std::sync::OnceLock<loops_core::hold::HoldTiming> = std::sync::OnceLock::new();
    *TIMING.get_or_init(|| loops_core::hold::HoldTiming {
        cap_ms: std::env::var("LOOPS_TEST_HOLD_CAP_MS")
            .ok()
            .and_then(|v| v.parse().ok()),
        ..loops_core::hold::HoldTiming::DEFAULT
    })
}

/// Result alias for store calls.
pub type Result<T> = std::result::Result<T, StoreError>;

/// The persistence API. One implementation per backend; the engine never sees SQL.
pub trait Store: WorkflowStore + Send + Sync {
    // ---- loops ----
    /// Inserts a loop (status `active`); fails with [`StoreError::DuplicateName`] when a
    /// loop with that name exists.
    fn create_loop(&self, new: NewLoop, now: Instant) -> Result<Loop>;
    fn get_loop(&self, id: &LoopId) -> Result<Option<Loop>>;
    fn get_loop_by_name(&self, name: &str) -> Result<Option<Loop>>;
    /// Loops whose id starts with `prefix` (at most `limit`), by id.
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
    /// Sets status/nextRunAt/retryScheduledFor. Fenced when `fence` is given. Fails with
    /// [`StoreError::LoopNotFound`] when the loop does not exist.
    fn update_loop_schedule(
        &self,
        id: &LoopId,
        advance: &LoopAdvance,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Loop>;
    /// Moves each loop's next slot back to [`SlotMove::to`], as after the wall clock went
    /// back, when the loop is still as it was read: active, with the same next slot,
    /// pending retry and jitter (one changed or removed meanwhile is left alone). One
    /// write for all of them, with a `loop_changed` event for each loop moved; returns
    /// those loops. Fenced when `fence` is given.
    fn move_slots_back(
        &self,
        moves: &[SlotMove],
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Vec<Loop>>;
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
    /// [`Store::due_loops`] for a runner advertising `labels`: only loops whose runner
    /// labels (`runsOn`) it has, every one. A store without runners stores no runner
    /// labels, so this is `due_loops` (the default).
    fn due_loops_on(
        &self,
        now: Instant,
        limit: usize,
        labels: &[String],
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        let _ = labels;
        self.due_loops(now, limit)
    }
    /// A scheduling pass's reads in one call: [`Store::due_loops_on`] when no active
    /// loop is past its expiry at `now`, `None` when one is (the pass then expires them
    /// with [`Store::expire_loops`] and reads the due loops after). A backend whose
    /// every call is a round trip to a server asks both at once; the default answers
    /// `None`, which is always right.
    fn due_loops_unless_expiring(
        &self,
        now: Instant,
        limit: usize,
        labels: &[String],
    ) -> Result<Option<Vec<std::result::Result<Loop, UnreadableLoop>>>> {
        let _ = (now, limit, labels);
        Ok(None)
    }
    /// Earliest `nextRunAt` among active loops (for the daemon's sleep).
    fn next_due_at(&self) -> Result<Option<Instant>>;
    /// [`Store::next_due_at`] among the loops a runner advertising `labels` can take
    /// (as [`Store::due_loops_on`] picks them): a loop no runner of these labels may
    /// claim must not wake it, or it would wake at once after every pass, for ever. A
    /// store without runners stores no runner labels, so this is `next_due_at` (the
    /// default).
    fn next_due_at_on(&self, labels: &[String]) -> Result<Option<Instant>> {
        let _ = labels;
        self.next_due_at()
    }
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
    /// Marks active loops with `expiresAt <= now` as `expired` (nextRunAt cleared);
    /// returns them by name.
    fn expire_loops(&self, now: Instant, fence: Option<&Fence>) -> Result<Vec<Loop>>;

    // ---- loop definitions and labels (issue #11) ----
    /// Replaces a loop's definition (name, description, schedule, target, policy,
    /// labels, notification settings) and schedule state (`status`, `nextRunAt`,
    /// `retryScheduledFor`; `dueAt` follows) in one transaction, keeping its id and
    /// run history, and sets `updatedAt` to `now`. Applies only while the row still has
    /// the `expected` version; `Ok(None)` when it changed meanwhile (nothing written).
    /// The label index is rewritten in the same transaction, and on a new name the
    /// loop's runs take it (`loopName`). Fails with [`StoreError::LoopNotFound`] when
    /// the loop does not exist and [`StoreError::DuplicateName`] when another loop has
    /// the name; an error writes nothing. Unfenced: a CLI write.
    fn update_loop_definition(
        &self,
        id: &LoopId,
        update: &LoopUpdate,
        expected: &LoopVersion,
        now: Instant,
    ) -> Result<Option<Loop>>;
    /// Loops matching `filter`, ordered by name (by default every loop but archived
    /// ones); labels are matched through the label index. A row that cannot be decoded
    /// is returned as an [`UnreadableLoop`] in its place.
    fn loop_rows_matching(
        &self,
        filter: &LoopFilter,
    ) -> Result<Vec<std::result::Result<Loop, UnreadableLoop>>>;
    /// [`Store::loop_rows_matching`]'s rows handed to `each` one at a time, in the same
    /// order, from one read, until `each` breaks: a listing of every loop need not hold
    /// them all at once (`loops list` of 100,000 loops; BENCHMARKS.md §25). By default
    /// the rows are read whole first.
    fn each_loop_row(
        &self,
        filter: &LoopFilter,
        each: &mut dyn FnMut(
            std::result::Result<Loop, UnreadableLoop>,
        ) -> std::ops::ControlFlow<()>,
    ) -> Result<()> {
        for row in self.loop_rows_matching(filter)? {
            if each(row).is_break() {
                break;
            }
        }
        Ok(())
    }
    /// How many rows [`Store::loop_rows_matching`] returns for `filter` without its
    /// `offset` and `limit`: a page's total, counted without reading the loops.
    fn count_loops(&self, filter: &LoopFilter) -> Result<usize>;

    // ---- runs ----
    /// Claims in one transaction, one outcome per claim, in order. Each claim creates
    /// the next attempt row for `(loop, scheduledFor)` in status `running`, claimed by
    /// the request's runner with a lease of the loop's `leaseMs` from the request's
    /// `now`, and applies the claim's advance to the loop; exactly one of any number of
    /// concurrent callers for the same slot attempt wins. A refused claim does what its
    /// [`OnRefusal`] says. The fence is checked once, at the first request's instant.
    fn claim_runs(&self, claims: &[BatchClaim], fence: Option<&Fence>)
        -> Result<Vec<ClaimOutcome>>;
    /// One claim ([`Store::claim_runs`] of one, [`OnRefusal::Keep`]): when it
    /// succeeds, the loop's schedule state is set to `advance` in the same transaction,
    /// so a crash never leaves a claimed slot with the loop still pointing at it; a
    /// refused claim changes nothing and says why.
    fn claim_run(
        &self,
        req: &ClaimRequest,
        advance: Option<&LoopAdvance>,
        fence: Option<&Fence>,
    ) -> Result<std::result::Result<Run, ClaimRefused>> {
        let claim = BatchClaim {
            request: req.clone(),
            advance: advance.cloned(),
            on_refusal: OnRefusal::Keep,
            caps: Default::default(),
        };
        match self.claim_runs(std::slice::from_ref(&claim), fence)?.pop() {
            Some(ClaimOutcome::Claimed(run)) => Ok(Ok(*run)),
            Some(ClaimOutcome::Refused(reason)) => Ok(Err(reason)),
            other => Err(StoreError::backend(
                BackendErrorKind::Other,
                format!("claim_runs answered {other:?} to a claim that keeps its refusals"),
            )),
        }
    }
    /// Applies `writes` in order in one transaction (fenced at `now`): pid records and
    /// finalizations, each finalization followed by its loop's transition, decided by
    /// the domain (`loops_core::transitions::on_finish`, with the loop as stored and its
    /// deferred retry looked up in the same transaction). A finalized run's
    /// `durationMs` is `finishedAt − startedAt`.
    /// A write about a row that is no longer running fails alone
    /// ([`StoreError::NotRunning`] / [`StoreError::RunNotFound`]), and so does an
    /// outcome that cannot end a run ([`StoreError::InvalidArgument`]: status
    /// `running`); any other error fails the whole batch and writes nothing.
    fn record_run_writes(
        &self,
        writes: &[RunWrite],
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Vec<Result<RunWritten>>>;
    /// Extends the lease of every listed running row claimed by `runner_id` to
    /// `now + leaseMs` of its loop, in one write. Returns how many rows were renewed.
    fn renew_run_leases(
        &self,
        runs: &[RunId],
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<usize>;
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
    /// All running rows (optionally of one loop), oldest first; each carries its
    /// runner (`claimedBy`) and lease expiry, from which recovery tells a gone runner.
    fn running_runs(&self, loop_id: Option<&LoopId>) -> Result<Vec<Run>>;
    fn get_run(&self, id: &RunId) -> Result<Option<Run>>;
    /// The newest run (by creation) of `loop_id` that reported a session id and
    /// finished succeeded, failed or timed out — what a `session: continue` loop's next
    /// run resumes, if [`loops_core::session::resumable`] accepts it (abandoned runs
    /// are passed over: their conversation may be torn).
    fn last_session_run(&self, loop_id: &LoopId) -> Result<Option<Run>>;
    /// Runs newest first (by creation; rows created in the same millisecond newest
    /// insertion first), filtered by loop, labels, statuses and a creation window
    /// ([`RunFilter`]), each through an index.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>>;
    /// Deletes finished runs by policy, with their events, and trims the event log to
    /// the policy's `keep_events`; with `dry_run` only counts runs. Returns the count.
    fn prune_runs(&self, policy: &PrunePolicy, dry_run: bool) -> Result<usize>;

    // ---- reports and imports ----
    /// What `loops health` needs to know about the runs of each loop asked about, in
    /// the order asked ([`RunFacts`]): the statuses of the newest `recent` rows (newest
    /// first, by creation, then slot and attempt; a failed attempt's error with it), the
    /// newest row and the newest success in full, the failed attempts recorded after
    /// it, the
    /// `skipped` rows with `scheduledFor` in the query's `window`, the slots of its
    /// rows in its `slot_window` (each bound inclusive) — the distinct ones on the
    /// query's grid counted, else listed — and the oldest slot of any row. A loop
    /// without runs (or unknown) gets empty facts. Each loop costs a few bounded index
    /// lookups — its newest rows, its window's rows — never a scan of its whole history
    /// (except to find the last success of a loop whose `recent` rows hold none).
    fn run_facts(&self, queries: &[FactsQuery], recent: usize) -> Result<Vec<RunFacts>>;
    /// The newest `recent` runs of each loop in `loops`, in the order asked, each
    /// loop's newest first (by creation, then slot and attempt, as [`Store::run_facts`]
    /// orders them): the dashboard's strips. An unknown loop gets none. The default
    /// asks [`Store::list_runs`] once per loop; a backend should answer with one
    /// set-based statement (the SQLite store does).
    fn recent_runs(&self, loops: &[LoopId], recent: usize) -> Result<Vec<Vec<RunSummary>>> {
        loops
            .iter()
            .map(|id| {
                let runs = self.list_runs(&RunFilter {
                    loop_id: Some(id.clone()),
                    limit: Some(recent),
                    ..RunFilter::default()
                })?;
                Ok(runs.iter().map(RunSummary::of).collect())
            })
            .collect()
    }
    /// How many runs created at or after `since` have each status, by status (the
    /// dashboard's counters); statuses without runs are left out. The default reads
    /// the rows through [`Store::list_runs`]; a backend should count in the store.
    fn run_status_counts(&self, since: Instant) -> Result<Vec<(loops_core::RunStatus, u64)>> {
        let runs = self.list_runs(&RunFilter {
            since: Some(since),
            ..RunFilter::default()
        })?;
        let mut counts: Vec<(loops_core::RunStatus, u64)> = Vec::new();
        for run in &runs {
            match counts.iter_mut().find(|(s, _)| *s == run.status) {
                Some((_, n)) => *n += 1,
                None => counts.push((run.status, 1)),
            }
        }
        counts.sort_by_key(|(s, _)| s.as_str());
        Ok(counts)
    }
    /// Agent usage recorded on runs and step runs that finished at or after `since`,
    /// oldest first, through an index of the rows that carry usage (not a scan of
    /// every run).
    fn usage_since(&self, since: Instant) -> Result<Vec<UsageRow>>;
    /// Writes a whole import in one transaction: each workflow spec as a new active
    /// spec ([`StoreError::DuplicateWorkflow`] when an active spec has its name), then
    /// each loop as [`Store::create_loop`] would ([`StoreError::DuplicateName`] when a
    /// loop has its name) with its schedule state and history. Any error writes
    /// nothing at all: an import is applied completely or not.
    fn import(&self, batch: &ImportBatch, now: Instant) -> Result<Imported>;

    // ---- daemon lease ----
    /// Takes the lease when it is free, expired, held by the same runner, or `takeover`
    /// says the (live, foreign) holder is gone — `takeover` is asked about nothing else;
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
    fn renew_daemon_lease(&self, fence: &Fence, ttl_ms: u64, now: Instant) -> Result<bool>;
    /// Gives the lease up (no-op when not held).
    fn release_daemon_lease(&self, fence: &Fence) -> Result<()>;
    fn current_daemon_lease(&self) -> Result<Option<DaemonLease>>;

    // ---- notifications (README, "Notifications") ----
    /// The store-wide default notification settings (`loops notify set`), used by
    /// loops without settings of their own.
    fn notify_default(&self) -> Result<Option<Notify>>;
    /// Sets (`Some`) or clears (`None`) the store-wide default.
    fn set_notify_default(&self, notify: Option<&Notify>) -> Result<()>;
    /// The deliveries of the given runs, by run (in the order given) then oldest first.
    fn deliveries_of_runs(&self, runs: &[RunId]) -> Result<Vec<Delivery>>;
    /// Pending deliveries, oldest first, at most `limit`, claimed or not (the caller
    /// decides which claims it may take over).
    fn pending_deliveries(&self, limit: usize) -> Result<Vec<Delivery>>;
    /// Claims a pending delivery for `runner_id` until `until`, only while it is still
    /// pending and claimed by `from` (`None`: by nobody) — one conditional write, so of
    /// racing runners one wins. `None` when it was not (any more) to be had.
    fn claim_delivery(
        &self,
        id: &str,
        from: Option<&str>,
        runner_id: &str,
        until: Instant,
        now: Instant,
    ) -> Result<Option<Delivery>>;
    /// Records a try of a delivery claimed by its `runner_id`: its attempts and last
    /// error, and its status (`delivered` / `failed` end it and drop the claim;
    /// `pending` keeps it). `None` when the row is gone or no longer claimed by that
    /// runner.
    fn record_delivery(&self, attempt: &DeliveryTry, now: Instant) -> Result<Option<Delivery>>;

    // ---- runs, for live views (`loops logs`, `runs --follow`) ----
    /// Runs whose id starts with `prefix` (at most `limit`), by id.
    fn runs_with_id_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<Run>>;
    /// Runs created at or after `since` (optionally of one loop), oldest first (rows of
    /// the same millisecond in insertion order), at most `limit`: through the creation
    /// index, so a poll costs what it returns.
    fn runs_created_since(
        &self,
        since: Instant,
        loop_id: Option<&LoopId>,
        limit: usize,
    ) -> Result<Vec<Run>>;

    // ---- the event log (the HTTP API's `/v1/events`) ----
    /// Events numbered above `after`, oldest first, at most `limit`: through the log's
    /// primary key, so a poll that finds nothing costs one index probe. Events become
    /// visible in number order: once one is visible, none with a lower number appears
    /// later (so a reader that saw up to `n` misses nothing by asking for `after: n`).
    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<loops_core::event::Event>>;
    /// The oldest retained event's number and the newest number ever given.
    fn event_bounds(&self) -> Result<EventBounds>;

    // ---- usage-limit holds (issue #20 item 2, `loops_core::hold`) ----
    /// Every account hold, by provider and account: active ones and those past their
    /// instant that no run released yet. A finalization writes and releases them (in
    /// its transaction, as `loops_core::hold::after_finish` decides, queueing one
    /// `held` / `resumed` notification per key); the due-loop queries
    /// ([`Store::due_loops`], [`Store::next_due_at`] and their `_on` forms) leave the
    /// loops of an active hold's key out, and wake at its end instead.
    fn account_holds(&self) -> Result<Vec<loops_core::hold::AccountHold>>;

    // ---- concurrency caps and account pools (issue #20 item 6, `loops_core::caps`) ----
    /// The running rows of every runner, grouped by what they count against (their
    /// kind, provider and account as recorded at claim; rows recorded before count
    /// against nothing).
    fn running_keys(&self) -> Result<loops_core::caps::InFlight>;
    /// Records the caps `runner_id` runs with (`Caps::to_flag`; empty removes its row).
    fn record_caps(&self, runner_id: &str, caps: &str, now: Instant) -> Result<()>;
    /// The caps recorded by the daemons that may be running: `(runner id, caps)`, by
    /// runner id (on PostgreSQL those of live runners, on SQLite the lease holder's).
    fn recorded_caps(&self) -> Result<Vec<(String, String)>>;
    /// Deletes the holds of `provider` (on `account`, or on every account); returns
    /// them. No notification: a person did it.
    fn clear_account_holds(
        &self,
        provider: loops_core::Provider,
        account: Option<&str>,
    ) -> Result<Vec<loops_core::hold::AccountHold>>;

    /// After a workflow agent step on `key` ended at `now`: writes or releases the key's
    /// hold as `loops_core::hold::after_step` decides from the hold as stored (`limit`:
    /// the usage limit the step met, if it met one), in one transaction, fenced like
    /// the step's own writes. No notification: a step names no loop run. Returns the
    /// key's hold as it is afterwards.
    fn hold_after_step(
        &self,
        key: &loops_core::hold::HoldKey,
        limit: Option<&loops_core::hold::StepLimit>,
        now: Instant,
        fence: Option<&Fence>,
    ) -> Result<Option<loops_core::hold::AccountHold>>;

    /// The store-wide budgets (`loops budget set`), by provider and account.
    fn budgets(&self) -> Result<Vec<loops_core::budget::StoreBudget>>;
    /// Writes `budget` (replacing the one of its provider and account), then decides
    /// its holds again at `budget.updated_at` (a raised limit releases the hold, a
    /// lowered one may hold at once; no notification without a run).
    fn set_budget(&self, budget: &loops_core::budget::StoreBudget) -> Result<()>;
    /// Deletes the budget of `provider` and exactly `account` (`None`: the provider's
    /// budget for every account) and releases its holds at `now` (one whose `held`
    /// went out ends, for the next run it covers to send `resumed`); returns it.
    fn clear_budget(
        &self,
        provider: loops_core::Provider,
        account: Option<&str>,
        now: loops_core::Instant,
    ) -> Result<Option<loops_core::budget::StoreBudget>>;
    /// Every budget hold row (active ones and those past their window that no run
    /// released yet). A finalization of an agent loop's run writes and releases them in
    /// its transaction, as `loops_core::budget::decide` says for each budget covering
    /// the loop; the due-loop queries leave the loops of an active one out, like
    /// [`Store::account_holds`], and wake at its end.
    fn budget_holds(&self) -> Result<Vec<loops_core::budget::BudgetHold>>;
    /// What the runs of `scope` that finished at or after `since` reported, added up
    /// (a key: the runs of the agent loops it covers).
    fn budget_spend(
        &self,
        scope: &loops_core::budget::BudgetScope,
        since: Instant,
    ) -> Result<loops_core::budget::Spend>;

    // ---- maintenance ----
    /// Tunes the store for a long-lived, write-heavy owner (the daemon): housekeeping
    /// that would otherwise stall a commit now and then (SQLite's WAL checkpoints with
    /// their fsyncs) moves to a background thread. Lasts until the store is dropped.
    fn start_background_maintenance(&self) -> Result<()> {
        Ok(())
    }
    /// Another handle on the same store with a connection of its own, for long
    /// housekeeping (the daemon's retention) that must not hold up this handle's
    /// callers: a handle's calls take turns on its one connection, so minutes of
    /// ranking runs would otherwise stop the scheduling passes for as long. `None`
    /// where the store cannot be opened twice (SQLite in memory); the caller then uses
    /// this handle.
    fn open_another(&self) -> Result<Option<Box<dyn Store>>> {
        Ok(None)
    }

    // ---- runners: several daemons on one store (PostgreSQL; issue #12) ----
    /// Whether this store lets several daemons ("runners") share it, each with a lease
    /// of its own ([`Store::register_runner`]), instead of the one daemon lease. The
    /// default (SQLite) is no: those methods fail with [`StoreError::InvalidArgument`].
    fn supports_runners(&self) -> bool {
        false
    }
    /// Registers a runner with a new epoch — a fencing token no runner (nor daemon
    /// lease) had before — and a lease of `ttl_ms` judged by the store's own clock.
    /// Writes fenced with [`RunnerLease::fence`] apply only while that lease is live:
    /// once it expired (the runner stalled or was cut off), every one of them fails with
    /// [`StoreError::LeaseLost`], and the runs it claimed count as its runner's gone
    /// (their lease in [`Store::running_runs`] is the runner's).
    fn register_runner(&self, runner: &RunnerRegistration, ttl_ms: u64) -> Result<RunnerLease> {
        let _ = (runner, ttl_ms);
        Err(StoreError::InvalidArgument(
            "this store has one daemon lease, not runners".to_owned(),
        ))
    }
    /// Extends a live runner lease by `ttl_ms` from the store's clock; `None` when it
    /// already expired or was released (the runner must stop its runs and register
    /// anew).
    fn renew_runner(&self, fence: &Fence, ttl_ms: u64) -> Result<Option<RunnerLease>> {
        let _ = (fence, ttl_ms);
        Err(StoreError::InvalidArgument(
            "this store has one daemon lease, not runners".to_owned(),
        ))
    }
    /// Ends a runner lease (a clean shutdown): its epoch fences nothing from now on.
    fn release_runner(&self, fence: &Fence) -> Result<()> {
        let _ = fence;
        Ok(())
    }
    /// Every runner registered recently (live ones first, then by host and start), with
    /// its running runs counted; empty on a store without runners.
    fn runners(&self) -> Result<Vec<RunnerInfo>> {
        Ok(Vec::new())
    }
    /// Asks the live runners to start a run of `loop_id` now (`run-now --on-runner`):
    /// a pending [`RunRequest`] that lasts `wait_ms` by the store's clock, and a wake-up
    /// for every runner when it commits. Returns the request's id.
    fn request_run(
        &self,
        loop_id: &LoopId,
        allow_overlap: bool,
        requested_by: &str,
        wait_ms: u64,
    ) -> Result<String> {
        let _ = (loop_id, allow_overlap, requested_by, wait_ms);
        Err(StoreError::InvalidArgument(
            "this store has one daemon lease, not runners".to_owned(),
        ))
    }
    /// Pending, unexpired run requests a runner advertising `labels` can take (it has
    /// every runner label of the loop; a request for a loop that is gone is included,
    /// so that it is answered), oldest first, at most `limit`.
    fn pending_run_requests(&self, labels: &[String], limit: usize) -> Result<Vec<RunRequest>> {
        let _ = (labels, limit);
        Ok(Vec::new())
    }
    /// [`Store::claim_run`] on behalf of a run request, in one transaction with its
    /// answer: while the request is still pending and unexpired, the claim is made, and
    /// when it succeeds the request records the run (answered `Started`, with `source`).
    /// `None` when the request is no longer pending (withdrawn, expired, or answered
    /// by another runner): nothing was claimed.
    fn claim_requested_run(
        &self,
        request_id: &str,
        req: &ClaimRequest,
        advance: Option<&LoopAdvance>,
        fence: Option<&Fence>,
    ) -> Result<Option<std::result::Result<Run, ClaimRefused>>> {
        let _ = (request_id, req, advance, fence);
        Err(StoreError::InvalidArgument(
            "this store has one daemon lease, not runners".to_owned(),
        ))
    }
    /// Answers a pending run request `Refused` with `reason`; false when it was no longer
    /// pending.
    fn refuse_run_request(
        &self,
        request_id: &str,
        runner_id: &str,
        reason: &str,
        fence: Option<&Fence>,
    ) -> Result<bool> {
        let _ = (request_id, runner_id, reason, fence);
        Ok(false)
    }
    /// A run request as stored now; `None` when there is none with that id.
    fn run_request(&self, request_id: &str) -> Result<Option<RunRequest>> {
        let _ = request_id;
        Ok(None)
    }
    /// Deletes a run request whatever its state — pending ones are withdrawn, so no
    /// runner takes them any more — and returns it as it was; `None` when there was none.
    fn withdraw_run_request(&self, request_id: &str) -> Result<Option<RunRequest>> {
        let _ = request_id;
        Ok(None)
    }
    /// Calls `wake` whenever another process (on any host) changed what is due —
    /// created, edited or resumed a loop, or finished a run that moved one — until the
    /// returned guard is dropped; `None` when the store has no such channel (SQLite:
    /// the daemon's local wake socket serves instead). A backend that loses its channel
    /// reconnects by itself; meanwhile callers rely on their own deadlines.
    fn watch_wakeups(&self, wake: WakeFn) -> Result<Option<WakeGuard>> {
        let _ = wake;
        Ok(None)
    }
}

/// What a [`Store::watch_wakeups`] caller is called with on every wake-up.
pub type WakeFn = std::sync::Arc<dyn Fn() + Send + Sync>;
/// Keeps a [`Store::watch_wakeups`] subscription alive; dropping it ends it.
pub type WakeGuard = Box<dyn std::any::Any + Send>;

/// Persistence of workflow specs, workflow runs, step runs and their event logs.
/// Runner writes carry the daemon's fence like every other daemon write.
pub trait WorkflowStore {
    /// Stores a new spec. An active spec with the same name is an error
    /// ([`StoreError::DuplicateWorkflow`]) unless `replace`, which archives it and gives
    /// the new one a higher version, in one transaction.
    fn create_workflow(&self, spec: &WorkflowSpec, replace: bool, now: Instant)
        -> Result<Workflow>;
    fn get_workflow(&self, id: &str) -> Result<Option<Workflow>>;
    /// The active spec with this name.
    fn get_active_workflow(&self, name: &str) -> Result<Option<Workflow>>;
    /// Specs whose id starts with `prefix` (at most `limit`).
    fn workflows_with_id_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<Workflow>>;
    /// Specs by name then version, optionally of one status.
    fn list_workflows(&self, status: Option<WorkflowStatus>) -> Result<Vec<Workflow>>;
    /// Marks a spec archived.
    fn archive_workflow(&self, id: &str, now: Instant) -> Result<Workflow>;

    /// Creates a run of `workflow` with `params` (the values it uses), every step
    /// `pending` and a `created` event — or, when `origin`'s slot already has a run,
    /// returns that one (`false`), with the params it was created with: a slot never
    /// has two workflow runs.
    fn create_workflow_run(
        &self,
        workflow: &Workflow,
        origin: Option<&RunOrigin>,
        params: &loops_core::workflow_params::ParamValues,
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
