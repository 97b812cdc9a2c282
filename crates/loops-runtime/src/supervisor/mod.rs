//! Supervised runs: every process a daemon starts — a loop run's, a workflow step's —
//! is held by a supervisor process that is not the daemon (DESIGN.md §8,
//! `shared/design/supervisor.md`). The supervisor owns the process group's pipes,
//! output spool and exit status, and terminates the group on its own deadline unless
//! the runner extends it after each lease renewal that succeeded. So a runner that is
//! stopped, cut off from the store or killed cannot leave its attempt running when
//! another runner may take the slot over, and a daemon that crashes, stops or is
//! replaced re-attaches to its runs and records them with their real outcome.
//!
//! - [`protocol`]: frames between a daemon and a supervisor, deadlines and clocks;
//! - `serve`: the supervisor process (`loops supervise DIR`, started by the daemon);
//! - `link`: the daemon's connections to supervisors;
//! - [`deadline`]: how long a process may run after a renewal;
//! - [`status`]: the status files a supervisor leaves when no daemon takes its news.
//!
//! [`Launcher`] is how an engine starts processes: in its own process (`loops tick`,
//! `run-now`, tests, a library embedding the engine) or through [`Supervisors`] (the
//! daemon). One supervisor serves one daemon incarnation; a new daemon starts its
//! own and adopts the units of earlier ones, which then retire.

pub mod deadline;
mod link;
pub mod protocol;
mod serve;
pub mod status;

pub use serve::serve;

use crate::executor::{execute, is_ready, ExecResult, ExecStatus, Invocation};
use link::Link;
use loops_core::RunId;
use protocol::{Deadline, DeadlineClock, ExitReport, Request, UnitReport};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The supervise dir's name inside the data dir.
pub const SUPERVISE_DIR: &str = "supervise";
/// The hidden `loops` subcommand that runs a supervisor (`loops supervise DIR`).
pub const SUBCOMMAND: &str = "supervise";
/// The supervisors' log file in the supervise dir.
pub const LOG_FILE: &str = "supervisor.log";
/// A supervisor log longer than this is rotated (one old file kept) when a new
/// supervisor starts.
const LOG_MAX_BYTES: u64 = 1024 * 1024;
/// Settings of ours that must not reach a supervisor (nor, through it, a run).
pub const SCRUBBED_ENV: &[&str] = &["LOOPS_STORE"];

/// The program that runs supervisors for this process (`loops supervise`), when it
/// has one: the `loops` binary sets itself at start ([`set_program`]); a library
/// embedding the engine has none, and runs its processes in process.
static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Sets the program that runs this process's supervisors (once; later calls are
/// ignored).
pub fn set_program(path: PathBuf) {
    let _ = PROGRAM.set(path);
}

/// This process's executable, to run as its supervisors' program. After an upgrade
/// that replaced the file, Linux names the running one `… (deleted)`: the file now at
/// that path is the new binary, which speaks the same protocol.
pub fn this_executable() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let text = exe.to_string_lossy();
    Some(match text.strip_suffix(" (deleted)") {
        Some(path) => PathBuf::from(path),
        None => exe,
    })
}

/// The program set by [`set_program`].
pub fn program() -> Option<&'static Path> {
    PROGRAM.get().map(PathBuf::as_path)
}

/// The supervise dir of a data dir.
pub fn dir_in(data_dir: &Path) -> PathBuf {
    data_dir.join(SUPERVISE_DIR)
}

/// The pids of the supervisors in the supervise dir `dir` that are alive: each holds
/// runs still in flight or ended and not yet recorded (one with nothing left exits).
/// A socket whose process is gone (a killed supervisor) is not counted.
pub fn live_pids(dir: &Path) -> Vec<u32> {
    link::sockets(dir, None)
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| crate::process::process_state(*pid) == crate::process::ProcessState::Alive)
        .collect()
}

/// The unit name of a loop run.
pub fn run_unit(run: &RunId) -> String {
    format!("run-{}", file_safe(run.as_str()))
}

/// The unit name of a workflow step run.
pub fn step_unit(step_run_id: &str) -> String {
    format!("step-{}", file_safe(step_run_id))
}

/// An id as it is when it is lowercase alphanumeric (every id we generate), else its
/// bytes in hex (ids imported from elsewhere), so a unit name is always a file name.
fn file_safe(id: &str) -> String {
    if !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return id.to_owned();
    }
    let mut hex = String::from("_");
    for b in id.bytes().take(31) {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// Which unit a process is, and the loop run whose lease bounds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitKey {
    pub unit: String,
    pub group: String,
}

impl UnitKey {
    /// A loop run's own process.
    pub fn run(run: &RunId) -> Self {
        Self {
            unit: run_unit(run),
            group: run.to_string(),
        }
    }

    /// A step of the workflow run of loop run `group` (or of no loop run).
    pub fn step(step_run_id: &str, group: Option<&RunId>) -> Self {
        let unit = step_unit(step_run_id);
        Self {
            group: group.map_or_else(|| unit.clone(), ToString::to_string),
            unit,
        }
    }
}

/// A process's end as its launcher reports it.
#[derive(Debug, Clone)]
pub struct Executed {
    pub result: ExecResult,
    /// Why the supervisor terminated it on its own (deadline passed, supervisor
    /// stopped or killed), when it did.
    pub terminated_by: Option<String>,
}

/// How an engine starts processes.
#[derive(Clone, Default)]
pub enum Launcher {
    /// In this process, as children of this process ([`execute`]).
    #[default]
    InProcess,
    /// Through this host's supervisors.
    Supervised(Arc<Supervisors>),
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Launcher::InProcess => f.write_str("InProcess"),
            Launcher::Supervised(s) => write!(f, "Supervised({})", s.dir.display()),
        }
    }
}

impl Launcher {
    /// The supervisors, when processes go through them.
    pub fn supervisors(&self) -> Option<&Arc<Supervisors>> {
        match self {
            Launcher::Supervised(s) => Some(s),
            Launcher::InProcess => None,
        }
    }

    /// Runs `invocation` to its end, as [`execute`] does (same `on_spawn` and `cancel`
    /// contract), in this process or under a supervisor. The caller records the end,
    /// then calls [`Launcher::ack`] with the unit: a daemon that dies in between finds
    /// it again with its supervisor, never loses it.
    pub async fn execute(
        &self,
        key: UnitKey,
        invocation: Invocation,
        on_spawn: impl FnOnce(u32, Option<u64>) + Send,
        cancel: impl Future<Output = ()> + Send,
    ) -> Executed {
        match self {
            Launcher::InProcess => Executed {
                result: execute(invocation, on_spawn, cancel).await,
                terminated_by: None,
            },
            Launcher::Supervised(s) => s.execute(key, invocation, on_spawn, cancel).await,
        }
    }

    /// A run of group `group` with a lease of `lease` is held from now on; its lease
    /// (as the store judges it) ends `remaining` from now.
    pub fn hold(&self, group: &RunId, lease: Duration, remaining: Duration) {
        if let Some(s) = self.supervisors() {
            s.hold(group, lease, remaining);
        }
    }

    /// The leases of `groups` were renewed by a write that began at `began` (a reading
    /// of [`Launcher::clock_now`]): their units' deadlines move.
    pub fn renewed(&self, groups: &[RunId], began: u64) {
        if let Some(s) = self.supervisors() {
            s.renewed(groups, began);
        }
    }

    /// The runner lease was renewed by a write that began at `began`.
    pub fn runner_renewed(&self, began: u64) {
        if let Some(s) = self.supervisors() {
            s.runner_renewed(began);
        }
    }

    /// The run of `group` is no longer held.
    pub fn release(&self, group: &RunId) {
        if let Some(s) = self.supervisors() {
            s.release(group);
        }
    }

    /// A reading of the deadline clock (0 in process, where there are no deadlines).
    pub fn clock_now(&self) -> u64 {
        self.supervisors().map_or(0, |s| s.clock.now_ms())
    }

    /// A unit an earlier daemon started, still held by a supervisor: its process (if
    /// it started) and a future of its end. Taken once.
    pub fn reclaim(&self, unit: &str) -> Option<Reclaimed> {
        self.supervisors()?.reclaim(unit)
    }

    /// Tells the supervisor that a unit's end is recorded.
    pub fn ack(&self, unit: &str) {
        if let Some(s) = self.supervisors() {
            s.ack(unit);
        }
    }
}

/// A re-attached unit.
pub struct Reclaimed {
    pub pid: Option<link::Process>,
    exited: tokio::sync::oneshot::Receiver<ExitReport>,
}

impl Reclaimed {
    /// Waits for the unit's end (at once when it already ended). A supervisor that
    /// dies meanwhile ends it with that reason.
    pub async fn exited(self) -> Executed {
        match self.exited.await {
            Ok(report) => Executed {
                result: report.result,
                terminated_by: report.terminated_by,
            },
            Err(_) => lost_unit(),
        }
    }
}

/// Settings of a host's supervisors.
#[derive(Debug, Clone)]
pub struct SupervisorSettings {
    /// The `loops` binary, run as `loops supervise DIR`.
    pub program: PathBuf,
    /// The supervise dir (`<data dir>/supervise`).
    pub dir: PathBuf,
    /// The daemon's kill grace.
    pub kill_grace: Duration,
    /// Which clock deadlines are on (see [`DeadlineClock`]).
    pub clock: DeadlineClock,
    /// The runner id the daemon claims under (said in `Hello`).
    pub runner_id: String,
}

#[derive(Debug, Clone, Copy)]
struct LeaseState {
    budget: deadline::Budget,
    renewed_at: u64,
}

impl LeaseState {
    fn ends_at(self) -> u64 {
        self.renewed_at
            .saturating_add(u64::try_from(self.budget.run_for.as_millis()).unwrap_or(u64::MAX))
    }
}

struct UnitEntry {
    group: String,
    link: Arc<Link>,
}

#[derive(Default)]
struct Inner {
    /// Where new units start; replaced when its supervisor dies.
    current: Option<Arc<Link>>,
    units: HashMap<String, UnitEntry>,
    groups: HashMap<String, LeaseState>,
    runner: Option<(deadline::Budget, u64)>,
    /// Links of earlier supervisors, kept while they hold units.
    adopted: Vec<Arc<Link>>,
}

/// A host's supervisors, as one daemon sees them: its own (where new units start) and
/// those of earlier daemons whose units it adopted. Also keeps the leases that bound
/// the units, and sends every unit its deadline.
pub struct Supervisors {
    settings: SupervisorSettings,
    dir: PathBuf,
    clock: DeadlineClock,
    inner: Mutex<Inner>,
    /// Serializes starting a supervisor.
    starting: tokio::sync::Mutex<()>,
}

impl Supervisors {
    /// Supervisors whose own supervisor starts with the first unit (a `tick` or
    /// `run-now` that may start none); adopts nothing.
    pub fn lazy(settings: SupervisorSettings) -> Arc<Self> {
        Arc::new(Self {
            dir: settings.dir.clone(),
            clock: settings.clock,
            settings,
            inner: Mutex::new(Inner::default()),
            starting: tokio::sync::Mutex::new(()),
        })
    }

    /// Starts this daemon's supervisor and adopts the units of the supervisors already
    /// in the supervise dir. Returns them with every unit those hold.
    pub async fn start(
        settings: SupervisorSettings,
    ) -> std::io::Result<(Arc<Self>, Vec<UnitReport>)> {
        let sups = Self::lazy(settings);
        let own = sups.current_link().await?;
        let mut adopted = Vec::new();
        for (pid, path) in link::sockets(&sups.dir, Some(own.pid)) {
            match tokio::time::timeout(
                Duration::from_secs(5),
                tokio::net::UnixStream::connect(&path),
            )
            .await
            {
                Ok(Ok(stream)) => {
                    match link::connect(stream, &sups.settings.runner_id, sups.settings.kill_grace)
                        .await
                    {
                        Ok((link, _, units)) => {
                            link.send(Request::Retire);
                            tracing::info!(
                                supervisor = pid,
                                units = units.len(),
                                "adopted an earlier supervisor's runs"
                            );
                            sups.adopt_link(&link);
                            adopted.extend(units);
                        }
                        Err(e) => {
                            tracing::error!(supervisor = pid, error = %e, "cannot adopt an earlier supervisor's runs")
                        }
                    }
                }
                // Nobody listens: a supervisor that was killed left its socket.
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    let _ = std::fs::remove_file(&path);
                }
                Ok(Err(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot reach a supervisor")
                }
                Err(_) => {
                    tracing::warn!(path = %path.display(), "a supervisor did not accept a connection in time")
                }
            }
        }
        Ok((sups, adopted))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn adopt_link(&self, link: &Arc<Link>) {
        let mut inner = self.lock();
        for (unit, group) in link.units() {
            inner.units.insert(
                unit,
                UnitEntry {
                    group,
                    link: Arc::clone(link),
                },
            );
        }
        inner.adopted.push(Arc::clone(link));
    }

    /// This daemon's own supervisor, started anew when the last one died.
    async fn current_link(&self) -> std::io::Result<Arc<Link>> {
        if let Some(link) = self.lock().current.clone().filter(|l| !l.is_closed()) {
            return Ok(link);
        }
        let _starting = self.starting.lock().await;
        if let Some(link) = self.lock().current.clone().filter(|l| !l.is_closed()) {
            return Ok(link);
        }
        ensure_private_dir(&self.dir)?;
        let (link, pid, units) = link::spawn(
            &self.settings.program,
            &self.dir,
            &self.settings.runner_id,
            self.settings.kill_grace,
        )
        .await?;
        if !units.is_empty() {
            tracing::warn!(supervisor = pid, "a new supervisor reported units");
        }
        tracing::info!(supervisor = pid, "supervisor started");
        self.lock().current = Some(Arc::clone(&link));
        Ok(link)
    }

    /// The supervisor pids this daemon talks to (its own first).
    pub fn pids(&self) -> Vec<u32> {
        let inner = self.lock();
        inner
            .current
            .iter()
            .chain(inner.adopted.iter())
            .filter(|l| !l.is_closed())
            .map(|l| l.pid)
            .collect()
    }

    /// The runner lease bounds every unit from now on: `ttl` renewed every `renewal`,
    /// last renewed by a write that began at `began`.
    pub fn set_runner_lease(&self, budget: deadline::Budget, began: u64) {
        self.lock().runner = Some((budget, began));
        self.extend_all();
    }

    fn deadline_of(inner: &Inner, group: &str, clock: DeadlineClock) -> Option<Deadline> {
        let run = inner.groups.get(group).map(|l| l.ends_at());
        let runner = inner.runner.map(|(budget, began)| {
            began.saturating_add(u64::try_from(budget.run_for.as_millis()).unwrap_or(u64::MAX))
        });
        let at_ms = match (run, runner) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(Deadline { clock, at_ms })
    }

    fn kill_grace_of(&self, inner: &Inner, group: &str) -> Duration {
        let mut grace = self.settings.kill_grace;
        if let Some(l) = inner.groups.get(group) {
            grace = grace.min(l.budget.kill_grace);
        }
        grace
    }

    fn hold(&self, group: &RunId, lease: Duration, remaining: Duration) {
        let renewal = crate::engine::lease_renewal::renewal_period(lease);
        let budget = deadline::run_budget(lease, self.settings.kill_grace, renewal);
        let now = self.clock.now_ms();
        // As if renewed `lease - remaining` ago: the lease ends `remaining` from now.
        let renewed_at = now.saturating_sub(
            u64::try_from(lease.saturating_sub(remaining).as_millis()).unwrap_or(u64::MAX),
        );
        self.lock()
            .groups
            .insert(group.to_string(), LeaseState { budget, renewed_at });
        self.extend_groups(&[group.to_string()]);
    }

    fn renewed(&self, groups: &[RunId], began: u64) {
        let names: Vec<String> = {
            let mut inner = self.lock();
            groups
                .iter()
                .filter_map(|g| {
                    let state = inner.groups.get_mut(g.as_str())?;
                    state.renewed_at = state.renewed_at.max(began);
                    Some(g.to_string())
                })
                .collect()
        };
        self.extend_groups(&names);
    }

    /// A reading of the deadline clock.
    pub fn clock_now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The runner lease was renewed by a write that began at `began`.
    pub fn runner_renewed(&self, began: u64) {
        if let Some((_, at)) = self.lock().runner.as_mut() {
            *at = (*at).max(began);
        }
        self.extend_all();
    }

    fn release(&self, group: &RunId) {
        self.lock().groups.remove(group.as_str());
    }

    fn extend_all(&self) {
        let groups: Vec<String> = {
            let inner = self.lock();
            let mut groups: Vec<String> = inner.units.values().map(|u| u.group.clone()).collect();
            groups.sort();
            groups.dedup();
            groups
        };
        self.extend_groups(&groups);
    }

    /// Sends the current deadline of every unit of `groups` to its supervisor.
    fn extend_groups(&self, groups: &[String]) {
        if groups.is_empty() {
            return;
        }
        // The deadlines to send, per supervisor.
        type Batch = (Arc<Link>, Vec<(String, Deadline)>);
        let mut per_link: Vec<Batch> = Vec::new();
        {
            let inner = self.lock();
            for (unit, entry) in &inner.units {
                if !groups.contains(&entry.group) {
                    continue;
                }
                let Some(deadline) = Self::deadline_of(&inner, &entry.group, self.clock) else {
                    continue;
                };
                match per_link
                    .iter_mut()
                    .find(|(l, _)| Arc::ptr_eq(l, &entry.link))
                {
                    Some((_, list)) => list.push((unit.clone(), deadline)),
                    None => {
                        per_link.push((Arc::clone(&entry.link), vec![(unit.clone(), deadline)]))
                    }
                }
            }
        }
        for (link, deadlines) in per_link {
            link.send(Request::Extend { deadlines });
        }
    }

    async fn execute(
        self: &Arc<Self>,
        key: UnitKey,
        mut invocation: Invocation,
        on_spawn: impl FnOnce(u32, Option<u64>) + Send,
        cancel: impl Future<Output = ()> + Send,
    ) -> Executed {
        let started_at = chrono::Utc::now();
        let mut cancel = pin!(cancel);
        // Already cancelled: never started, as in process.
        if is_ready(cancel.as_mut()).await {
            let mut result = ExecResult::unspecified("cancelled".to_owned(), started_at);
            result.status = ExecStatus::Terminated;
            return Executed {
                result,
                terminated_by: None,
            };
        }
        let link = match self.current_link().await {
            Ok(link) => link,
            Err(e) => {
                tracing::error!(error = %e, "cannot start a supervisor");
                return Executed {
                    result: ExecResult::unspecified(
                        format!("cannot start its supervisor: {e}"),
                        started_at,
                    ),
                    terminated_by: None,
                };
            }
        };
        let (deadline, watch) = {
            let mut inner = self.lock();
            invocation.kill_grace = invocation
                .kill_grace
                .min(self.kill_grace_of(&inner, &key.group));
            inner.units.insert(
                key.unit.clone(),
                UnitEntry {
                    group: key.group.clone(),
                    link: Arc::clone(&link),
                },
            );
            let deadline = Self::deadline_of(&inner, &key.group, self.clock);
            (
                deadline,
                link.watch_new(&key.unit, &key.group, invocation.spool.clone()),
            )
        };
        let sent = link.send(Request::Start {
            unit: key.unit.clone(),
            group: key.group.clone(),
            invocation: Box::new(invocation),
            deadline,
        });
        if !sent {
            self.forget(&key.unit);
            return Executed {
                result: ExecResult::unspecified("its supervisor is gone".to_owned(), started_at),
                terminated_by: None,
            };
        }
        let link::Watch { spawned, exited } = watch;
        let mut exited = pin!(exited);
        let mut on_spawn = Some(on_spawn);
        let mut spawned = pin!(spawned);
        let mut spawn_seen = false;
        let mut terminate_sent = false;
        let report = loop {
            tokio::select! {
                biased;
                report = &mut exited => break report.ok(),
                got = &mut spawned, if !spawn_seen => {
                    spawn_seen = true;
                    if let (Ok((pid, start)), Some(f)) = (got, on_spawn.take()) {
                        f(pid, start);
                    }
                }
                () = &mut cancel, if !terminate_sent => {
                    terminate_sent = true;
                    link.send(Request::Terminate { unit: key.unit.clone(), reason: "cancelled by its runner".to_owned() });
                }
            }
        };
        // Acknowledged by the caller once the end is recorded ([`Launcher::ack`]): until
        // then the supervisor keeps it, and writes it to a status file if need be.
        match report {
            Some(report) => {
                if let (Some(f), Some(pid)) = (on_spawn.take(), report.result.pid) {
                    // Spawned and ended before the spawn event was looked at.
                    f(pid, report.result.pid_start_time);
                }
                Executed {
                    result: report.result,
                    terminated_by: report.terminated_by,
                }
            }
            None => lost_unit(),
        }
    }

    fn forget(&self, unit: &str) {
        self.lock().units.remove(unit);
    }

    fn reclaim(&self, unit: &str) -> Option<Reclaimed> {
        let link = self.lock().units.get(unit).map(|e| Arc::clone(&e.link))?;
        let (pid, exited) = link.watch_known(unit)?;
        Some(Reclaimed { pid, exited })
    }

    fn ack(&self, unit: &str) {
        let link = self.lock().units.remove(unit).map(|e| e.link);
        if let Some(link) = link {
            link.ack(unit);
        }
        self.retire_empty();
    }

    /// Terminates a unit (SIGTERM, its kill grace, SIGKILL) on its owner's request.
    pub fn terminate(&self, unit: &str, reason: &str) {
        let link = self.lock().units.get(unit).map(|e| Arc::clone(&e.link));
        if let Some(link) = link {
            link.send(Request::Terminate {
                unit: unit.to_owned(),
                reason: reason.to_owned(),
            });
        }
    }

    /// Terminates a unit nobody will claim (its run was recorded elsewhere) and
    /// acknowledges it once it ended.
    pub fn discard(self: &Arc<Self>, unit: &str, reason: &str) {
        let Some(link) = self.lock().units.get(unit).map(|e| Arc::clone(&e.link)) else {
            return;
        };
        link.send(Request::Terminate {
            unit: unit.to_owned(),
            reason: reason.to_owned(),
        });
        if let Some(reclaimed) = self.reclaim(unit) {
            let sups = Arc::clone(self);
            let unit = unit.to_owned();
            tokio::spawn(async move {
                reclaimed.exited().await;
                sups.ack(&unit);
            });
        }
    }

    /// Units adopted from earlier supervisors, with their groups.
    pub fn adopted_units(&self) -> Vec<(String, String)> {
        let inner = self.lock();
        inner
            .units
            .iter()
            .filter(|(_, e)| inner.adopted.iter().any(|l| Arc::ptr_eq(l, &e.link)))
            .map(|(u, e)| (u.clone(), e.group.clone()))
            .collect()
    }

    fn retire_empty(&self) {
        let mut inner = self.lock();
        let Inner { adopted, units, .. } = &mut *inner;
        adopted.retain(|l| !l.is_closed() && units.values().any(|e| Arc::ptr_eq(&e.link, l)));
    }

    /// How many units are supervised for this daemon now.
    pub fn unit_count(&self) -> usize {
        self.lock().units.len()
    }
}

/// The end of a unit whose supervisor went away before saying how it ended.
fn lost_unit() -> Executed {
    let mut result =
        ExecResult::unspecified("its supervisor went away".to_owned(), chrono::Utc::now());
    result.status = ExecStatus::Terminated;
    Executed {
        result,
        terminated_by: Some(
            "its supervisor went away before reporting how the run ended".to_owned(),
        ),
    }
}

/// Creates `dir` 0700 (tightening an existing one).
fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names_are_file_names_for_any_id() {
        assert_eq!(run_unit(&RunId::new("0123456789ab")), "run-0123456789ab");
        let odd = run_unit(&RunId::new("A/../b"));
        assert!(protocol::is_unit_key(&odd), "{odd}");
        assert!(!odd.contains('/'));
        assert_eq!(UnitKey::step("abc", None).group, "step-abc");
        assert_eq!(UnitKey::step("abc", Some(&RunId::new("r1"))).group, "r1");
    }
}
