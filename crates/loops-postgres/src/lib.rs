//! The PostgreSQL backend of [`loops_store::Store`]: several daemons ("runners"), on
//! several hosts, share one set of loops.
//!
//! # Driver
//!
//! [`tokio_postgres`] on a runtime thread owned by each [`PgStore`] (`session`): every
//! trait call is a job sent to that thread, and the calling thread waits for the
//! answer on a channel. The trait stays synchronous, exactly as on SQLite, and is safe
//! to call from anywhere — including the daemon's own tokio worker threads, where the
//! synchronous `postgres` crate would panic (it blocks on a runtime of its own).
//! One connection per store, opened lazily and reopened after it broke; a call that
//! takes longer than [`CALL_TIMEOUT`] fails as a transient I/O error and closes its
//! connection, so the server rolls back what it had begun.
//!
//! # Guarantees (see `loops_store`'s crate docs for the contract)
//!
//! - Migrations run in one transaction under an advisory lock: openers starting at
//!   once migrate once (`open`).
//! - A claim locks its loop row (`FOR UPDATE`, a pass `SKIP LOCKED`) and inserts the
//!   slot attempt with `ON CONFLICT DO NOTHING` on the `(loop, scheduledFor, attempt)`
//!   key: of any number of runners racing, exactly one wins (`claims`).
//! - A fenced write checks the daemon lease row (or its runner's) `FOR SHARE` as the
//!   first statement of its own transaction (`lease`), and commits only after the
//!   check's answer said the lease is live (`session`: the check may go in one round
//!   trip with the transaction's first statements).
//! - Text is stored as on SQLite except NUL characters, which PostgreSQL cannot store:
//!   they read back as U+FFFD.
//!
//! Instants are BIGINT milliseconds since the epoch, as on SQLite, so both backends
//! return the same values. Only plain connections (`NoTls`): use a local socket, a
//! private network or a TLS tunnel.

mod budgets;
mod claim_set;
mod claims;
mod codec;
mod copy;
mod error;
mod events;
mod finalize;
mod holds;
mod import;
mod lease;
mod loops;
mod notify;
mod open;
#[cfg(test)]
mod plan_tests;
mod redact;
mod reports;
mod run_requests;
mod runners;
mod runs;
mod session;
mod wakeups;
mod workflows;

pub use copy::CopySet;
pub use open::{is_postgres_url, Inspection, SCHEMA_VERSION};
pub use redact::redact_url;
pub use session::{round_trips, CALL_TIMEOUT, CONNECT_TIMEOUT};

use crate::codec::by_id;
use crate::error::StoreResult;
use crate::session::Job;
use loops_core::health::{FactsQuery, RunFacts};
use loops_core::workflow::{
    NewEvent, RunOrigin, StepRun, Workflow, WorkflowEvent, WorkflowRun, WorkflowSpec,
};
use loops_core::{
    Delivery, Instant, Loop, LoopId, LoopStatus, NewLoop, Notify, Run, RunId, WorkflowStatus,
};
use loops_store::DeliveryTry;
use loops_store::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, DaemonLease, EventBounds, Fence,
    ImportBatch, Imported, LeaseAcquire, LeaseHolder, LoopAdvance, LoopFilter, LoopUpdate,
    LoopVersion, PrunePolicy, RunFilter, RunWrite, RunWritten, RunnerInfo, RunnerLease,
    RunnerRegistration, SlotMove, Store, StoreError, UnreadableLoop, UsageRow, WakeFn, WakeGuard,
    WorkflowStore,
};
use std::str::FromStr;
use tokio::sync::mpsc::UnboundedSender;

/// The PostgreSQL implementation of [`Store`].
pub struct PgStore {
    jobs: UnboundedSender<Job>,
    /// For connections of its own (wake-ups).
    config: tokio_postgres::Config,
    /// The URL without its password.
    display: String,
    /// How many migrations this store's open applied.
    applied: usize,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.display)
            .finish_non_exhaustive()
    }
}

/// Runs `$body` (a future using `$db`, a [`Db`] on the connection) as one call.
macro_rules! read {
    ($store:expr, |$db:ident| $body:expr) => {
        $store.call(move |s| {
            Box::pin(async move {
                let $db = &s.reader().await?;
                $body.await
            })
        })
    };
}

/// Runs `$body` (a future using `$db`, a [`Db`] on a transaction) in one transaction,
/// after checking `$fence` (`Option<(Fence, Instant)>`) inside it; commits only when
/// the body succeeds.
/// With `|$db, $epoch|`, the body also sees the fence's runner epoch (`None` for no
/// fence or the daemon lease's).
macro_rules! write {
    ($store:expr, $fence:expr, |$db:ident| $body:expr) => {
        write!($store, $fence, |$db, _epoch| $body)
    };
    ($store:expr, $fence:expr, |$db:ident, $epoch:ident| $body:expr) => {{
        let fence: Option<(Fence, Instant)> = $fence;
        $store.call(move |s| {
            Box::pin(async move {
                let (tx, fenced) = s.begin(fence.as_ref()).await?;
                let out: crate::error::Result<_> = async {
                    let $db = &tx.db();
                    let $epoch: Option<i64> = fenced?;
                    $body.await
                }
                .await;
                match out {
                    Ok(out) => {
                        tx.commit().await?;
                        Ok(out)
                    }
                    Err(e) => {
                        tx.rollback().await;
                        Err(e)
                    }
                }
            })
        })
    }};
}

fn fenced(fence: Option<&Fence>, now: Instant) -> Option<(Fence, Instant)> {
    fence.map(|f| (f.clone(), now))
}

// After the macros above, which they use.
mod store;
mod workflow_store;

/// Each method is implemented in the module of its part of the trait.
impl Store for PgStore {
    fn create_loop(&self, new: NewLoop, now: Instant) -> StoreResult<Loop> {
        write!(self, None, |db| async move {
            let created = loops::create_loop(db, &new, now).await?;
            wakeups::notify(db).await?;
            let body = loops_core::event::EventBody::loop_created(&created);
            events::append_all(db, &[body], now).await?;
            Ok::<_, error::Error>(created)
        })
    }

    fn get_loop(&self, id: &LoopId) -> StoreResult<Option<Loop>> {
        let id = id.clone();
        read!(self, |db| by_id::<Loop>(db, id.as_str()))
    }

    fn get_loop_by_name(&self, name: &str) -> StoreResult<Option<Loop>> {
        let name = name.to_owned();
        read!(self, |db| loops::get_loop_by_name(db, &name))
    }

    fn loops_with_id_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Loop>> {
        let prefix = prefix.to_owned();
        read!(self, |db| loops::loops_with_id_prefix(db, &prefix, limit))
    }

    fn loop_rows(
        &self,
        status: Option<LoopStatus>,
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        read!(self, |db| loops::loop_rows(db, status))
    }

    fn update_loop_schedule(
        &self,
        id: &LoopId,
        advance: &LoopAdvance,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Loop> {
        let (id, advance) = (id.clone(), advance.clone());
        write!(self, fenced(fence, now), |db| async move {
            let moved = loops::update_loop_schedule(db, &id, &advance, now).await?;
            wakeups::notify(db).await?;
            let body = loops_core::event::EventBody::loop_changed(&moved);
            events::append_all(db, &[body], now).await?;
            Ok::<_, error::Error>(moved)
        })
    }

    fn remove_loop(&self, id: &LoopId) -> StoreResult<bool> {
        let id = id.clone();
        write!(self, None, |db| loops::remove_loop(db, &id))
    }

    fn due_loops(
        &self,
        now: Instant,
        limit: usize,
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        read!(self, |db| loops::due_loops(db, now, limit, None))
    }

    fn due_loops_on(
        &self,
        now: Instant,
        limit: usize,
        labels: &[String],
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        let labels = labels.to_vec();
        read!(self, |db| loops::due_loops(db, now, limit, Some(&labels)))
    }

    fn due_loops_unless_expiring(
        &self,
        now: Instant,
        limit: usize,
        labels: &[String],
    ) -> StoreResult<Option<Vec<std::result::Result<Loop, UnreadableLoop>>>> {
        let labels = labels.to_vec();
        read!(self, |db| loops::due_loops_unless_expiring(
            db, now, limit, &labels
        ))
    }

    fn next_due_at(&self) -> StoreResult<Option<Instant>> {
        read!(self, |db| loops::next_due_at(db, None))
    }

    fn next_due_at_on(&self, labels: &[String]) -> StoreResult<Option<Instant>> {
        let labels = labels.to_vec();
        read!(self, |db| loops::next_due_at(db, Some(&labels)))
    }

    fn park_loop(
        &self,
        id: &LoopId,
        reason: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Option<Run>> {
        let (id, reason) = (id.clone(), reason.to_owned());
        write!(self, fenced(fence, now), |db| loops::park_loop(
            db, &id, &reason, now
        ))
    }

    fn move_slots_back(
        &self,
        moves: &[SlotMove],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<Loop>> {
        if moves.is_empty() {
            return Ok(Vec::new());
        }
        let moves = moves.to_vec();
        write!(self, fenced(fence, now), |db| async move {
            let moved = loops::move_slots_back(db, &moves, now).await?;
            // A slot moved back may be due before a runner's next wake-up.
            wakeups::notify(db).await?;
            let bodies: Vec<_> = moved
                .iter()
                .map(loops_core::event::EventBody::loop_changed)
                .collect();
            events::append_all(db, &bodies, now).await?;
            Ok::<_, error::Error>(moved)
        })
    }

    fn expire_loops(&self, now: Instant, fence: Option<&Fence>) -> StoreResult<Vec<Loop>> {
        // Every scheduling pass asks; almost always nothing is due to expire, and a
        // read is cheaper than an (empty) write transaction.
        if !read!(self, |db| loops::any_expired(db, now))? {
            return Ok(Vec::new());
        }
        write!(self, fenced(fence, now), |db| loops::expire_loops(db, now))
    }

    fn update_loop_definition(
        &self,
        id: &LoopId,
        update: &LoopUpdate,
        expected: &LoopVersion,
        now: Instant,
    ) -> StoreResult<Option<Loop>> {
        let (id, update, expected) = (id.clone(), update.clone(), expected.clone());
        write!(self, None, |db| async move {
            let edited = loops::update_loop_definition(db, &id, &update, &expected, now).await?;
            if edited.is_some() {
                wakeups::notify(db).await?;
            }
            Ok::<_, error::Error>(edited)
        })
    }

    fn loop_rows_matching(
        &self,
        filter: &LoopFilter,
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        let filter = filter.clone();
        read!(self, |db| loops::loop_rows_matching(db, &filter))
    }

    fn count_loops(&self, filter: &LoopFilter) -> StoreResult<usize> {
        let filter = filter.clone();
        read!(self, |db| loops::count_loops(db, &filter))
    }

    fn claim_runs(
        &self,
        batch: &[BatchClaim],
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<ClaimOutcome>> {
        let Some(first) = batch.first() else {
            return Ok(Vec::new());
        };
        let at = first.request.now;
        let batch = batch.to_vec();
        write!(self, fenced(fence, at), |db, epoch| async move {
            let outcomes = claims::claim_runs(db, &batch, epoch).await?;
            Ok::<_, error::Error>(outcomes)
        })
    }

    fn record_run_writes(
        &self,
        writes: &[RunWrite],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<StoreResult<RunWritten>>> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let writes = writes.to_vec();
        write!(self, fenced(fence, now), |db| async move {
            let done = finalize::record_run_writes(db, &writes, now).await?;
            // A finished run that moved its loop (a retry, a fixed-delay or dynamic next
            // slot) changes what is due for every runner.
            let moved = done.iter().any(|w| {
                matches!(
                    w,
                    Ok(RunWritten::Finished {
                        loop_moved: true,
                        ..
                    })
                )
            });
            if moved {
                wakeups::notify(db).await?;
            }
            Ok::<_, error::Error>(done)
        })
    }

    fn renew_run_leases(
        &self,
        runs: &[RunId],
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<usize> {
        let (runs, runner) = (runs.to_vec(), runner_id.to_owned());
        write!(self, fenced(fence, now), |db| runs::renew_run_leases(
            db, &runs, &runner, now
        ))
    }

    fn take_over_run(
        &self,
        run: &RunId,
        from: Option<&str>,
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Run> {
        let (run, from, runner) = (run.clone(), from.map(str::to_owned), runner_id.to_owned());
        write!(self, fenced(fence, now), |db, epoch| runs::take_over_run(
            db,
            &run,
            from.as_deref(),
            &runner,
            now,
            epoch
        ))
    }

    fn running_runs(&self, loop_id: Option<&LoopId>) -> StoreResult<Vec<Run>> {
        let loop_id = loop_id.cloned();
        read!(self, |db| runs::running_runs(db, loop_id.as_ref()))
    }

    fn get_run(&self, id: &RunId) -> StoreResult<Option<Run>> {
        let id = id.clone();
        read!(self, |db| by_id::<Run>(db, id.as_str()))
    }

    fn last_session_run(&self, loop_id: &LoopId) -> StoreResult<Option<Run>> {
        let loop_id = loop_id.clone();
        read!(self, |db| runs::last_session_run(db, &loop_id))
    }

    fn list_runs(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        let filter = filter.clone();
        read!(self, |db| runs::list_runs(db, &filter))
    }

    fn prune_runs(&self, policy: &PrunePolicy, dry_run: bool) -> StoreResult<usize> {
        let policy = policy.clone();
        if dry_run {
            return read!(self, |db| runs::prune_runs(db, &policy, true));
        }
        write!(self, None, |db| async move {
            run_requests::prune(db).await?;
            runs::prune_runs(db, &policy, false).await
        })
    }

    fn run_facts(&self, queries: &[FactsQuery], recent: usize) -> StoreResult<Vec<RunFacts>> {
        let queries = queries.to_vec();
        read!(self, |db| reports::run_facts(db, &queries, recent))
    }

    fn usage_since(&self, since: Instant) -> StoreResult<Vec<UsageRow>> {
        read!(self, |db| reports::usage_since(db, since))
    }

    fn run_status_counts(&self, since: Instant) -> StoreResult<Vec<(loops_core::RunStatus, u64)>> {
        read!(self, |db| reports::run_status_counts(db, since))
    }

    fn import(&self, batch: &ImportBatch, now: Instant) -> StoreResult<Imported> {
        let batch = batch.clone();
        write!(self, None, |db| async move {
            let imported = import::import(db, &batch, now).await?;
            if !imported.loops.is_empty() {
                wakeups::notify(db).await?;
            }
            Ok::<_, error::Error>(imported)
        })
    }

    fn acquire_daemon_lease(
        &self,
        holder: &LeaseHolder,
        ttl_ms: u64,
        now: Instant,
        takeover: &dyn Fn(&DaemonLease) -> bool,
    ) -> StoreResult<LeaseAcquire> {
        // The take-over callback runs here, on the caller's thread, between a read of
        // the lease and the write that takes it; the write applies only while the lease
        // is still the one judged (else the whole decision is made again).
        for _ in 0..16 {
            let existing = read!(self, |db| lease::current_daemon_lease(db))?;
            if let Some(held) = lease::acquire_decision(existing.as_ref(), holder, now, takeover) {
                return Ok(held);
            }
            let judged = existing.as_ref().map(|l| l.token);
            let holder = holder.clone();
            let taken = write!(self, None, |db| async move {
                let current = lease::lease_for_acquire(db).await?;
                if current.as_ref().map(|l| l.token) != judged {
                    return Ok(None);
                }
                lease::take_lease(db, current.as_ref(), &holder, ttl_ms, now)
                    .await
                    .map(Some)
            })?;
            if let Some(lease) = taken {
                return Ok(LeaseAcquire::Acquired(lease));
            }
        }
        Err(StoreError::backend(
            loops_store::BackendErrorKind::Busy,
            "the daemon lease kept changing while it was being acquired",
        ))
    }

    fn renew_daemon_lease(&self, fence: &Fence, ttl_ms: u64, now: Instant) -> StoreResult<bool> {
        let fence = fence.clone();
        write!(self, None, |db| lease::renew_daemon_lease(
            db, &fence, ttl_ms, now
        ))
    }

    fn release_daemon_lease(&self, fence: &Fence) -> StoreResult<()> {
        let fence = fence.clone();
        write!(self, None, |db| lease::release_daemon_lease(db, &fence))
    }

    fn current_daemon_lease(&self) -> StoreResult<Option<DaemonLease>> {
        read!(self, |db| lease::current_daemon_lease(db))
    }

    fn notify_default(&self) -> StoreResult<Option<Notify>> {
        read!(self, |db| notify::notify_default(db))
    }

    fn set_notify_default(&self, settings: Option<&Notify>) -> StoreResult<()> {
        let settings = settings.cloned();
        write!(self, None, |db| notify::set_notify_default(
            db,
            settings.as_ref()
        ))
    }

    fn deliveries_of_runs(&self, runs: &[RunId]) -> StoreResult<Vec<Delivery>> {
        let runs = runs.to_vec();
        read!(self, |db| notify::deliveries_of_runs(db, &runs))
    }

    fn pending_deliveries(&self, limit: usize) -> StoreResult<Vec<Delivery>> {
        read!(self, |db| notify::pending_deliveries(db, limit))
    }

    fn claim_delivery(
        &self,
        id: &str,
        from: Option<&str>,
        runner_id: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<Option<Delivery>> {
        let (id, from, runner) = (id.to_owned(), from.map(str::to_owned), runner_id.to_owned());
        write!(self, None, |db| notify::claim_delivery(
            db,
            &id,
            from.as_deref(),
            &runner,
            until,
            now
        ))
    }

    fn record_delivery(
        &self,
        attempt: &DeliveryTry,
        now: Instant,
    ) -> StoreResult<Option<Delivery>> {
        let attempt = attempt.clone();
        write!(self, None, |db| notify::record_delivery(db, &attempt, now))
    }

    fn supports_runners(&self) -> bool {
        true
    }

    fn register_runner(
        &self,
        runner: &RunnerRegistration,
        ttl_ms: u64,
    ) -> StoreResult<RunnerLease> {
        let runner = runner.clone();
        write!(self, None, |db| runners::register_runner(
            db, &runner, ttl_ms
        ))
    }

    fn renew_runner(&self, fence: &Fence, ttl_ms: u64) -> StoreResult<Option<RunnerLease>> {
        let fence = fence.clone();
        write!(self, None, |db| runners::renew_runner(db, &fence, ttl_ms))
    }

    fn release_runner(&self, fence: &Fence) -> StoreResult<()> {
        let fence = fence.clone();
        write!(self, None, |db| runners::release_runner(db, &fence))
    }

    fn runners(&self) -> StoreResult<Vec<RunnerInfo>> {
        read!(self, |db| runners::runners(db))
    }

    fn request_run(
        &self,
        loop_id: &LoopId,
        allow_overlap: bool,
        requested_by: &str,
        wait_ms: u64,
    ) -> StoreResult<String> {
        let (loop_id, requested_by) = (loop_id.clone(), requested_by.to_owned());
        write!(self, None, |db| async move {
            run_requests::request(db, &loop_id, allow_overlap, &requested_by, wait_ms).await
        })
    }

    fn pending_run_requests(
        &self,
        labels: &[String],
        limit: usize,
    ) -> StoreResult<Vec<loops_store::RunRequest>> {
        let labels = labels.to_vec();
        read!(self, |db| async move {
            run_requests::pending(db, &labels, limit).await
        })
    }

    fn claim_requested_run(
        &self,
        request_id: &str,
        req: &ClaimRequest,
        advance: Option<&LoopAdvance>,
        fence: Option<&Fence>,
    ) -> StoreResult<Option<std::result::Result<Run, ClaimRefused>>> {
        let (request_id, req, advance) = (request_id.to_owned(), req.clone(), advance.cloned());
        write!(self, fenced(fence, req.now), |db, epoch| async move {
            run_requests::claim(db, &request_id, &req, advance.as_ref(), epoch).await
        })
    }

    fn refuse_run_request(
        &self,
        request_id: &str,
        runner_id: &str,
        reason: &str,
        fence: Option<&Fence>,
    ) -> StoreResult<bool> {
        let (request_id, runner_id, reason) = (
            request_id.to_owned(),
            runner_id.to_owned(),
            reason.to_owned(),
        );
        write!(self, fenced(fence, chrono::Utc::now()), |db| async move {
            run_requests::refuse(db, &request_id, &runner_id, &reason).await
        })
    }

    fn run_request(&self, request_id: &str) -> StoreResult<Option<loops_store::RunRequest>> {
        let request_id = request_id.to_owned();
        read!(self, |db| by_id::<loops_store::RunRequest>(db, &request_id))
    }

    fn withdraw_run_request(
        &self,
        request_id: &str,
    ) -> StoreResult<Option<loops_store::RunRequest>> {
        let request_id = request_id.to_owned();
        write!(self, None, |db| async move {
            run_requests::withdraw(db, &request_id).await
        })
    }

    fn open_another(&self) -> StoreResult<Option<Box<dyn Store>>> {
        let another = PgStore::on_config(self.config.clone(), self.display.clone())?;
        Ok(Some(Box::new(another)))
    }

    fn watch_wakeups(&self, wake: WakeFn) -> StoreResult<Option<WakeGuard>> {
        wakeups::watch(self.config.clone(), wake)
            .map(Some)
            .map_err(|e| error::io(format!("cannot start listening for wake-ups: {e}")))
    }

    fn events_after(&self, after: u64, limit: usize) -> StoreResult<Vec<loops_core::event::Event>> {
        read!(self, |db| events::events_after(db, after, limit))
    }

    fn event_bounds(&self) -> StoreResult<EventBounds> {
        read!(self, |db| events::event_bounds(db))
    }

    fn account_holds(&self) -> StoreResult<Vec<loops_core::hold::AccountHold>> {
        read!(self, |db| holds::account_holds(db))
    }

    fn clear_account_holds(
        &self,
        provider: loops_core::Provider,
        account: Option<&str>,
    ) -> StoreResult<Vec<loops_core::hold::AccountHold>> {
        let account = account.map(str::to_owned);
        write!(self, None, |db| holds::clear_account_holds(
            db,
            provider,
            account.as_deref()
        ))
    }

    fn budgets(&self) -> StoreResult<Vec<loops_core::budget::StoreBudget>> {
        read!(self, |db| budgets::budgets(db))
    }

    fn set_budget(&self, budget: &loops_core::budget::StoreBudget) -> StoreResult<()> {
        let budget = budget.clone();
        write!(self, None, |db| budgets::set_budget(db, &budget))
    }

    fn clear_budget(
        &self,
        provider: loops_core::Provider,
        account: Option<&str>,
        now: loops_core::Instant,
    ) -> StoreResult<Option<loops_core::budget::StoreBudget>> {
        let account = account.map(str::to_owned);
        write!(self, None, |db| budgets::clear_budget(
            db,
            provider,
            account.as_deref(),
            now
        ))
    }

    fn hold_after_step(
        &self,
        key: &loops_core::hold::HoldKey,
        limit: Option<&loops_core::hold::StepLimit>,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Option<loops_core::hold::AccountHold>> {
        let (key, limit) = (key.clone(), limit.cloned());
        write!(self, fenced(fence, now), |db| holds::after_step(
            db,
            &key,
            limit.as_ref(),
            now
        ))
    }

    fn budget_holds(&self) -> StoreResult<Vec<loops_core::budget::BudgetHold>> {
        read!(self, |db| budgets::budget_holds(db))
    }

    fn budget_spend(
        &self,
        scope: &loops_core::budget::BudgetScope,
        since: Instant,
    ) -> StoreResult<loops_core::budget::Spend> {
        let scope = scope.clone();
        read!(self, |db| budgets::spend(db, &scope, since))
    }

    fn running_keys(&self) -> StoreResult<loops_core::caps::InFlight> {
        read!(self, |db| claims::running_keys(db))
    }

    fn record_caps(&self, runner_id: &str, caps: &str, now: Instant) -> StoreResult<()> {
        let (runner_id, caps) = (runner_id.to_owned(), caps.to_owned());
        write!(self, None, |db| runners::record_caps(
            db, &runner_id, &caps, now
        ))
    }

    fn recorded_caps(&self) -> StoreResult<Vec<(String, String)>> {
        read!(self, |db| runners::recorded_caps(db))
    }

    fn runs_with_id_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Run>> {
        let prefix = prefix.to_owned();
        read!(self, |db| runs::runs_with_id_prefix(db, &prefix, limit))
    }

    fn runs_created_since(
        &self,
        since: Instant,
        loop_id: Option<&LoopId>,
        limit: usize,
    ) -> StoreResult<Vec<Run>> {
        let loop_id = loop_id.cloned();
        read!(self, |db| runs::runs_created_since(
            db,
            since,
            loop_id.as_ref(),
            limit
        ))
    }
}
