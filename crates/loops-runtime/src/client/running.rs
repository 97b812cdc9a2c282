//! Running loops in this process: `tick`, `run-now`, the daemon — each on an engine
//! over this client's store (a short-lived runner of its own on a store with runners).

use super::*;

/// What [`Client::tick`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickSummary {
    /// The runs it started, as recorded once they ended.
    pub claimed: Vec<Run>,
    /// Slots recorded `skipped` (overlap `skip` while a run was in flight).
    pub skipped: Vec<RunId>,
    /// Rows of runners that are gone, recorded `abandoned`.
    pub recovered: Vec<RunId>,
    /// Loops past their `expiresAt`, now `expired`.
    pub expired: Vec<LoopId>,
}

/// What [`Client::run_now`] ran.
#[derive(Debug, Clone, PartialEq)]
pub struct RunNowOutcome {
    /// The run, as recorded once it ended.
    pub run: Run,
    /// Which slot it was: the due one (`due_slot`), a pending retry (`retry_slot`), or
    /// a one-off at now (`ad_hoc`, which leaves the schedule alone).
    pub source: RunSource,
}

/// The JSON document of `run-now --json` (and the MCP tool `loops_run_now`): the
/// run's fields (the run as it is to be shown, redacted or not; its status may still
/// be `running`), and `runNow: {source, advancesLoop}`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunNowJson<'a> {
    #[serde(flatten)]
    pub run: &'a Run,
    pub run_now: RunNowInfo,
}

/// Which slot a run-now run is, in [`RunNowJson`].
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunNowInfo {
    pub source: RunSource,
    /// Whether it was the loop's due (or retry) slot, which moves its schedule on.
    pub advances_loop: bool,
}

impl<'a> RunNowJson<'a> {
    /// `run`, claimed for `source`.
    pub fn new(run: &'a Run, source: RunSource) -> Self {
        Self {
            run,
            run_now: RunNowInfo {
                source,
                advances_loop: source != RunSource::AdHoc,
            },
        }
    }
}

/// Running loops in this process (`tick`, `run-now`, the daemon): each call builds an
/// engine on this client's store, with its output spooled in the data dir.
impl Client {
    /// An engine for this process; on a store with runners (PostgreSQL) it runs as a
    /// short-lived runner of its own, so its runs are fenced and, should this process
    /// die, recovered by the others once its lease expires. Call inside a runtime.
    pub(super) fn engine(
        &self,
        max_concurrent: NonZeroUsize,
    ) -> Result<(Arc<Engine>, Option<CliRunner>)> {
        let mut cfg = EngineConfig {
            max_concurrent,
            ..EngineConfig::for_data_dir(&self.data_dir)
        };
        let runner = if self.store.supports_runners() {
            // Its runs are held by a supervisor of this process, on deadlines under its
            // runner lease: stopped or cut off, this process cannot leave a run going
            // beside another runner's retry (without a supervisor program — a library
            // embedding the engine — they run here).
            let supervisors = crate::supervisor::program().map(|program| {
                crate::supervisor::Supervisors::lazy(crate::supervisor::SupervisorSettings {
                    program: program.to_path_buf(),
                    dir: crate::supervisor::dir_in(&self.data_dir),
                    kill_grace: cfg.exec.kill_grace,
                    clock: crate::supervisor::protocol::DeadlineClock::Boottime,
                    runner_id: cfg.runner_id.clone(),
                })
            });
            let runner = CliRunner::register(
                &self.store,
                &cfg.runner_id,
                max_concurrent,
                supervisors.clone(),
                cfg.exec.kill_grace,
            )?;
            if let Some(s) = supervisors {
                cfg.exec.launcher = crate::supervisor::Launcher::Supervised(s);
            }
            cfg.fence = Some(runner.fence.clone());
            Some(runner)
        } else {
            None
        };
        let engine = Engine::new(Arc::clone(&self.store), cfg, Arc::new(SystemClock))?;
        Ok((engine, runner))
    }

    /// One scheduling pass here (`loops tick`, e.g. from system cron): recovers the
    /// rows of runners that are gone, expires loops, claims every due slot — at most
    /// `max_concurrent` running at once, the rest as runs finish — and waits for every
    /// run it started, then for the notifications they queued (bounded by
    /// [`crate::notify::CLI_DELIVERY_BOUND`]; the daemon delivers what is left).
    pub async fn tick(&self, max_concurrent: NonZeroUsize) -> Result<TickSummary> {
        let (engine, _runner) = self.engine(max_concurrent)?;
        let _heartbeat = engine.spawn_lease_renewal();
        let mut summary = TickSummary::default();
        let mut claimed = Vec::new();
        loop {
            let report = engine.pass(true)?;
            claimed.extend(report.claimed);
            summary.skipped.extend(report.skipped);
            summary.recovered.extend(report.recovered);
            summary.expired.extend(report.expired);
            if !report.saturated {
                break;
            }
            // Every slot is busy: wait for one to free, then pick up the rest.
            engine.run_finished().await;
        }
        engine.drain().await;
        self.deliver_queued(&engine).await;
        summary.claimed = claimed
            .iter()
            .filter_map(|id| self.store.get_run(id).ok().flatten())
            .collect();
        Ok(summary)
    }

    /// Runs a loop now, here (`loops run-now`): its due slot (or pending retry slot)
    /// when one is due, advancing the loop; else a one-off slot at now that leaves the
    /// schedule alone. A loop with overlap `skip` and a run in flight is refused
    /// ([`crate::engine::EngineError::Busy`]) unless `allow_overlap`. Returns once the
    /// run ended and the notifications it queued were delivered (bounded by
    /// [`crate::notify::CLI_DELIVERY_BOUND`]); a daemon is poked to re-plan.
    pub async fn run_now(&self, key: &str, allow_overlap: bool) -> Result<RunNowOutcome> {
        self.start_run_now(key, allow_overlap)?.finish().await
    }

    /// Refuses daemon settings this store cannot honour (see
    /// [`crate::daemon::runner_budget`]: on a store shared by runners, a lease TTL the
    /// kill grace does not fit), before anything is started or taken.
    pub fn check_daemon_config(
        &self,
        cfg: &crate::daemon::DaemonConfig,
    ) -> std::result::Result<(), crate::daemon::DaemonError> {
        if self.store.supports_runners() {
            crate::daemon::runner_budget(cfg)
                .map_err(|e| crate::daemon::DaemonError::Config(e.to_string()))?;
        }
        Ok(())
    }

    /// Runs the daemon on this client's store until `shutdown` resolves (see
    /// [`crate::daemon::run`]).
    pub async fn run_daemon(
        &self,
        cfg: crate::daemon::DaemonConfig,
        shutdown: impl std::future::Future<Output = crate::daemon::Stop>,
    ) -> std::result::Result<(), crate::daemon::DaemonError> {
        let mut cfg = cfg;
        // Only a SQLite store is a file in the data dir the daemon must watch.
        cfg.watch_store_file &= matches!(self.backend, Backend::Sqlite { .. });
        let ran = crate::daemon::run(Arc::clone(&self.store), cfg, shutdown).await;
        if self.postgres.is_some() {
            // For the benchmarks (BENCHMARKS.md §15): round trips per run.
            tracing::info!(
                round_trips = loops_postgres::round_trips(),
                "PostgreSQL round trips of this daemon"
            );
        }
        ran
    }
}

/// The runner lease of a `tick` or `run-now` on a store with runners: renewed every
/// third of its TTL while it lives, released when dropped.
pub(super) struct CliRunner {
    store: Arc<dyn Store>,
    fence: loops_store::Fence,
    renewal: tokio::task::JoinHandle<()>,
}

impl CliRunner {
    /// Registers, and renews from a task of the current runtime; with `supervisors`,
    /// each renewal that succeeded extends their units' deadlines.
    fn register(
        store: &Arc<dyn Store>,
        runner_id: &str,
        capacity: NonZeroUsize,
        supervisors: Option<Arc<crate::supervisor::Supervisors>>,
        kill_grace: std::time::Duration,
    ) -> Result<Self> {
        let pid = std::process::id();
        let registration = loops_store::RunnerRegistration {
            runner_id: runner_id.to_owned(),
            host: crate::process::hostname(),
            pid,
            pid_start_time: crate::process::process_start_time(pid),
            labels: Vec::new(),
            capacity: capacity.get(),
        };
        let ttl = crate::daemon::DEFAULT_LEASE_TTL;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let began = supervisors.as_ref().map_or(0, |s| s.clock_now());
        let lease = store.register_runner(&registration, ttl_ms)?;
        if let Some(s) = &supervisors {
            let budget = crate::supervisor::deadline::runner_budget(ttl, kill_grace, ttl / 3)
                .map_err(|e| ClientError::Invalid(e.to_string()))?;
            s.set_runner_lease(budget, began);
        }
        let (renewing, fence) = (Arc::clone(store), lease.fence.clone());
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let began = supervisors.as_ref().map_or(0, |s| s.clock_now());
                match renewing.renew_runner(&fence, ttl_ms) {
                    Ok(Some(_)) => {
                        if let Some(s) = &supervisors {
                            s.runner_renewed(began);
                        }
                    }
                    Ok(None) => {
                        tracing::warn!(
                            "this process's runner lease expired; its writes are refused"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot renew this process's runner lease")
                    }
                }
            }
        });
        Ok(Self {
            store: Arc::clone(store),
            fence: lease.fence,
            renewal,
        })
    }
}

impl Drop for CliRunner {
    fn drop(&mut self) {
        self.renewal.abort();
        if let Err(e) = self.store.release_runner(&self.fence) {
            tracing::warn!(error = %e, "cannot release this process's runner lease");
        }
    }
}
