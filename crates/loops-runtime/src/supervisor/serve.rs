//! The supervisor process: holds the process groups of the runs a daemon started,
//! their pipes and exit statuses, and terminates each on its own deadline unless its
//! runner extends it. It outlives its daemon: a daemon that is killed, stopped or
//! replaced leaves its runs here, and the next one on the same host re-attaches.
//!
//! One supervisor serves one daemon incarnation (spawned by it, its first connection
//! on stdin); a later daemon connects to its socket (`supervise/<pid>.sock`), becomes
//! the owner of its units, and tells it to retire: it then exits once its last unit is
//! acknowledged. With no connection and no units left it exits by itself; a unit that
//! ends while no daemon is connected is written to its status file
//! (`supervise/<unit>.status`, 0600, atomically) at once, one that ends while its owner
//! is connected only if the owner has not acknowledged it within [`PERSIST_AFTER`], so
//! the common path costs no file write.
//!
//! Runs on a single-threaded runtime: the work is waiting on pipes, children and
//! timers.
//! SIGTERM/SIGINT terminate every unit (their status files say why) and exit;
//! SIGHUP is ignored.

use super::protocol::{
    is_unit_key, read_frame, write_frame, Deadline, Event, ExitReport, Request, UnitReport,
    PROTOCOL,
};
use super::status;
use crate::executor::{execute, ExecResult, ExecStatus, Invocation};
use crate::spool::SpoolFiles;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch, Notify};

/// How long a unit that ended while its owner was connected waits for the owner's
/// acknowledgement before its status is written to a file anyway.
pub const PERSIST_AFTER: Duration = Duration::from_secs(1);
/// How often a deadline is looked at again while it has not passed: the timer runs on
/// the monotonic clock, a `Boottime` deadline also moves while the machine sleeps.
const DEADLINE_RECHECK: Duration = Duration::from_millis(500);

struct Unit {
    group: String,
    pid: Option<u32>,
    pid_start_time: Option<u64>,
    deadline: Option<Deadline>,
    spool: Option<SpoolFiles>,
    exited: Option<ExitReport>,
    status_written: bool,
    deadline_tx: watch::Sender<Option<Deadline>>,
    terminate_tx: watch::Sender<Option<String>>,
}

#[derive(Default)]
struct State {
    units: HashMap<String, Unit>,
    /// The owner's connection id and its event queue.
    owner: Option<(u64, mpsc::UnboundedSender<Event>)>,
    connections: usize,
    next_connection: u64,
    /// Told to retire (adopted by a newer daemon's): no new units.
    retiring: bool,
    /// Told to stop (SIGTERM): every unit terminated, exit once all have ended.
    stopping: bool,
}

struct Shared {
    dir: PathBuf,
    version: String,
    state: Mutex<State>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every mutation is a single insert/remove/field write: a poisoned lock still
        // holds a consistent state.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Nothing left to do: every unit ended and its status is written down (or
    /// acknowledged, and gone), and no daemon needs this supervisor for new ones.
    fn should_exit(&self) -> bool {
        let state = self.lock();
        let all_recorded = state
            .units
            .values()
            .all(|u| u.exited.is_some() && u.status_written);
        all_recorded && (state.stopping || state.connections == 0 || state.retiring)
    }

    fn send_to_owner(state: &State, event: Event) {
        if let Some((_, tx)) = &state.owner {
            let _ = tx.send(event);
        }
    }

    fn spawned(&self, unit: &str, pid: u32, pid_start_time: Option<u64>) {
        let mut state = self.lock();
        if let Some(u) = state.units.get_mut(unit) {
            u.pid = Some(pid);
            u.pid_start_time = pid_start_time;
        }
        Self::send_to_owner(
            &state,
            Event::Spawned {
                unit: unit.to_owned(),
                pid,
                pid_start_time,
            },
        );
    }

    fn exited(self: &Arc<Self>, unit: &str, report: ExitReport) {
        let persist_now = {
            let mut state = self.lock();
            let persist_now = state.owner.is_none() || state.stopping;
            let Some(u) = state.units.get_mut(unit) else {
                return;
            };
            u.exited = Some(report.clone());
            Self::send_to_owner(
                &state,
                Event::Exited {
                    unit: unit.to_owned(),
                    report: Box::new(report),
                },
            );
            persist_now
        };
        if persist_now {
            self.persist(unit);
        } else {
            let shared = Arc::clone(self);
            let unit = unit.to_owned();
            tokio::spawn(async move {
                tokio::time::sleep(PERSIST_AFTER).await;
                shared.persist(&unit);
            });
        }
        self.changed.notify_one();
    }

    /// Writes an ended, unacknowledged unit's status file (once).
    fn persist(&self, unit: &str) {
        let report = {
            let state = self.lock();
            match state.units.get(unit) {
                Some(u) if !u.status_written => u.exited.clone(),
                _ => None,
            }
        };
        let Some(report) = report else { return };
        match status::write(&self.dir, &report) {
            Ok(()) => {
                if let Some(u) = self.lock().units.get_mut(unit) {
                    u.status_written = true;
                }
            }
            Err(e) => tracing::error!(unit, error = %e, "cannot write a unit's status file"),
        }
        self.changed.notify_one();
    }

    fn persist_all_ended(&self) {
        let ended: Vec<String> = self
            .lock()
            .units
            .iter()
            .filter(|(_, u)| u.exited.is_some() && !u.status_written)
            .map(|(k, _)| k.clone())
            .collect();
        for unit in ended {
            self.persist(&unit);
        }
    }

    fn start(
        self: &Arc<Self>,
        unit: String,
        group: String,
        invocation: Invocation,
        deadline: Option<Deadline>,
    ) {
        let refused = {
            let state = self.lock();
            if state.retiring || state.stopping {
                Some("its supervisor takes no new runs (it is retiring)".to_owned())
            } else if state.units.contains_key(&unit) {
                Some(format!("unit {unit} is already supervised"))
            } else if !is_unit_key(&unit) {
                Some(format!("{unit:?} is not a unit name"))
            } else {
                None
            }
        };
        if let Some(why) = refused {
            let now = chrono::Utc::now();
            let report = ExitReport {
                unit: unit.clone(),
                group,
                result: ExecResult::unspecified(why, now),
                terminated_by: None,
            };
            Self::send_to_owner(
                &self.lock(),
                Event::Exited {
                    unit,
                    report: Box::new(report),
                },
            );
            return;
        }
        let (deadline_tx, deadline_rx) = watch::channel(deadline);
        let (terminate_tx, terminate_rx) = watch::channel(None::<String>);
        self.lock().units.insert(
            unit.clone(),
            Unit {
                group: group.clone(),
                pid: None,
                pid_start_time: None,
                deadline,
                spool: invocation.spool.clone(),
                exited: None,
                status_written: false,
                deadline_tx,
                terminate_tx,
            },
        );
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let why = Arc::new(Mutex::new(None::<String>));
            let cancel = {
                let why = Arc::clone(&why);
                async move {
                    let reason = tokio::select! {
                        reason = terminated(terminate_rx) => reason,
                        reason = deadline_passes(deadline_rx) => Some(reason),
                    };
                    *why.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = reason;
                }
            };
            let on_spawn = {
                let shared = Arc::clone(&shared);
                let unit = unit.clone();
                move |pid: u32, start: Option<u64>| shared.spawned(&unit, pid, start)
            };
            let result = execute(invocation, on_spawn, cancel).await;
            let terminated_by = if result.status == ExecStatus::Terminated {
                why.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
            } else {
                None
            };
            if let Some(reason) = &terminated_by {
                tracing::warn!(unit, %reason, "terminated a unit");
            }
            let report = ExitReport {
                unit: unit.clone(),
                group,
                result,
                terminated_by,
            };
            shared.exited(&unit, report);
        });
    }

    fn request(
        self: &Arc<Self>,
        connection: u64,
        tx: &mpsc::UnboundedSender<Event>,
        request: Request,
    ) {
        match request {
            Request::Hello {
                daemon_pid,
                runner_id,
            } => {
                let mut state = self.lock();
                let units = state
                    .units
                    .iter()
                    .map(|(unit, u)| UnitReport {
                        unit: unit.clone(),
                        group: u.group.clone(),
                        pid: u.pid,
                        pid_start_time: u.pid_start_time,
                        deadline: u.deadline,
                        spool: u.spool.clone(),
                        exited: u.exited.clone(),
                    })
                    .collect();
                tracing::info!(daemon_pid, %runner_id, "a daemon took this supervisor's units");
                // The previous owner, if still connected, gets no more events.
                state.owner = Some((connection, tx.clone()));
                let _ = tx.send(Event::Welcome {
                    protocol: PROTOCOL,
                    pid: std::process::id(),
                    version: self.version.clone(),
                    units,
                });
            }
            Request::Start {
                unit,
                group,
                invocation,
                deadline,
            } => self.start(unit, group, *invocation, deadline),
            Request::Extend { deadlines } => {
                let mut state = self.lock();
                for (unit, deadline) in deadlines {
                    if let Some(u) = state.units.get_mut(&unit) {
                        u.deadline = Some(deadline);
                        let _ = u.deadline_tx.send(Some(deadline));
                    }
                }
            }
            Request::Terminate { unit, reason } => {
                if let Some(u) = self.lock().units.get(&unit) {
                    tracing::info!(unit, %reason, "terminating a unit at its owner's request");
                    // `None` as the supervisor's own reason: the owner knows its own.
                    let _ = u.terminate_tx.send(Some(String::new()));
                }
            }
            Request::Ack { unit } => {
                let removed = self.lock().units.remove(&unit);
                if let Some(u) = removed {
                    if u.status_written {
                        status::remove(&self.dir, &unit);
                    }
                }
                self.changed.notify_one();
            }
            Request::Retire => {
                self.lock().retiring = true;
                self.changed.notify_one();
            }
        }
    }

    fn terminate_all(&self, reason: &str) {
        let mut state = self.lock();
        state.stopping = true;
        for u in state.units.values() {
            let _ = u.terminate_tx.send(Some(reason.to_owned()));
        }
    }
}

/// Resolves with the supervisor's own reason when told to terminate (`None`: the
/// owner asked, with a reason of its own); never when the sender is gone.
async fn terminated(mut rx: watch::Receiver<Option<String>>) -> Option<String> {
    let reason = match rx.wait_for(Option::is_some).await {
        Ok(reason) => reason.clone(),
        Err(_) => None,
    };
    match reason {
        Some(reason) => Some(reason).filter(|r| !r.is_empty()),
        None => std::future::pending().await,
    }
}

/// Resolves once the unit's deadline has passed without an extension.
async fn deadline_passes(mut rx: watch::Receiver<Option<Deadline>>) -> String {
    loop {
        let deadline = *rx.borrow_and_update();
        let wait = match deadline {
            Some(d) => {
                let now = d.clock.now_ms();
                if now >= d.at_ms {
                    return format!(
                        "terminated by its supervisor: its deadline passed {} ms ago and its \
                         runner did not extend it (the runner is stopped, cut off from the \
                         store, or gone, and another may take the slot over)",
                        now - d.at_ms
                    );
                }
                Some(Duration::from_millis(d.at_ms - now).min(DEADLINE_RECHECK))
            }
            None => None,
        };
        let changed = async {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        match wait {
            Some(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = changed => {}
                }
            }
            None => changed.await,
        }
    }
}

/// The socket path of the supervisor with `pid` in `dir`.
pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.sock"))
}

/// Serves until nothing is left to supervise (see the module docs). `first` is the
/// connection of the daemon that started this supervisor, if any.
pub async fn serve(dir: &Path, version: String, first: Option<UnixStream>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = socket_path(dir, std::process::id());
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let shared = Arc::new(Shared {
        dir: dir.to_path_buf(),
        version,
        state: Mutex::new(State::default()),
        changed: Notify::new(),
    });
    if let Some(first) = first {
        spawn_connection(&shared, first);
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // Our own session already keeps a terminal's hang-up away; ignore a direct one.
    let mut hup = signal(SignalKind::hangup())?;
    tracing::info!(pid = std::process::id(), "supervisor started");
    loop {
        let changed = shared.changed.notified();
        if shared.should_exit() {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match stream.peer_cred() {
                    // Whoever connects can start processes as us: our own uid only.
                    Ok(cred) if cred.uid() == nix::unistd::geteuid().as_raw() => {
                        spawn_connection(&shared, stream)
                    }
                    Ok(cred) => tracing::warn!(uid = cred.uid(), "refused a connection from another user"),
                    Err(e) => tracing::warn!(error = %e, "refused a connection without credentials"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = term.recv() => shared.terminate_all("its supervisor was stopped (SIGTERM)"),
            _ = int.recv() => shared.terminate_all("its supervisor was stopped (SIGINT)"),
            _ = hup.recv() => {}
            _ = changed => {}
        }
        if shared.lock().stopping {
            shared.persist_all_ended();
        }
    }
    let _ = std::fs::remove_file(&path);
    tracing::info!("supervisor exiting: nothing left to supervise");
    Ok(())
}

fn spawn_connection(shared: &Arc<Shared>, stream: UnixStream) {
    // Counted before the task runs: the serve loop must not see "no connection" first.
    let id = {
        let mut state = shared.lock();
        state.connections += 1;
        state.next_connection += 1;
        state.next_connection
    };
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let (mut read, mut write) = stream.into_split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
        let writer = tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                if let Err(e) = write_frame(&mut write, &event).await {
                    tracing::debug!(error = %e, "connection to the daemon broke");
                    break;
                }
            }
        });
        loop {
            match read_frame::<_, Request>(&mut read).await {
                Ok(Some(request)) => shared.request(id, &tx, request),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "bad frame from the daemon; closing its connection");
                    break;
                }
            }
        }
        drop(tx);
        let was_owner = {
            let mut state = shared.lock();
            state.connections -= 1;
            let owner = state.owner.as_ref().is_some_and(|(o, _)| *o == id);
            if owner {
                state.owner = None;
            }
            owner
        };
        if was_owner {
            tracing::info!("its daemon went away; the runs go on under their deadlines");
            // Nobody will acknowledge them now: their status files are the record.
            shared.persist_all_ended();
        }
        writer.abort();
        shared.changed.notify_one();
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::executor::Invocation;
    use crate::supervisor::protocol::DeadlineClock;

    async fn next_event(read: &mut tokio::net::unix::OwnedReadHalf) -> Event {
        tokio::time::timeout(Duration::from_secs(10), read_frame::<_, Event>(read))
            .await
            .expect("an event in time")
            .expect("a frame")
            .expect("not the end")
    }

    /// A supervisor in this process, and the daemon's end of its first connection.
    async fn started(
        dir: &Path,
    ) -> (
        tokio::net::unix::OwnedReadHalf,
        tokio::net::unix::OwnedWriteHalf,
    ) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let dir = dir.to_path_buf();
        tokio::spawn(async move { serve(&dir, "test".to_owned(), Some(theirs)).await });
        let (mut read, mut write) = ours.into_split();
        write_frame(
            &mut write,
            &Request::Hello {
                daemon_pid: 1,
                runner_id: "t".to_owned(),
            },
        )
        .await
        .unwrap();
        assert!(
            matches!(next_event(&mut read).await, Event::Welcome { units, .. } if units.is_empty())
        );
        (read, write)
    }

    #[tokio::test]
    async fn a_unit_is_spawned_reported_and_forgotten_once_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let (mut read, mut write) = started(dir.path()).await;
        let mut invocation = Invocation::shell("echo hi; echo oops >&2; exit 4");
        invocation.env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        write_frame(
            &mut write,
            &Request::Start {
                unit: "run-aaaa".to_owned(),
                group: "aaaa".to_owned(),
                invocation: Box::new(invocation),
                deadline: None,
            },
        )
        .await
        .unwrap();
        let Event::Spawned { unit, pid, .. } = next_event(&mut read).await else {
            panic!("spawned first")
        };
        assert_eq!(unit, "run-aaaa");
        let Event::Exited { report, .. } = next_event(&mut read).await else {
            panic!("then exited")
        };
        assert_eq!(report.result.exit_code, Some(4));
        assert_eq!(report.result.pid, Some(pid));
        assert_eq!(report.result.stdout, "hi\n");
        assert_eq!(report.result.stderr, "oops\n");
        assert!(report.result.resources.is_some(), "wait4's usage");
        assert_eq!(report.terminated_by, None);
        write_frame(
            &mut write,
            &Request::Ack {
                unit: "run-aaaa".to_owned(),
            },
        )
        .await
        .unwrap();
        // Not acknowledged in time, it would have been written down; acknowledged, it
        // never is.
        tokio::time::sleep(PERSIST_AFTER + Duration::from_millis(300)).await;
        assert!(!status::path(dir.path(), "run-aaaa").exists());
    }

    #[tokio::test]
    async fn a_deadline_that_passes_terminates_the_unit_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let (mut read, mut write) = started(dir.path()).await;
        let mut invocation = Invocation::shell("sleep 30");
        invocation.env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        invocation.kill_grace = Duration::from_millis(200);
        let clock = DeadlineClock::Monotonic;
        write_frame(
            &mut write,
            &Request::Start {
                unit: "run-bbbb".to_owned(),
                group: "bbbb".to_owned(),
                invocation: Box::new(invocation),
                deadline: Some(Deadline {
                    clock,
                    at_ms: clock.now_ms() + 60_000,
                }),
            },
        )
        .await
        .unwrap();
        assert!(matches!(next_event(&mut read).await, Event::Spawned { .. }));
        // An extension that moves it to the past: terminated at once.
        let began = std::time::Instant::now();
        write_frame(
            &mut write,
            &Request::Extend {
                deadlines: vec![(
                    "run-bbbb".to_owned(),
                    Deadline {
                        clock,
                        at_ms: clock.now_ms().saturating_sub(1),
                    },
                )],
            },
        )
        .await
        .unwrap();
        let Event::Exited { report, .. } = next_event(&mut read).await else {
            panic!("exited")
        };
        assert!(began.elapsed() < Duration::from_secs(5));
        assert_eq!(report.result.status, ExecStatus::Terminated);
        let why = report.terminated_by.expect("the supervisor's reason");
        assert!(
            why.starts_with("terminated by its supervisor: its deadline passed"),
            "{why}"
        );
        // Its daemon goes away without acknowledging: the end is written down.
        drop(write);
        drop(read);
        let file = status::path(dir.path(), "run-bbbb");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !file.exists() {
            assert!(std::time::Instant::now() < deadline, "no status file");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let written = status::read(dir.path(), "run-bbbb").expect("readable");
        assert_eq!(written.terminated_by.as_deref(), Some(why.as_str()));
    }

    #[tokio::test]
    async fn a_bad_unit_name_is_refused_and_nothing_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (mut read, mut write) = started(dir.path()).await;
        write_frame(
            &mut write,
            &Request::Start {
                unit: "run-../../x".to_owned(),
                group: "x".to_owned(),
                invocation: Box::new(Invocation::shell("touch /tmp/should-not-exist")),
                deadline: None,
            },
        )
        .await
        .unwrap();
        let Event::Exited { report, .. } = next_event(&mut read).await else {
            panic!("refused")
        };
        assert_eq!(report.result.pid, None);
        assert!(report.result.error.unwrap().contains("not a unit name"));
    }
}
