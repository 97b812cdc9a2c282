//! Whether a store's daemon runs, as `daemon status`, `daemon stop`, `daemon start`
//! and `doctor` (and the MCP tools) decide it: from the store's daemon lease alone —
//! its pid, process start time and host must match a live process. A pid file is
//! never evidence; one that does not name the lease holder is stale. On a store with
//! runners (PostgreSQL) this data dir's daemon is the runner its pid file names, and
//! `loops runners` / `GET /v1/runners` list every runner ([`Client::runners_json`]).

use crate::client::{Backend, Client, Result};
use crate::daemon::PID_FILE;
use crate::process::is_same_process_alive;
use loops_core::{format_instant, Instant, Loop, Run};
use loops_store::RunnerInfo;
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

impl DaemonView {
    /// The daemon in `state`, held by `holder`; the pid file (`contents`, at `path`)
    /// is stale unless it names the holder. One rule for the lease and the runner rows.
    fn judged(
        path: PathBuf,
        contents: Option<String>,
        state: DaemonState,
        holder: Option<Holder>,
    ) -> Self {
        let stale_pid_file = contents.and_then(|contents| {
            let pid = contents.trim().parse::<u32>().ok();
            let names_holder = matches!((&holder, pid), (Some(h), Some(p)) if h.pid == p);
            (!names_holder).then_some(StalePidFile {
                path,
                contents,
                pid,
            })
        });
        Self {
            state,
            holder,
            stale_pid_file,
        }
    }
}

impl Client {
    /// Whether this store's daemon runs (see [`DaemonState`]), and a stale pid file.
    ///
    /// Reads the pid file, then the lease, in that order: a daemon writes its pid file
    /// only after taking the lease, so a pid file read first that does not name the
    /// holder read second is stale.
    pub fn daemon_view(&self) -> Result<DaemonView> {
        let path = self.data_dir().join(PID_FILE);
        let contents = pid_file_text(&path);
        if self.store_has_runners() {
            let runners = self.runners()?;
            return Ok(runner_view(path, contents, &runners, chrono::Utc::now()));
        }
        let lease = self.daemon_lease()?;
        Ok(view(path, contents, lease, chrono::Utc::now()))
    }

    /// The JSON document of `loops runners --json` and `GET /v1/runners`: every runner
    /// registered recently (live ones first), by the store's clock. A store without
    /// runners (SQLite) has one daemon: it is listed as its one runner while the lease
    /// row names a running or stalled daemon (`epoch` the lease's fencing token,
    /// `labels` empty, `capacity` null: the lease does not record it), else the list
    /// is empty.
    pub fn runners_json(&self) -> Result<serde_json::Value> {
        let mut list = self.runners_json_without_caps()?;
        // Each runner's concurrency caps (`--max-concurrent-per`), null without.
        let caps = self.store().recorded_caps()?;
        if let serde_json::Value::Array(runners) = &mut list {
            for runner in runners {
                let id = runner["runnerId"].as_str().unwrap_or_default().to_owned();
                let mine = caps.iter().find(|(r, _)| *r == id).map(|(_, c)| c.clone());
                runner["caps"] = mine.map_or(serde_json::Value::Null, serde_json::Value::from);
            }
        }
        Ok(list)
    }

    fn runners_json_without_caps(&self) -> Result<serde_json::Value> {
        if self.store_has_runners() {
            let runners = self.runners()?;
            return Ok(serde_json::Value::Array(
                runners.iter().map(runner_json).collect(),
            ));
        }
        let view = self.daemon_view()?;
        let lease = self.daemon_lease()?;
        let now = chrono::Utc::now();
        let list = match (lease, view.holder) {
            (Some(lease), Some(_)) => {
                let running = self.running_runs()?.len();
                let state = if view.state == DaemonState::Running {
                    "live"
                } else {
                    "expired"
                };
                vec![serde_json::json!({
                    "epoch": lease.token,
                    "runnerId": lease.holder.runner_id,
                    "host": lease.holder.host,
                    "pid": lease.holder.pid,
                    "labels": Vec::<String>::new(),
                    "capacity": serde_json::Value::Null,
                    "running": running,
                    "startedAt": format_instant(&lease.acquired_at),
                    "heartbeatAt": format_instant(&lease.heartbeat_at),
                    "heartbeatAgeMs": (now - lease.heartbeat_at).num_milliseconds().max(0),
                    "leaseExpiresAt": format_instant(&lease.expires_at),
                    "lease": state,
                })]
            }
            _ => Vec::new(),
        };
        Ok(serde_json::Value::Array(list))
    }

    /// What `daemon status` reports: the daemon's state, the runs in flight and the
    /// loop due next. Reads only (a stale pid file is reported, not removed).
    pub fn daemon_status(&self) -> Result<DaemonStatus> {
        let view = self.daemon_view()?;
        let running = self.running_runs()?;
        // A row that no longer decodes does not stop the status report.
        let next_due = self.next_due_loop()?;
        let caps = self.store().recorded_caps()?;
        Ok(DaemonStatus {
            view,
            running,
            next_due,
            backend: self.backend().clone(),
            caps,
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
    /// Which database (`backend`, `store` in the JSON).
    pub backend: Backend,
    /// The concurrency caps the daemons (runners) recorded: `(runner id, caps)`.
    pub caps: Vec<(String, String)>,
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
            "backend": self.backend.kind(),
            "store": self.backend.location(),
            "caps": self.caps.iter().map(|(runner, caps)| serde_json::json!({"runnerId": runner, "caps": caps})).collect::<Vec<_>>(),
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
    DaemonView::judged(path, contents, state, holder)
}

/// `live`, `expired` or `released`: a runner's lease state.
pub fn lease_state(r: &RunnerInfo) -> &'static str {
    if r.released {
        "released"
    } else if r.live {
        "live"
    } else {
        "expired"
    }
}

/// One runner in `loops runners --json`.
fn runner_json(r: &RunnerInfo) -> serde_json::Value {
    serde_json::json!({
        "epoch": r.epoch,
        "runnerId": r.runner_id,
        "host": r.host,
        "pid": r.pid,
        "labels": r.labels,
        "capacity": r.capacity,
        "running": r.running,
        "startedAt": format_instant(&r.started_at),
        "heartbeatAt": format_instant(&r.heartbeat_at),
        "heartbeatAgeMs": (r.now - r.heartbeat_at).num_milliseconds().max(0),
        "leaseExpiresAt": format_instant(&r.expires_at),
        "lease": lease_state(r),
    })
}

/// [`view`] on a store with runners: this data dir's daemon is the runner its pid
/// file names, on this host, as its newest runner row confirms (pid, start time,
/// host); live by the store's clock, stalled when its lease expired while its process
/// lives.
fn runner_view(
    path: PathBuf,
    contents: Option<String>,
    runners: &[RunnerInfo],
    now: Instant,
) -> DaemonView {
    let this_host = crate::process::hostname();
    let pid = contents
        .as_deref()
        .and_then(|c| c.trim().parse::<u32>().ok());
    let mine = pid.and_then(|pid| {
        runners
            .iter()
            .filter(|r| r.host == this_host && r.pid == pid && !r.released)
            .max_by_key(|r| r.epoch)
    });
    let holder = match mine {
        Some(r) if is_same_process_alive(r.pid, r.pid_start_time) => Some((
            if r.live {
                DaemonState::Running
            } else {
                DaemonState::Stalled
            },
            Holder {
                pid: r.pid,
                pid_start_time: r.pid_start_time,
                host: r.host.clone(),
                local: true,
                since: r.started_at,
                // By this host's clock: the store's `now` plus the time left.
                expires: now + (r.expires_at - r.now),
            },
        )),
        _ => None,
    };
    let (state, holder) = match holder {
        Some((state, holder)) => (state, Some(holder)),
        None => (DaemonState::Stopped, None),
    };
    // A holder is the process the pid file names: the file is stale without one.
    DaemonView::judged(path, contents, state, holder)
}

/// The text of a pid file: a regular file of a few bytes, read without blocking
/// (`loops_store::user_file`: a FIFO in its place must not hang `daemon status`).
pub(crate) fn pid_file_text(path: &std::path::Path) -> Option<String> {
    let bytes = loops_store::user_file::read_bounded(path, 64).ok()?;
    String::from_utf8(bytes).ok()
}

impl StalePidFile {
    /// Removes the file if it still holds what was read: a daemon that took the lease
    /// since then has written its own pid, which stays.
    pub fn remove(&self) -> bool {
        match pid_file_text(&self.path) {
            Some(now) if now == self.contents => std::fs::remove_file(&self.path).is_ok(),
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
