//! The SQLite backend of [`loops_store::Store`], the embedded default.
//!
//! One connection behind a mutex per [`SqliteStore`]; several processes (or several
//! stores in one process) share a file through WAL mode and the busy timeout. Every
//! write runs in a `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so
//! concurrent writers queue on the busy timeout instead of failing on a stale read
//! snapshot, and a fenced write checks the daemon lease in the same transaction.
//!
//! Instants are stored as INTEGER milliseconds since the epoch, so values read back
//! carry millisecond precision (sub-millisecond parts of inputs are dropped).
//!
//! The modules follow the trait's parts: [`open`](SqliteStore::open) (creating,
//! inspecting and migrating the file), `codec` (columns and rows), `loops` (loop rows),
//! `claims`, `finalize` (a batch of run writes, with the notifications they queue),
//! `notify` (notification settings and deliveries), `runs` (leases of runs and queries),
//! `reports` (health facts and usage), `import` (one import in one transaction),
//! [`openloops`] (reading an OpenLoops 0.3 database for `import --from-openloops`),
//! `lease` (the daemon lease and the fence), `checkpoint` (background WAL maintenance),
//! `workflows`, [`backup`] (online copies, restore, the copy before a migration) and
//! `copy` (`store copy --to sqlite:PATH`'s bulk insert). SQL lives only in this crate.
//!
//! A bound `LIMIT` is written `LIMIT +?N`, never `LIMIT ?N`: SQLite lets the query
//! planner look at a bare `LIMIT` parameter, which marks the statement to be compiled
//! again whenever that parameter is bound — so a cached statement such as the due
//! loops' query was re-prepared on every scheduling pass (8.8 % of the daemon's CPU at
//! 1,000 runs/s; BENCHMARKS.md §23). The unary plus makes it an expression the
//! planner does not read. `tests/limit_params.rs` holds every statement to this.

pub mod backup;
mod budgets;
mod checkpoint;
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
pub mod openloops;
mod reports;
mod runs;
mod workflows;

pub use backup::{BackupError, BackupInfo, BackupKind, Restored, StoreCounts};
pub use open::SCHEMA_VERSION;
pub use reports::FactsRead;

use crate::error::{Result, StoreResult};
use loops_core::health::{FactsQuery, RunFacts};
use loops_core::{Delivery, Instant, Loop, LoopId, LoopStatus, NewLoop, Notify, Run, RunId};
use loops_store::DeliveryTry;
use loops_store::{
    BatchClaim, ClaimOutcome, DaemonLease, Fence, ImportBatch, Imported, LeaseAcquire, LeaseHolder,
    LoopAdvance, LoopFilter, LoopUpdate, LoopVersion, PrunePolicy, RunFilter, RunWrite, RunWritten,
    SlotMove, Store, StoreError, UnreadableLoop, UsageRow,
};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    /// Shared (weakly) with the background checkpointer, which briefly holds it.
    conn: Arc<Mutex<Connection>>,
    /// `None` for an in-memory store.
    path: Option<PathBuf>,
    /// The background checkpointer, once started; dropping it stops the thread.
    checkpointer: OnceLock<checkpoint::Checkpointer>,
    /// The file's claim ([`loops_store::open_files`]), released after the connection closed (fields
    /// drop in order): `None` for an in-memory store.
    claim: Option<loops_store::open_files::Claim>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    fn with_connection(
        conn: Connection,
        file: Option<(&Path, loops_store::open_files::Claim)>,
    ) -> Self {
        let (path, claim) = file.map_or((None, None), |(p, c)| (Some(p.to_path_buf()), Some(c)));
        Self {
            conn: Arc::new(Mutex::new(conn)),
            path,
            checkpointer: OnceLock::new(),
            claim,
        }
    }

    /// The database file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-applied write behind (the
        // transaction rolls back when dropped), so the connection is still usable.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn display_path(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| ":memory:".to_owned(), |p| p.display().to_string())
    }

    /// Names this store's file in a [`StoreError::Corrupt`] that did not know it.
    fn with_path(&self, e: StoreError) -> StoreError {
        match self.path() {
            Some(path) => e.with_path(path),
            None => e,
        }
    }

    /// Runs the reads of `f` on the connection.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> StoreResult<T> {
        let conn = self.lock();
        Ok(f(&conn)?)
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, after checking `fence` (at the
    /// given instant) inside it; commits only when `f` succeeds.
    fn write<T>(
        &self,
        fence: Option<(&Fence, Instant)>,
        f: impl FnOnce(&Transaction<'_>) -> Result<T>,
    ) -> StoreResult<T> {
        let mut conn = self.lock();
        let result = (|| -> Result<T> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some((fence, now)) = fence {
                lease::check_fence(&tx, fence, now)?;
            }
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })();
        drop(conn);
        if result.is_ok() {
            self.nudge_checkpointer();
        }
        result.map_err(|e| match StoreError::from(e) {
            StoreError::Backend {
                kind: loops_store::BackendErrorKind::ReadOnly,
                source,
                ..
            } => StoreError::ReadOnly {
                path: self.display_path(),
                source,
            },
            other => self.with_path(other),
        })
    }
}

/// Query plans of the filtered listings (issue #11), for the tests that keep them on
/// their indexes and for benchmarks: the `detail` column of `EXPLAIN QUERY PLAN` for
/// the very statement [`Store::list_runs`] / [`Store::loop_rows_matching`] runs.
impl SqliteStore {
    /// The plan of [`Store::list_runs`] for `filter`.
    pub fn runs_query_plan(&self, filter: &RunFilter) -> StoreResult<Vec<String>> {
        let (sql, params) = runs::runs_query(filter);
        self.query_plan(&sql, params)
    }

    /// The plan of [`Store::loop_rows_matching`] for `filter`.
    pub fn loops_query_plan(&self, filter: &LoopFilter) -> StoreResult<Vec<String>> {
        let (sql, params) = loops::loops_query(filter);
        self.query_plan(&sql, params)
    }

    /// The plans of the statements behind [`Store::run_facts`] and
    /// [`Store::usage_since`] and [`Store::run_status_counts`], by name (`recent`, `window`,
    /// `usage runs`, `usage steps`, `status counts`, `scan`).
    pub fn report_query_plans(&self) -> StoreResult<Vec<(String, Vec<String>)>> {
        reports::report_queries()
            .into_iter()
            .map(|(name, sql, params)| Ok((name.to_owned(), self.query_plan(&sql, params)?)))
            .collect()
    }

    /// [`Store::run_facts`] read the way `how` says, not the way the store's size
    /// picks: for a test that both ways give the same facts.
    pub fn run_facts_read(
        &self,
        queries: &[FactsQuery],
        recent: usize,
        how: reports::FactsRead,
    ) -> StoreResult<Vec<RunFacts>> {
        reports::run_facts(self, queries, recent, Some(how))
    }

    fn query_plan(
        &self,
        sql: &str,
        params: Vec<rusqlite::types::Value>,
    ) -> StoreResult<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(row.get::<_, String>(3)?);
            }
            Ok(out)
        })
    }
}

/// Each method is implemented in the module of its part of the trait.
impl Store for SqliteStore {
    fn create_loop(&self, new: NewLoop, now: Instant) -> StoreResult<Loop> {
        loops::create_loop(self, new, now)
    }

    fn get_loop(&self, id: &LoopId) -> StoreResult<Option<Loop>> {
        loops::get_loop(self, id)
    }

    fn get_loop_by_name(&self, name: &str) -> StoreResult<Option<Loop>> {
        loops::get_loop_by_name(self, name)
    }

    fn loops_with_id_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Loop>> {
        loops::loops_with_id_prefix(self, prefix, limit)
    }

    fn loop_rows(
        &self,
        status: Option<LoopStatus>,
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        loops::loop_rows(self, status)
    }

    fn update_loop_schedule(
        &self,
        id: &LoopId,
        advance: &LoopAdvance,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Loop> {
        loops::update_loop_schedule(self, id, advance, now, fence)
    }

    fn move_slots_back(
        &self,
        moves: &[SlotMove],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<Loop>> {
        loops::move_slots_back(self, moves, now, fence)
    }

    fn remove_loop(&self, id: &LoopId) -> StoreResult<bool> {
        loops::remove_loop(self, id)
    }

    fn due_loops(
        &self,
        now: Instant,
        limit: usize,
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        loops::due_loops(self, now, limit)
    }

    fn next_due_at(&self) -> StoreResult<Option<Instant>> {
        loops::next_due_at(self)
    }

    fn park_loop(
        &self,
        id: &LoopId,
        reason: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Option<Run>> {
        loops::park_loop(self, id, reason, now, fence)
    }

    fn expire_loops(&self, now: Instant, fence: Option<&Fence>) -> StoreResult<Vec<Loop>> {
        loops::expire_loops(self, now, fence)
    }

    fn update_loop_definition(
        &self,
        id: &LoopId,
        update: &LoopUpdate,
        expected: &LoopVersion,
        now: Instant,
    ) -> StoreResult<Option<Loop>> {
        loops::update_loop_definition(self, id, update, expected, now)
    }

    fn loop_rows_matching(
        &self,
        filter: &LoopFilter,
    ) -> StoreResult<Vec<std::result::Result<Loop, UnreadableLoop>>> {
        loops::loop_rows_matching(self, filter)
    }

    fn each_loop_row(
        &self,
        filter: &LoopFilter,
        each: &mut dyn FnMut(
            std::result::Result<Loop, UnreadableLoop>,
        ) -> std::ops::ControlFlow<()>,
    ) -> StoreResult<()> {
        loops::each_loop_row(self, filter, each)
    }

    fn count_loops(&self, filter: &LoopFilter) -> StoreResult<usize> {
        loops::count_loops(self, filter)
    }

    fn claim_runs(
        &self,
        batch: &[BatchClaim],
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<ClaimOutcome>> {
        claims::claim_runs(self, batch, fence)
    }

    fn renew_run_leases(
        &self,
        runs: &[RunId],
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<usize> {
        runs::renew_run_leases(self, runs, runner_id, now, fence)
    }

    fn record_run_writes(
        &self,
        writes: &[RunWrite],
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Vec<StoreResult<RunWritten>>> {
        finalize::record_run_writes(self, writes, now, fence)
    }

    fn take_over_run(
        &self,
        run: &RunId,
        from: Option<&str>,
        runner_id: &str,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Run> {
        runs::take_over_run(self, run, from, runner_id, now, fence)
    }

    fn running_runs(&self, loop_id: Option<&LoopId>) -> StoreResult<Vec<Run>> {
        runs::running_runs(self, loop_id)
    }

    fn get_run(&self, id: &RunId) -> StoreResult<Option<Run>> {
        runs::get_run(self, id)
    }

    fn last_session_run(&self, loop_id: &LoopId) -> StoreResult<Option<Run>> {
        runs::last_session_run(self, loop_id)
    }

    fn list_runs(&self, filter: &RunFilter) -> StoreResult<Vec<Run>> {
        runs::list_runs(self, filter)
    }

    fn prune_runs(&self, policy: &PrunePolicy, dry_run: bool) -> StoreResult<usize> {
        runs::prune_runs(self, policy, dry_run)
    }

    fn run_facts(&self, queries: &[FactsQuery], recent: usize) -> StoreResult<Vec<RunFacts>> {
        reports::run_facts(self, queries, recent, None)
    }

    fn usage_since(&self, since: Instant) -> StoreResult<Vec<UsageRow>> {
        reports::usage_since(self, since)
    }

    fn recent_runs(
        &self,
        loops: &[LoopId],
        recent: usize,
    ) -> StoreResult<Vec<Vec<loops_store::RunSummary>>> {
        reports::recent_runs(self, loops, recent)
    }

    fn run_status_counts(&self, since: Instant) -> StoreResult<Vec<(loops_core::RunStatus, u64)>> {
        reports::run_status_counts(self, since)
    }

    fn import(&self, batch: &ImportBatch, now: Instant) -> StoreResult<Imported> {
        import::import(self, batch, now)
    }

    fn acquire_daemon_lease(
        &self,
        holder: &LeaseHolder,
        ttl_ms: u64,
        now: Instant,
        takeover: &dyn Fn(&DaemonLease) -> bool,
    ) -> StoreResult<LeaseAcquire> {
        lease::acquire_daemon_lease(self, holder, ttl_ms, now, takeover)
    }

    fn renew_daemon_lease(&self, fence: &Fence, ttl_ms: u64, now: Instant) -> StoreResult<bool> {
        lease::renew_daemon_lease(self, fence, ttl_ms, now)
    }

    fn release_daemon_lease(&self, fence: &Fence) -> StoreResult<()> {
        lease::release_daemon_lease(self, fence)
    }

    fn current_daemon_lease(&self) -> StoreResult<Option<DaemonLease>> {
        lease::current_daemon_lease(self)
    }

    fn notify_default(&self) -> StoreResult<Option<Notify>> {
        notify::notify_default(self)
    }

    fn set_notify_default(&self, settings: Option<&Notify>) -> StoreResult<()> {
        notify::set_notify_default(self, settings)
    }

    fn deliveries_of_runs(&self, runs: &[RunId]) -> StoreResult<Vec<Delivery>> {
        notify::deliveries_of_runs(self, runs)
    }

    fn pending_deliveries(&self, limit: usize) -> StoreResult<Vec<Delivery>> {
        notify::pending_deliveries(self, limit)
    }

    fn claim_delivery(
        &self,
        id: &str,
        from: Option<&str>,
        runner_id: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<Option<Delivery>> {
        notify::claim_delivery(self, id, from, runner_id, until, now)
    }

    fn record_delivery(
        &self,
        attempt: &DeliveryTry,
        now: Instant,
    ) -> StoreResult<Option<Delivery>> {
        notify::record_delivery(self, attempt, now)
    }

    fn runs_with_id_prefix(&self, prefix: &str, limit: usize) -> StoreResult<Vec<Run>> {
        runs::runs_with_id_prefix(self, prefix, limit)
    }

    fn runs_created_since(
        &self,
        since: Instant,
        loop_id: Option<&LoopId>,
        limit: usize,
    ) -> StoreResult<Vec<Run>> {
        runs::runs_created_since(self, since, loop_id, limit)
    }

    fn events_after(&self, after: u64, limit: usize) -> StoreResult<Vec<loops_core::event::Event>> {
        events::events_after(self, after, limit)
    }

    fn event_bounds(&self) -> StoreResult<loops_store::EventBounds> {
        events::event_bounds(self)
    }

    fn account_holds(&self) -> StoreResult<Vec<loops_core::hold::AccountHold>> {
        holds::account_holds(self)
    }

    fn running_keys(&self) -> StoreResult<loops_core::caps::InFlight> {
        self.read(claims::running_keys_in)
    }

    fn record_caps(&self, runner_id: &str, caps: &str, now: Instant) -> StoreResult<()> {
        self.write(None, |tx| {
            if caps.is_empty() {
                tx.prepare_cached("DELETE FROM concurrency_caps WHERE runner_id = ?1")?
                    .execute([runner_id])?;
            } else {
                tx.prepare_cached(
                    "INSERT INTO concurrency_caps (runner_id, caps, recorded_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (runner_id) DO UPDATE SET caps = excluded.caps, \
                     recorded_at = excluded.recorded_at",
                )?
                .execute(rusqlite::params![runner_id, caps, codec::ms(&now)])?;
            }
            Ok(())
        })
    }

    fn recorded_caps(&self) -> StoreResult<Vec<(String, String)>> {
        self.read(|conn| {
            // Only the lease holder's: a daemon that died keeps its row until the next
            // one with caps replaces it, but says nothing once it lost the lease.
            let mut stmt = conn.prepare_cached(
                "SELECT c.runner_id, c.caps FROM concurrency_caps c \
                 JOIN daemon_lease l ON l.runner_id = c.runner_id ORDER BY c.runner_id",
            )?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn clear_account_holds(
        &self,
        provider: loops_core::Provider,
        account: Option<&str>,
    ) -> StoreResult<Vec<loops_core::hold::AccountHold>> {
        holds::clear_account_holds(self, provider, account)
    }

    fn budgets(&self) -> StoreResult<Vec<loops_core::budget::StoreBudget>> {
        budgets::budgets(self)
    }

    fn set_budget(&self, budget: &loops_core::budget::StoreBudget) -> StoreResult<()> {
        budgets::set_budget(self, budget)
    }

    fn clear_budget(
        &self,
        provider: loops_core::Provider,
        account: Option<&str>,
        now: loops_core::Instant,
    ) -> StoreResult<Option<loops_core::budget::StoreBudget>> {
        budgets::clear_budget(self, provider, account, now)
    }

    fn hold_after_step(
        &self,
        key: &loops_core::hold::HoldKey,
        limit: Option<&loops_core::hold::StepLimit>,
        now: Instant,
        fence: Option<&Fence>,
    ) -> StoreResult<Option<loops_core::hold::AccountHold>> {
        self.write(fence.map(|f| (f, now)), |tx| {
            holds::after_step(tx, key, limit, now)
        })
    }

    fn budget_holds(&self) -> StoreResult<Vec<loops_core::budget::BudgetHold>> {
        budgets::budget_holds(self)
    }

    fn budget_spend(
        &self,
        scope: &loops_core::budget::BudgetScope,
        since: Instant,
    ) -> StoreResult<loops_core::budget::Spend> {
        budgets::budget_spend(self, scope, since)
    }

    fn start_background_maintenance(&self) -> StoreResult<()> {
        checkpoint::start_background_maintenance(self)
    }

    fn open_another(&self) -> StoreResult<Option<Box<dyn Store>>> {
        match &self.path {
            Some(path) => Ok(Some(Box::new(SqliteStore::open(path)?))),
            None => Ok(None),
        }
    }
}
