//! Whether a store's daemon runs, as `daemon status`, `daemon stop`, `daemon start`
//! and `doctor` (and the MCP tools) decide it: from the store's daemon lease alone —
//! its pid, process start time and host must match a live process. A pid file is
//! never evidence; one that does not name the lease holder is stale.

use crate::client::{Client, Result};
use crate::daemon::PID_FILE;
use crate::process::is_same_process_alive;
use loops_core::{format_instant, Instant, Loop, Run};
use std::path::PathBuf;

/// Whether this store's daemon runs, judged from the lease row alone: its pid, the
/// process start time recorded with it and its host must match a live process. A pid
/// file is never evidence; one that does not name the lease holder is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonState {
    /// The lease is current and (on this host) its holder is the same live process.
    Running,
    /// The lease expired but its holder (on this host) is still the same live process:
    /// stopped with SIGSTOP, or hung. It does not schedule, and still blocks a new
    /// daemon until it is stopped or its process is gone.
    Stalled,
    /// No lease, a released one, or one whose holder process is gone.
    Stopped,
}

impl DaemonState {
    pub fn as_str(self) -> &'static str {
        match self {
            DaemonState::Running => "running",
            DaemonState::Stalled => "stalled",
            DaemonState::Stopped => "stopped",
        }
    }
}

/// The lease holder of a running or stalled daemon.
pub struct Holder {
    pub pid: u32,
    pub pid_start_time: Option<u64>,
    pub host: String,
    /// The holder is on this host (so its pid can be checked and signalled).
    pub local: bool,
    pub since: Instant,
    pub expires: Instant,
}

/// A pid file that does not name the lease holder.
pub struct StalePidFile {
    pub path: PathBuf,
    /// Its exact contents, so removal can make sure nobody rewrote it meanwhile.
    contents: String,
    /// The pid it names, if it names one.
    pub pid: Option<u32>,
}

/// What `daemon status`, `stop`, `start` and `doctor` all go by.
pub struct DaemonView {
    pub state: DaemonState,
    /// `Some` exactly when running or stalled.
    pub holder: Option<Holder>,
    pub stale_pid_file: Option<StalePidFile>,
}

impl Client {
    /// Whether this store's daemon runs (see [`DaemonState`]), and a stale pid file.
    ///
    /// Reads the pid file, then the lease, in that order: a daemon writes its pid file
    /// only after taking the lease, so a pid file read first that does not name the
    /// holder read second is stale.
    pub fn daemon_view(&self) -> Result<DaemonView> {
        let path = self.data_dir().join(PID_FILE);
        let contents = std::fs::read_to_string(&path).ok();
        let lease = self.daemon_lease()?;
        Ok(view(path, contents, lease, chrono::Utc::now()))
    }

    /// What `daemon status` reports: the daemon's state, the runs in flight and the
    /// loop due next. Reads only (a stale pid file is reported, not removed).
    pub fn daemon_status(&self) -> Result<DaemonStatus> {
        let view = self.daemon_view()?;
        let running = self.running_runs()?;
        // A row that no longer decodes does not stop the status report.
        let next_due = self.next_due_loop()?;
        Ok(DaemonStatus {
            view,
            running,
            next_due,
        })
    }
}

/// What `daemon status` reports (see [`Client::daemon_status`]).
pub struct DaemonStatus {
    pub view: DaemonView,
    /// Runs in flight, of every loop.
    pub running: Vec<Run>,
    /// The active loop due soonest.
    pub next_due: Option<Loop>,
}

impl DaemonStatus {
    /// The JSON document of `daemon status --json` (and the MCP `loops_daemon_status`).
    pub fn to_json(&self, now: Instant) -> serde_json::Value {
        let holder = self.view.holder.as_ref();
        serde_json::json!({
            "state": self.view.state.as_str(),
            "running": holder.is_some(),
            "pid": holder.map(|h| h.pid),
            "host": holder.map(|h| h.host.clone()),
            "since": holder.map(|h| format_instant(&h.since)),
            "uptimeMs": holder.map(|h| (now - h.since).num_milliseconds().max(0)),
            "leaseExpiresAt": holder.map(|h| format_instant(&h.expires)),
            "runningRuns": self.running,
            "nextDue": self.next_due.as_ref().map(|l| serde_json::json!({"id": l.id, "name": l.name, "nextRunAt": l.next_run_at.map(|t| format_instant(&t))})),
            "stalePidFile": self.view.stale_pid_file.is_some(),
        })
    }
}

/// The daemon's state from the pid file's `contents` and the lease row, at `now`.
fn view(
    path: PathBuf,
    contents: Option<String>,
    lease: Option<loops_store::DaemonLease>,
    now: Instant,
) -> DaemonView {
    let this_host = crate::process::hostname();
    let (state, holder) = match lease {
        None => (DaemonState::Stopped, None),
        Some(lease) => {
            let local = lease.holder.host == this_host;
            let current = lease.expires_at > now;
            let state = if local {
                if !is_same_process_alive(lease.holder.pid, lease.holder.pid_start_time) {
                    DaemonState::Stopped
                } else if current {
                    DaemonState::Running
                } else {
                    DaemonState::Stalled
                }
            } else if current {
                DaemonState::Running
            } else {
                DaemonState::Stopped
            };
            let holder = (state != DaemonState::Stopped).then_some(Holder {
                pid: lease.holder.pid,
                pid_start_time: lease.holder.pid_start_time,
                host: lease.holder.host,
                local,
                since: lease.acquired_at,
                expires: lease.expires_at,
            });
            (state, holder)
        }
    };
    let stale_pid_file = contents.and_then(|contents| {
        let pid = contents.trim().parse::<u32>().ok();
        let names_holder = matches!((&holder, pid), (Some(h), Some(p)) if h.pid == p);
        (!names_holder).then_some(StalePidFile {
            path: path.clone(),
            contents,
            pid,
        })
    });
    DaemonView {
        state,
        holder,
        stale_pid_file,
    }
}

impl StalePidFile {
    /// Removes the file if it still holds what was read: a daemon that took the lease
    /// since then has written its own pid, which stays.
    pub fn remove(&self) -> bool {
        match std::fs::read_to_string(&self.path) {
            Ok(now) if now == self.contents => std::fs::remove_file(&self.path).is_ok(),
            _ => false,
        }
    }

    /// `stale pid file /x/daemon.pid names pid 123, which is not running`.
    pub fn describe(&self) -> String {
        let what = match self.pid {
            Some(pid) if is_same_process_alive(pid, None) => {
                format!("names pid {pid}, which is not this store's daemon")
            }
            Some(pid) => format!("names pid {pid}, which is not running"),
            None => "does not name a pid".to_owned(),
        };
        format!("stale pid file {} {what}", self.path.display())
    }
}

/// `pid 123 on host, lease expired 5s ago; SIGSTOPped or hung?`
pub fn stalled_text(h: &Holder, now: Instant) -> String {
    format!(
        "pid {} on {}, lease expired {}; SIGSTOPped or hung?",
        h.pid,
        h.host,
        loops_core::format_relative(h.expires, now)
    )
}
