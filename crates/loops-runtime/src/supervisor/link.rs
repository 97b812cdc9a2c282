//! The daemon's side of its supervisors: starting one, adopting the units of earlier
//! ones, and one [`Link`] (a connection) to each. A link's reader task routes the
//! supervisor's events to whoever waits for a unit; when the connection breaks (the
//! supervisor was killed), the link terminates what is left of its units' process
//! groups itself and ends them with the reason.

use super::protocol::{read_frame, write_frame, Event, ExitReport, Request, UnitReport, PROTOCOL};
use crate::executor::{ExecResult, ExecStatus};
use crate::process::{group_exists, is_same_process_alive, terminate_group};
use crate::spool::SpoolFiles;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

/// How long a supervisor gets to answer `Hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// What a waiter learns about its unit.
#[derive(Default)]
struct Waiter {
    spawned: Option<oneshot::Sender<Process>>,
    exited: Option<oneshot::Sender<ExitReport>>,
    /// The process, once it started.
    pid: Option<Process>,
    /// An end that came before anyone waited for it (a re-attached unit).
    early_exit: Option<ExitReport>,
    spool: Option<SpoolFiles>,
    group: String,
}

/// One connection to one supervisor.
pub(crate) struct Link {
    pub(crate) pid: u32,
    requests: mpsc::UnboundedSender<Request>,
    waiters: Mutex<HashMap<String, Waiter>>,
    closed: AtomicBool,
    kill_grace: Duration,
}

/// A unit's process: its pid and start time.
pub(crate) type Process = (u32, Option<u64>);

/// A unit's process, as the link reports it to the one executing it.
pub(crate) struct Watch {
    pub(crate) spawned: oneshot::Receiver<Process>,
    pub(crate) exited: oneshot::Receiver<ExitReport>,
}

impl Link {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        // Single inserts, removes and field writes: consistent even if poisoned.
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the supervisor can no longer be reached.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn send(&self, request: Request) -> bool {
        !self.is_closed() && self.requests.send(request).is_ok()
    }

    /// Registers a waiter for a unit about to be started here.
    pub(crate) fn watch_new(&self, unit: &str, group: &str, spool: Option<SpoolFiles>) -> Watch {
        let (spawned_tx, spawned) = oneshot::channel();
        let (exited_tx, exited) = oneshot::channel();
        self.lock().insert(
            unit.to_owned(),
            Waiter {
                spawned: Some(spawned_tx),
                exited: Some(exited_tx),
                spool,
                group: group.to_owned(),
                ..Waiter::default()
            },
        );
        Watch { spawned, exited }
    }

    /// Takes over the waiting for a unit this link already knows (re-attached): its
    /// process, if it started, and a receiver of its end.
    pub(crate) fn watch_known(
        &self,
        unit: &str,
    ) -> Option<(Option<Process>, oneshot::Receiver<ExitReport>)> {
        let mut waiters = self.lock();
        let waiter = waiters.get_mut(unit)?;
        let (tx, rx) = oneshot::channel();
        match waiter.early_exit.take() {
            Some(report) => {
                let _ = tx.send(report);
            }
            None => waiter.exited = Some(tx),
        }
        Some((waiter.pid, rx))
    }

    /// Units of this link with their groups.
    pub(crate) fn units(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .map(|(unit, w)| (unit.clone(), w.group.clone()))
            .collect()
    }

    /// Forgets a unit once its end is recorded, and tells the supervisor.
    pub(crate) fn ack(&self, unit: &str) {
        self.lock().remove(unit);
        self.send(Request::Ack {
            unit: unit.to_owned(),
        });
    }

    fn on_event(&self, event: Event) {
        match event {
            Event::Spawned {
                unit,
                pid,
                pid_start_time,
            } => {
                let mut waiters = self.lock();
                if let Some(w) = waiters.get_mut(&unit) {
                    w.pid = Some((pid, pid_start_time));
                    if let Some(tx) = w.spawned.take() {
                        let _ = tx.send((pid, pid_start_time));
                    }
                }
            }
            Event::Exited { unit, report } => {
                let mut waiters = self.lock();
                if let Some(w) = waiters.get_mut(&unit) {
                    w.spawned = None;
                    match w.exited.take() {
                        Some(tx) => {
                            if let Err(report) = tx.send(*report) {
                                w.early_exit = Some(report);
                            }
                        }
                        None => w.early_exit = Some(*report),
                    }
                }
            }
            Event::Welcome { .. } => {
                tracing::warn!("a supervisor said hello twice; ignored");
            }
        }
    }

    /// The supervisor is gone (killed): nobody holds these units' pipes or deadlines any
    /// more. Terminates what is left of each unit's process group and ends its waiter.
    fn on_closed(self: &Arc<Self>) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let orphans: Vec<(String, Waiter)> = {
            let mut waiters = self.lock();
            let ended: Vec<String> = waiters
                .iter()
                .filter(|(_, w)| w.early_exit.is_none())
                .map(|(k, _)| k.clone())
                .collect();
            ended
                .into_iter()
                .filter_map(|k| waiters.remove(&k).map(|w| (k, w)))
                .collect()
        };
        if orphans.is_empty() {
            return;
        }
        tracing::error!(
            supervisor = self.pid,
            runs = orphans.len(),
            "a supervisor died; terminating its runs' processes"
        );
        let grace = self.kill_grace;
        let supervisor = self.pid;
        tokio::spawn(async move {
            for (unit, mut waiter) in orphans {
                let started_at = chrono::Utc::now();
                if let Some((pid, start)) = waiter.pid {
                    // The leader (same start time), or members of its group left after
                    // it died: the group's id cannot be reused while any member lives.
                    if is_same_process_alive(pid, start) || group_exists(pid) {
                        terminate_group(pid, grace).await;
                    }
                }
                let (stdout, stderr) = waiter
                    .spool
                    .as_ref()
                    .map(|s| s.read(crate::executor::DEFAULT_MAX_OUTPUT_BYTES))
                    .unwrap_or_default();
                let mut result =
                    ExecResult::unspecified("its supervisor died".to_owned(), started_at);
                result.status = ExecStatus::Terminated;
                result.stdout = stdout;
                result.stderr = stderr;
                result.pid = waiter.pid.map(|p| p.0);
                result.pid_start_time = waiter.pid.and_then(|p| p.1);
                let report = ExitReport {
                    unit: unit.clone(),
                    group: waiter.group.clone(),
                    result,
                    terminated_by: Some(format!(
                        "its supervisor (pid {supervisor}) died unexpectedly; what was left \
                         of the run's processes was terminated"
                    )),
                };
                waiter.spawned = None;
                if let Some(tx) = waiter.exited.take() {
                    let _ = tx.send(report);
                }
            }
        });
    }
}

/// Connects to a supervisor over `stream`, says hello, and returns the link with the
/// units it holds.
pub(crate) async fn connect(
    stream: UnixStream,
    runner_id: &str,
    kill_grace: Duration,
) -> io::Result<(Arc<Link>, u32, Vec<UnitReport>)> {
    let (mut read, mut write) = stream.into_split();
    write_frame(
        &mut write,
        &Request::Hello {
            daemon_pid: std::process::id(),
            runner_id: runner_id.to_owned(),
        },
    )
    .await?;
    let welcome = tokio::time::timeout(HELLO_TIMEOUT, read_frame::<_, Event>(&mut read))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer to hello"))??;
    let Some(Event::Welcome {
        protocol,
        pid,
        units,
        version,
    }) = welcome
    else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the supervisor did not answer hello with welcome",
        ));
    };
    if protocol != PROTOCOL {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the supervisor (pid {pid}, loops {version}) speaks protocol {protocol}, not {PROTOCOL}"),
        ));
    }
    let (requests, mut queue) = mpsc::unbounded_channel::<Request>();
    let link = Arc::new(Link {
        pid,
        requests,
        waiters: Mutex::new(HashMap::new()),
        closed: AtomicBool::new(false),
        kill_grace,
    });
    {
        let mut waiters = link.lock();
        for u in &units {
            waiters.insert(
                u.unit.clone(),
                Waiter {
                    pid: u.pid.map(|p| (p, u.pid_start_time)),
                    early_exit: u.exited.clone(),
                    spool: u.spool.clone(),
                    group: u.group.clone(),
                    ..Waiter::default()
                },
            );
        }
    }
    let writer_link = Arc::downgrade(&link);
    tokio::spawn(async move {
        while let Some(request) = queue.recv().await {
            if let Err(e) = write_frame(&mut write, &request).await {
                tracing::debug!(error = %e, "cannot write to a supervisor");
                if let Some(link) = writer_link.upgrade() {
                    link.on_closed();
                }
                return;
            }
        }
    });
    let reader_link = Arc::downgrade(&link);
    tokio::spawn(async move {
        loop {
            let event = read_frame::<_, Event>(&mut read).await;
            let Some(link) = reader_link.upgrade() else {
                return;
            };
            match event {
                Ok(Some(event)) => link.on_event(event),
                Ok(None) => {
                    link.on_closed();
                    return;
                }
                Err(e) => {
                    tracing::warn!(supervisor = link.pid, error = %e, "connection to a supervisor broke");
                    link.on_closed();
                    return;
                }
            }
        }
    });
    Ok((link, pid, units))
}

/// Starts a supervisor of `program` (the `loops` binary) for the supervise dir `dir`,
/// and connects to it through its stdin.
pub(crate) async fn spawn(
    program: &Path,
    dir: &Path,
    runner_id: &str,
    kill_grace: Duration,
) -> io::Result<(Arc<Link>, u32, Vec<UnitReport>)> {
    use std::os::fd::OwnedFd;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let log = open_log(&dir.join(super::LOG_FILE))?;
    let mut command = std::process::Command::new(program);
    command
        .arg(super::SUBCOMMAND)
        .arg(dir)
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::null())
        .stderr(log);
    for name in super::SCRUBBED_ENV {
        command.env_remove(name);
    }
    let mut child = command.spawn()?;
    let pid = child.id();
    // Our child until it exits: reaped on a thread of its own (a blocking wait on its
    // own pid, which nothing else reaps), so it never stays a zombie.
    std::thread::Builder::new()
        .name("loops-supervisor-reaper".to_owned())
        .spawn(move || match child.wait() {
            Ok(status) if status.success() => tracing::debug!(pid, "supervisor exited"),
            Ok(status) => tracing::warn!(pid, %status, "supervisor exited"),
            Err(e) => tracing::warn!(pid, error = %e, "cannot wait for the supervisor"),
        })?;
    ours.set_nonblocking(true)?;
    let stream = UnixStream::from_std(ours)?;
    connect(stream, runner_id, kill_grace).await
}

/// The supervisor log, appended to, owner-only.
fn open_log(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Kept short: a supervisor says little, but a host runs many over months.
    if std::fs::metadata(path).is_ok_and(|m| m.len() > super::LOG_MAX_BYTES) {
        let _ = std::fs::rename(path, path.with_extension("log.1"));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Sockets of supervisors in `dir` other than `except`, by pid.
pub(crate) fn sockets(dir: &Path, except: Option<u32>) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let pid = name.to_str()?.strip_suffix(".sock")?.parse::<u32>().ok()?;
            (Some(pid) != except).then(|| (pid, e.path()))
        })
        .collect();
    found.sort();
    found
}
