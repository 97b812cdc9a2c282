//! The long-running daemon: holds the store's fenced daemon lease (or a runner lease
//! on a store shared by runners), runs scheduler passes when work is due, sleeps
//! otherwise (no polling tick), applies retention, and stops cleanly: it stops
//! claiming and either leaves its runs to their supervisors ([`Stop::Detach`]: the next
//! daemon re-attaches) or gives them a grace period, terminates the rest and finalizes
//! every row ([`Stop::TerminateRuns`]), then releases its lease.
//!
//! Beside the loop: `lease` (the lease it holds, registering as a runner), `watchdog`
//! (terminates this runner's runs when its lease cannot be renewed in time),
//! `notifier` (delivers notifications off the scheduling path) and `retention` (prunes
//! on a thread and a store connection of its own).
//!
//! The entry point [`run`] takes its shutdown signal as a future so tests and
//! embedders can run a daemon in-process.

mod caps;
mod error;
mod files;
mod lease;
mod notifier;
mod retention;
mod watchdog;

use caps::*;
pub use error::DaemonError;
pub use files::read_pid_file;
use files::*;

use crate::backoff::Backoff;
use crate::clock::{Clock, SystemClock};
use crate::engine::{this_runner_id, Engine, EngineConfig, EngineError};
use crate::process::{hostname, is_same_process_alive, process_start_time};
use crate::supervisor::deadline;
use crate::supervisor::protocol::DeadlineClock;
use crate::supervisor::{Launcher, SupervisorSettings, Supervisors};
use crate::targets::ExecSettings;
use crate::wake;
use lease::{register, Held};
use loops_core::{format_instant, Instant};
use loops_store::{Fence, LeaseAcquire, LeaseHolder, PrunePolicy, Store, StoreError};
use notifier::start_notifier;
use retention::start_retention;
use std::future::Future;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use watchdog::Watchdog;

/// Pid file name inside the data dir.
pub const PID_FILE: &str = "daemon.pid";
/// Log file name inside the data dir (written by `daemon start`).
pub const LOG_FILE: &str = "daemon.log";

/// Retention defaults: keep at most this many finished runs per loop ...
pub const DEFAULT_KEEP_RUNS: usize = 1_000;
/// ... and nothing older than this.
pub const DEFAULT_KEEP_FOR: Duration = Duration::from_secs(30 * 86_400);
/// The event log keeps at most this many of its newest entries (≈ 0.5 KB each): at
/// 1,000 runs a second that is the last 50 s, at a run a minute several weeks; a live
/// client that was away longer resumes from the oldest kept.
pub const DEFAULT_KEEP_EVENTS: usize = 100_000;
/// How often the daemon prunes.
pub const DEFAULT_PRUNE_EVERY: Duration = Duration::from_secs(600);
/// Default daemon lease TTL (renewed every third of it; the run leases follow the
/// engine's run-lease renewal policy, [`crate::engine::lease_renewal`]).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// Minimum spacing of recovery scans in a busy daemon.
const RECOVER_EVERY: Duration = Duration::from_secs(1);
/// Default grace for running children at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// The longest an idle daemon sleeps between passes, whatever is due: wall-clock
/// jumps (suspend, NTP) are caught within this. `--interval-ms` can only shorten it.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub data_dir: PathBuf,
    pub lease_ttl: Duration,
    pub max_concurrent: NonZeroUsize,
    pub shutdown_grace: Duration,
    pub kill_grace: Duration,
    pub keep_runs: Option<usize>,
    pub keep_for: Option<Duration>,
    pub prune_every: Duration,
    /// Caps the sleep between scheduling passes below [`MAX_SLEEP`] (OpenLoops'
    /// `--interval-ms`). `None`: sleep until the next due slot, at most [`MAX_SLEEP`].
    pub max_sleep: Option<Duration>,
    /// Limit of one notification: a command hook's run, one HTTP try of a webhook.
    pub notify_timeout: Duration,
    /// Exit when the data dir's database file is removed or replaced (a SQLite store;
    /// off for a store elsewhere).
    pub watch_store_file: bool,
    /// Labels this daemon advertises as a runner (`--runner-label`; PostgreSQL).
    pub runner_labels: Vec<String>,
    /// Concurrency caps by provider, account and kind (`--max-concurrent-per`;
    /// `loops_core::caps`), counted in the store across runners.
    pub caps: loops_core::caps::Caps,
    /// The `loops` binary that runs supervisors (`loops supervise DIR`); `None` runs
    /// every process inside the daemon (in-process tests, embedders).
    pub supervisor_program: Option<PathBuf>,
}

impl DaemonConfig {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            lease_ttl: DEFAULT_LEASE_TTL,
            max_concurrent: crate::engine::DEFAULT_MAX_CONCURRENT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            kill_grace: crate::executor::DEFAULT_KILL_GRACE,
            keep_runs: Some(DEFAULT_KEEP_RUNS),
            keep_for: Some(DEFAULT_KEEP_FOR),
            prune_every: DEFAULT_PRUNE_EVERY,
            max_sleep: None,
            notify_timeout: crate::notify::DEFAULT_NOTIFY_TIMEOUT,
            watch_store_file: true,
            runner_labels: Vec::new(),
            caps: loops_core::caps::Caps::new(),
            supervisor_program: None,
        }
    }

    /// The retention policy as of `now`.
    pub fn prune_policy(&self, now: Instant) -> PrunePolicy {
        PrunePolicy {
            older_than: self
                .keep_for
                .and_then(|d| chrono::TimeDelta::from_std(d).ok())
                .map(|d| now - d),
            keep_per_loop: self.keep_runs,
            keep_events: Some(DEFAULT_KEEP_EVENTS),
        }
    }
}

/// The default retention policy (what `loops prune` without flags applies) as of
/// `now`: the newest [`DEFAULT_KEEP_RUNS`] finished runs per loop, none older than
/// [`DEFAULT_KEEP_FOR`].
pub fn default_prune_policy(now: Instant) -> PrunePolicy {
    DaemonConfig::new(Path::new("")).prune_policy(now)
}

/// How a daemon is asked to stop (what its shutdown future resolves to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Stop claiming and leave the runs in flight to their supervisors, under their
    /// deadlines: the next daemon on this host re-attaches to them (`daemon stop`,
    /// SIGTERM, `daemon restart`). Without supervisors, as [`Stop::TerminateRuns`].
    Detach,
    /// Stop claiming, give the runs in flight the shutdown grace, terminate the rest,
    /// finalize every row (`daemon stop --terminate-runs`).
    TerminateRuns,
}

/// Runs the daemon until `shutdown` resolves (clean exit) or the lease is lost.
pub async fn run(
    store: Arc<dyn Store>,
    cfg: DaemonConfig,
    shutdown: impl Future<Output = Stop>,
) -> Result<(), DaemonError> {
    run_with_clock(store, cfg, Arc::new(SystemClock), shutdown).await
}

/// Whether `cfg`'s lease TTL and kill grace can be honoured on a store with runners
/// (renewed every third of the TTL): the budget of a run after each renewal.
pub fn runner_budget(cfg: &DaemonConfig) -> Result<deadline::Budget, deadline::Unhonourable> {
    deadline::runner_budget(cfg.lease_ttl, cfg.kill_grace, runner_renewal(cfg.lease_ttl))
}

/// How often a runner lease of `ttl` is renewed.
fn runner_renewal(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(50))
}

/// [`run`] with the wall clock injected: in-process tests drive the daemon loop's
/// scheduling decisions with a [`crate::clock::ManualClock`].
///
/// On a store with runners ([`Store::supports_runners`], PostgreSQL) the daemon is one
/// runner among any number: it registers a runner lease instead of taking the one
/// daemon lease, and when that lease expires (it stalled, or the store could not be
/// reached for a lease TTL) it stops its runs — terminating them itself before the
/// lease can expire when renewals keep failing — writes nothing more under the old
/// epoch, and registers anew.
///
/// With [`DaemonConfig::supervisor_program`] every run's process is held by a
/// supervisor ([`crate::supervisor`]): started here, adopted from the supervisors an
/// earlier daemon on this host left, and re-attached before the first pass.
pub async fn run_with_clock(
    store: Arc<dyn Store>,
    cfg: DaemonConfig,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = Stop>,
) -> Result<(), DaemonError> {
    // The database file's identity as it is now, when the store was just opened: the
    // main loop's first check could come after a `rm loops.db` that the caller made
    // once it saw the lease taken, and a file recorded then would be the wrong one (or
    // none, and never checked).
    let store_file = if cfg.watch_store_file {
        StoreFile::record(&cfg.data_dir)
    } else {
        StoreFile::none()
    };
    let runner_id = this_runner_id();
    let pid = std::process::id();
    let host = hostname();
    let holder = LeaseHolder {
        runner_id: runner_id.clone(),
        pid,
        pid_start_time: process_start_time(pid),
        host: host.clone(),
    };
    let ttl_ms = u64::try_from(cfg.lease_ttl.as_millis()).unwrap_or(u64::MAX);
    let runner_mode = store.supports_runners();
    // Refused before anything is taken: a runner whose runs could outlive its lease
    // would let another runner start a second attempt while the first still runs.
    let budget = if runner_mode {
        Some(runner_budget(&cfg).map_err(|e| DaemonError::Config(e.to_string()))?)
    } else {
        None
    };
    let deadline_clock = if runner_mode {
        DeadlineClock::Boottime
    } else {
        DeadlineClock::Monotonic
    };
    let registered_at = (deadline_clock.now_ms(), std::time::Instant::now());
    let mut lease = if runner_mode {
        register(store.as_ref(), &holder, &cfg, ttl_ms)?
    } else {
        // A holder on this host whose process is gone (or a zombie) cannot renew: take
        // over now rather than waiting out the TTL. A live holder — even a stopped one
        // — keeps it.
        let takeover = |lease: &loops_store::DaemonLease| {
            lease.holder.host == host
                && !is_same_process_alive(lease.holder.pid, lease.holder.pid_start_time)
        };
        // Read first (a read needs no lock): a live holder stopped while it held the
        // write lock would otherwise make the write below time out on a locked
        // database instead of being named.
        if let Some(lease) = store.current_daemon_lease()? {
            if lease.expires_at > clock.now()
                && lease.holder.runner_id != holder.runner_id
                && !takeover(&lease)
            {
                return Err(DaemonError::AlreadyRunning {
                    pid: lease.holder.pid,
                    host: lease.holder.host,
                    since: format_instant(&lease.acquired_at),
                });
            }
        }
        match store.acquire_daemon_lease(&holder, ttl_ms, clock.now(), &takeover)? {
            LeaseAcquire::Acquired(lease) => Held::Daemon(Fence { token: lease.token }),
            LeaseAcquire::Held(lease) => {
                return Err(DaemonError::AlreadyRunning {
                    pid: lease.holder.pid,
                    host: lease.holder.host,
                    since: format_instant(&lease.acquired_at),
                })
            }
        }
    };
    tracing::info!(pid, token = lease.fence().token, runner = runner_mode, data_dir = %cfg.data_dir.display(), "daemon lease acquired");
    if let Err(e) = store.start_background_maintenance() {
        // Commits then checkpoint the WAL themselves: slower, still correct.
        tracing::warn!(error = %e, "cannot start background WAL checkpoints");
    }
    if let Err(e) = write_pid_file(&cfg.data_dir, pid) {
        lease.release(store.as_ref());
        return Err(e);
    }
    let wake = match wake::WakeListener::bind(&cfg.data_dir) {
        Ok(wake) => wake,
        Err(source) => {
            lease.release(store.as_ref());
            remove_pid_file(&cfg.data_dir, pid);
            return Err(DaemonError::Io {
                context: format!(
                    "cannot bind wake socket {}",
                    wake::socket_path(&cfg.data_dir).display()
                ),
                source,
            });
        }
    };
    // This daemon's supervisor, and the runs earlier daemons of this host left to theirs.
    let (launcher, mut adopted) = match &cfg.supervisor_program {
        Some(program) => {
            let settings = SupervisorSettings {
                program: program.clone(),
                dir: crate::supervisor::dir_in(&cfg.data_dir),
                kill_grace: cfg.kill_grace,
                clock: deadline_clock,
                runner_id: runner_id.clone(),
            };
            match Supervisors::start(settings).await {
                Ok((sups, units)) => {
                    if let Some(budget) = budget {
                        sups.set_runner_lease(budget, registered_at.0);
                    }
                    (Launcher::Supervised(sups), units)
                }
                Err(source) => {
                    lease.release(store.as_ref());
                    remove_pid_file(&cfg.data_dir, pid);
                    return Err(DaemonError::Io {
                        context: "cannot start the run supervisor".to_owned(),
                        source,
                    });
                }
            }
        }
        None => (Launcher::InProcess, Vec::new()),
    };
    // Wake-ups from other hosts (PostgreSQL LISTEN/NOTIFY), next to the local socket.
    let remote_wake = Arc::new(tokio::sync::Notify::new());
    let _remote_guard = {
        let notify = Arc::clone(&remote_wake);
        match store.watch_wakeups(Arc::new(move || notify.notify_one())) {
            Ok(guard) => guard,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch for wake-ups from other runners; relying on deadlines");
                None
            }
        }
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut renewed_at = registered_at.1;
    // For `show`, `health` and `daemon status`; only the claims themselves enforce them.
    record_caps(store.as_ref(), &runner_id, &cfg.caps, clock.now());
    // Pruning on its own thread and connection until this function returns.
    let _retention = start_retention(&store, &cfg, &clock);
    loop {
        let fence = lease.fence().clone();
        let engine = match Engine::new(
            Arc::clone(&store),
            EngineConfig {
                runner_id: runner_id.clone(),
                max_concurrent: cfg.max_concurrent,
                caps: cfg.caps.clone(),
                exec: ExecSettings {
                    kill_grace: cfg.kill_grace,
                    launcher: launcher.clone(),
                    ..ExecSettings::for_data_dir(&cfg.data_dir)
                },
                fence: Some(fence.clone()),
                adopt_orphans: true,
                runner_labels: {
                    let mut labels = cfg.runner_labels.clone();
                    labels.sort();
                    labels.dedup();
                    labels
                },
            },
            Arc::clone(&clock),
        ) {
            Ok(engine) => engine,
            Err(e) => {
                lease.release(store.as_ref());
                remove_pid_file(&cfg.data_dir, pid);
                return Err(e.into());
            }
        };
        // Before the first pass, so recovery does not take them for abandoned.
        let reattached = engine.reattach(std::mem::take(&mut adopted));
        if reattached > 0 {
            tracing::info!(
                runs = reattached,
                "re-attached to runs an earlier daemon left to their supervisors"
            );
        }
        // Run leases are renewed on the engine's policy until the engine is dropped, so
        // through the shutdown grace period too.
        let _run_heartbeat = engine.spawn_lease_renewal();
        let watchdog = budget.map(|b| Watchdog::for_engine(&engine, b.run_for, renewed_at));
        let notifier = start_notifier(&engine, &store, &cfg, runner_id.clone());
        let outcome = main_loop(
            &engine,
            &store,
            &cfg,
            &lease,
            watchdog.as_ref(),
            wake.socket(),
            &remote_wake,
            clock.as_ref(),
            &store_file,
            &mut shutdown,
        )
        .await;
        let lost = matches!(outcome, Err(DaemonError::LeaseLost(_)));
        if lost {
            // Nothing of ours may run on under a lease that is gone.
            engine.cancel_all("runner lease lost");
        }
        let detach = matches!(outcome, Ok(Stop::Detach)) && launcher.supervisors().is_some();
        if detach {
            tracing::info!(
                running = engine.running_count(),
                "leaving the runs in flight to their supervisors"
            );
        } else {
            // Let runs finish within the grace period, then stop them.
            let grace = if lost {
                Duration::ZERO
            } else {
                cfg.shutdown_grace
            };
            if tokio::time::timeout(grace, engine.drain()).await.is_err() {
                tracing::info!(
                    running = engine.running_count(),
                    "grace period over; terminating runs"
                );
                engine.cancel_all("daemon stopped");
                let bound = cfg.kill_grace + Duration::from_secs(5);
                if tokio::time::timeout(bound, engine.drain()).await.is_err() {
                    tracing::warn!("some runs did not finish after termination");
                }
            }
        }
        notifier.stop().await;
        drop(watchdog);
        match outcome {
            Err(DaemonError::LeaseLost(why)) if runner_mode => {
                tracing::warn!(reason = %why, "runner lease lost: runs stopped; registering as a new runner");
                lease = loop {
                    let began = (deadline_clock.now_ms(), std::time::Instant::now());
                    match register(store.as_ref(), &holder, &cfg, ttl_ms) {
                        Ok(lease) => {
                            if let (Some(sups), Some(budget)) = (launcher.supervisors(), budget) {
                                sups.set_runner_lease(budget, began.0);
                            }
                            renewed_at = began.1;
                            break lease;
                        }
                        Err(e) if e.is_transient() => {
                            tracing::warn!(error = %e, "cannot register as a runner yet; retrying");
                            tokio::select! {
                                _ = tokio::time::sleep(PASS_RETRY_FIRST * 10) => {}
                                _ = &mut shutdown => {
                                    drop(wake);
                                    remove_pid_file(&cfg.data_dir, pid);
                                    return Ok(());
                                }
                            }
                        }
                        Err(e) => {
                            drop(wake);
                            remove_pid_file(&cfg.data_dir, pid);
                            return Err(e.into());
                        }
                    }
                };
                tracing::info!(token = lease.fence().token, "registered as a new runner");
                continue;
            }
            Ok(_) => {
                drop(wake);
                remove_pid_file(&cfg.data_dir, pid);
                if detach && runner_mode && engine.running_count() > 0 {
                    // Left to expire, not released: the runs' rows stay this runner's
                    // until their supervisors have ended them or a daemon of this host
                    // took them back, so no other runner retries them meanwhile.
                    tracing::info!("daemon stopped; its runner lease is left to expire");
                } else {
                    if !cfg.caps.is_empty() {
                        forget_caps(store.as_ref(), &runner_id, clock.now());
                    }
                    lease.release_checked(store.as_ref())?;
                    tracing::info!("daemon stopped");
                }
                return Ok(());
            }
            Err(e) => {
                drop(wake);
                remove_pid_file(&cfg.data_dir, pid);
                return Err(e);
            }
        }
    }
}

/// Back-off of failing scheduler passes (a full disk, a locked or read-only store).
const PASS_RETRY_FIRST: Duration = Duration::from_millis(100);
const PASS_RETRY_CAP: Duration = Duration::from_secs(30);
/// A wall clock that moved back by more than this (against the monotonic clock)
/// between two passes triggers a re-plan of loops advanced under the old time.
const CLOCK_JUMP: Duration = Duration::from_secs(2);

/// What the lease loss means, for the exit message: who holds the lease now.
fn lease_loss(store: &dyn Store) -> DaemonError {
    let detail = match store.current_daemon_lease() {
        Ok(Some(lease)) => format!(
            "taken over by pid {} on host {} at {}",
            lease.holder.pid,
            lease.holder.host,
            format_instant(&lease.acquired_at)
        ),
        Ok(None) => "the lease row was removed".to_owned(),
        Err(e) => format!("another daemon holds it (cannot read it: {e})"),
    };
    DaemonError::LeaseLost(detail)
}

/// Logs the first failure of a streak loudly and the rest quietly, so a persistent
/// fault is said once rather than many times a second.
fn note_failure(backoff: &Backoff, what: &str, error: &dyn std::fmt::Display) {
    if backoff.failures() == 1 {
        tracing::error!(error = %error, retry_in_ms = backoff.delay().as_millis() as u64, "{what} failed; retrying with back-off");
    } else {
        tracing::debug!(error = %error, failures = backoff.failures(), retry_in_ms = backoff.delay().as_millis() as u64, "{what} failed again");
    }
}

fn note_recovery(failures: u32, what: &str) {
    if failures > 0 {
        tracing::info!(failures, "{what} works again");
    }
}

#[allow(clippy::too_many_arguments)]
async fn main_loop<S: Future<Output = Stop>>(
    engine: &Arc<Engine>,
    store: &Arc<dyn Store>,
    cfg: &DaemonConfig,
    lease: &Held,
    watchdog: Option<&Watchdog>,
    socket: &tokio::net::UnixDatagram,
    remote_wake: &tokio::sync::Notify,
    clock: &dyn Clock,
    store_file: &StoreFile,
    shutdown: &mut std::pin::Pin<&mut S>,
) -> Result<Stop, DaemonError> {
    let ttl_ms = u64::try_from(cfg.lease_ttl.as_millis()).unwrap_or(u64::MAX);
    let lost = || match lease {
        Held::Runner(_) => DaemonError::LeaseLost(
            "its runner lease expired (the daemon stalled, or the store could not be reached)"
                .to_owned(),
        ),
        Held::Daemon(_) => lease_loss(store.as_ref()),
    };
    // The daemon lease's own renewal (the run leases are the engine's heartbeat's).
    let mut lease_beat = tokio::time::interval(runner_renewal(cfg.lease_ttl));
    lease_beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    lease_beat.tick().await;
    let mut buf = [0u8; 64];
    let mut last_recover = None;
    let mut foreign_running = false;
    let mut pass_backoff = Backoff::new(PASS_RETRY_FIRST, PASS_RETRY_CAP);
    let mut lease_backoff = Backoff::new(PASS_RETRY_FIRST, PASS_RETRY_CAP);
    let mut wake_socket_ok = true;
    // The clock may have been set back while no daemon ran.
    let mut replan_clock = true;
    let mut last_clock = (clock.now(), tokio::time::Instant::now());
    // Run requests (`run-now --on-runner`) are looked for when a wake-up came from
    // another host, on every recovering pass (in case a wake-up was lost), and while
    // some are left for want of a free slot.
    let runner_mode = matches!(lease, Held::Runner(_));
    let mut serve_requests = runner_mode;
    loop {
        store_file.check()?;
        let (wall, mono) = (clock.now(), tokio::time::Instant::now());
        let wall_ms = (wall - last_clock.0).num_milliseconds();
        let mono_ms =
            i64::try_from(mono.duration_since(last_clock.1).as_millis()).unwrap_or(i64::MAX);
        let went_back = wall_ms.saturating_add(CLOCK_JUMP.as_millis() as i64) < mono_ms;
        if went_back {
            tracing::warn!(
                was = %format_instant(&last_clock.0),
                now = %format_instant(&wall),
                "the wall clock went back; re-planning loops"
            );
            replan_clock = true;
        }
        last_clock = (wall, mono);
        if std::mem::take(&mut replan_clock) {
            match engine.replan_after_clock_jump() {
                Ok(_) => {}
                Err(EngineError::LeaseLost) => return Err(lost()),
                // Said once; loops left far ahead are moved at the next jump or start.
                Err(e) => tracing::warn!(error = %e, "cannot re-plan loops after a clock change"),
            }
        }
        // Reconciling other runners' rows scans every running row: at most once a
        // second, not on every wake-up of a busy daemon.
        let recover =
            last_recover.is_none_or(|t: tokio::time::Instant| t.elapsed() >= RECOVER_EVERY);
        if recover {
            last_recover = Some(tokio::time::Instant::now());
        }
        // Before the pass: a request is someone waiting, a due slot of the pass is not
        // later for it.
        if runner_mode && (serve_requests || recover) && pass_backoff.failures() == 0 {
            match engine.serve_run_requests() {
                Ok(served) => {
                    serve_requests = served.more;
                    if !served.started.is_empty() || served.refused > 0 {
                        tracing::debug!(
                            started = served.started.len(),
                            refused = served.refused,
                            "run requests"
                        );
                    }
                }
                Err(EngineError::LeaseLost) => return Err(lost()),
                Err(e) => {
                    // Looked for again with the next recovering pass.
                    tracing::warn!(error = %e, "cannot answer run requests");
                }
            }
        }
        let report = match engine.pass(recover) {
            Ok(r) => {
                note_recovery(pass_backoff.succeed(), "scheduler pass");
                r
            }
            Err(EngineError::LeaseLost) => return Err(lost()),
            // A damaged database is never retried (issue #9, item 12).
            Err(EngineError::Store(e)) if e.is_corrupt() => return Err(DaemonError::Store(e)),
            Err(e) => {
                pass_backoff.fail();
                note_failure(&pass_backoff, "scheduler pass", &e);
                // Recovery is retried with the next pass that works.
                last_recover = None;
                Default::default()
            }
        };
        if engine.lease_lost() {
            return Err(lost());
        }
        if serve_requests {
            // Requests wait for a free slot.
            engine.wake_when_a_slot_frees();
        }
        if recover {
            foreign_running = report.foreign_running;
        }
        if !report.claimed.is_empty() || !report.recovered.is_empty() || !report.skipped.is_empty()
        {
            tracing::debug!(
                claimed = report.claimed.len(),
                skipped = report.skipped.len(),
                recovered = report.recovered.len(),
                "pass"
            );
        }
        let failing = pass_backoff.failures() > 0;
        // A failing pass is retried after its back-off, whatever is due meanwhile: due
        // work would otherwise make the deadline "now" and spin.
        let deadline = if failing {
            tokio::time::Instant::now() + pass_backoff.delay()
        } else {
            let deadline = next_deadline(
                store.as_ref(),
                &cfg.runner_labels,
                &report,
                clock.now(),
                foreign_running,
                cfg.max_sleep,
            );
            if runner_mode {
                deadline + share_offset()
            } else {
                deadline
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            received = socket.recv(&mut buf), if wake_socket_ok && !failing => {
                // Any datagram is only a wake-up; its bytes are never interpreted.
                if let Err(e) = received {
                    // Should not happen on a bound datagram socket; never spin on it.
                    tracing::warn!(error = %e, "wake socket failed; relying on deadlines from now on");
                    wake_socket_ok = false;
                }
            }
            // A finished run moved its loop, or the engine noticed the lease was lost.
            _ = engine.replan_needed(), if !failing => {}
            // Another host changed what is due (PostgreSQL NOTIFY).
            _ = remote_wake.notified(), if !failing => serve_requests = runner_mode,
            _ = lease_beat.tick() => {
                let began = std::time::Instant::now();
                let began_deadline = engine.config().exec.launcher.clock_now();
                match lease.renew(store.as_ref(), ttl_ms, clock.now()) {
                    Ok(true) => {
                        if let Some(w) = watchdog {
                            w.renewed(began);
                        }
                        if matches!(lease, Held::Runner(_)) {
                            engine.config().exec.launcher.runner_renewed(began_deadline);
                        }
                        note_recovery(lease_backoff.succeed(), "daemon lease heartbeat")
                    }
                    Ok(false) => {
                        engine.cancel_all("daemon lease lost");
                        return Err(lost());
                    }
                    Err(e) => {
                        // The lease stays ours until another daemon takes it; the next
                        // heartbeat that works renews it.
                        lease_backoff.fail();
                        note_failure(&lease_backoff, "daemon lease heartbeat", &e);
                    }
                }
            }
            stop = shutdown.as_mut() => {
                tracing::info!(running = engine.running_count(), ?stop, "shutdown requested: no new claims");
                return Ok(stop);
            }
        }
    }
}

/// Up to [`SHARE_OFFSET_MAX`], drawn afresh for each sleep: runners sharing a store
/// all wake for the same due slot, and the first to ask claims it; without this the
/// one the operating system happens to wake first would take nearly every slot (runs
/// are shared by chance, not by who is scheduled first).
fn share_offset() -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let max = u64::try_from(SHARE_OFFSET_MAX.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(h.finish() % max.max(1))
}

/// The longest a runner on a shared store waits past a due slot (see [`share_offset`]).
const SHARE_OFFSET_MAX: Duration = Duration::from_millis(2);

/// When the next pass is needed: the earliest due slot, or a recovery
/// check while other runners' rows are running. Saturated passes wait for a run to end.
/// Never later than `max_sleep` (capped at [`MAX_SLEEP`]) from now.
fn next_deadline(
    store: &dyn Store,
    runner_labels: &[String],
    report: &crate::engine::PassReport,
    now: Instant,
    foreign_running: bool,
    max_sleep: Option<Duration>,
) -> tokio::time::Instant {
    let base = tokio::time::Instant::now();
    let cap = max_sleep.map_or(MAX_SLEEP, |m| m.min(MAX_SLEEP));
    let mut deadline = base + cap;
    if !report.saturated {
        // Only loops this runner may take: one it may not would be due "now" for ever.
        if let Ok(Some(due)) = store.next_due_at_on(runner_labels) {
            let mut wait = (due - now).to_std().unwrap_or(Duration::ZERO);
            // Loops waiting for a cap stay due "now"; a run that ends wakes the daemon
            // for them, so the earliest due slot is looked at only every so often.
            if !report.waiting.is_empty() {
                wait = wait.max(CAP_RECHECK);
            }
            deadline = deadline.min(base + wait);
        }
    }
    if foreign_running {
        deadline = deadline.min(base + Duration::from_secs(2));
    }
    deadline
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use loops_sqlite::SqliteStore;

    /// Runners sharing a store wait a different offset past each due slot, so which of
    /// them claims it is chance.
    #[test]
    fn share_offsets_are_drawn_afresh_and_bounded() {
        let drawn: std::collections::HashSet<Duration> = (0..64).map(|_| share_offset()).collect();
        assert!(drawn.len() > 8, "offsets repeat: {drawn:?}");
        assert!(drawn.iter().all(|d| *d < SHARE_OFFSET_MAX), "{drawn:?}");
    }

    fn deadline_in(max_sleep: Option<Duration>) -> Duration {
        let store = SqliteStore::open_in_memory().unwrap();
        let deadline = next_deadline(
            &store,
            &[],
            &Default::default(),
            chrono::Utc::now(),
            false,
            max_sleep,
        );
        deadline.saturating_duration_since(tokio::time::Instant::now())
    }

    #[test]
    fn idle_sleep_is_capped_at_a_minute() {
        let wait = deadline_in(None);
        assert!(
            wait <= MAX_SLEEP && wait > MAX_SLEEP - Duration::from_secs(1),
            "{wait:?}"
        );
    }

    #[test]
    fn interval_ms_caps_the_sleep() {
        let wait = deadline_in(Some(Duration::from_millis(200)));
        assert!(wait <= Duration::from_millis(200), "{wait:?}");
        assert!(wait > Duration::from_millis(100), "{wait:?}");
        // It can only shorten the sleep, never stretch it past the wall-clock bound.
        assert!(deadline_in(Some(Duration::from_secs(3600))) <= MAX_SLEEP);
    }

    #[test]
    fn store_file_notices_removal_and_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(loops_store::DB_FILE);
        std::fs::write(&db, b"one").unwrap();
        let watch = StoreFile::record(dir.path());
        watch.check().unwrap();
        std::fs::write(&db, b"rewritten in place").unwrap();
        watch.check().unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, b"two").unwrap();
        std::fs::rename(&other, &db).unwrap();
        let err = watch.check().unwrap_err().to_string();
        assert!(err.contains("was removed or replaced; exiting"), "{err}");
        assert!(err.contains("another file"), "{err}");
        std::fs::remove_file(&db).unwrap();
        let err = watch.check().unwrap_err().to_string();
        assert!(err.contains("no longer exists"), "{err}");
        // No database file at the start: nothing to watch.
        StoreFile::record(&dir.path().join("none")).check().unwrap();
    }
}
