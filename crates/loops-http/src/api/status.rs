//! `/v1/daemon`: whether the store's daemon runs (`loops daemon status`).

use super::blocking;
use crate::error::{ApiError, ErrorBody};
use crate::request::Params;
use crate::State;
use axum::extract::RawQuery;
use axum::Json;
use loops_core::{format_instant, Run};
use serde::Serialize;

/// `loops daemon status --json`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonStatusDocument {
    /// `running`, `stalled` (holds the lease, does not schedule) or `stopped`.
    pub state: String,
    pub running: bool,
    pub pid: Option<u32>,
    pub host: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
    pub uptime_ms: Option<i64>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub lease_expires_at: Option<String>,
    pub running_runs: Vec<Run>,
    pub next_due: Option<NextDue>,
    pub stale_pid_file: bool,
}

/// The loop due soonest.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextDue {
    pub id: String,
    pub name: String,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_run_at: Option<String>,
}

/// The daemon's state, the runs in flight and the loop due next.
#[utoipa::path(get, path = "/v1/daemon", tag = "status",
    responses(
        (status = 200, description = "`loops daemon status --json`.", body = DaemonStatusDocument),
        (status = 401, description = "No or a wrong token.", body = ErrorBody),
    ))]
pub(crate) async fn daemon(
    axum::extract::State(state): axum::extract::State<State>,
    RawQuery(q): RawQuery,
) -> Result<Json<DaemonStatusDocument>, ApiError> {
    Params::parse(q.as_deref(), &[])?;
    let doc = blocking(&state, |c| {
        let now = chrono::Utc::now();
        let pid_file = std::fs::read_to_string(c.data_dir().join(loops_runtime::daemon::PID_FILE))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        let pid_file_exists = c.data_dir().join(loops_runtime::daemon::PID_FILE).exists();
        let lease = c.daemon_lease()?;
        let this_host = loops_runtime::process::hostname();
        let (state, holder) = match lease {
            None => ("stopped", None),
            Some(lease) => {
                let local = lease.holder.host == this_host;
                let current = lease.expires_at > now;
                let state = if local {
                    if !loops_runtime::process::is_same_process_alive(
                        lease.holder.pid,
                        lease.holder.pid_start_time,
                    ) {
                        "stopped"
                    } else if current {
                        "running"
                    } else {
                        "stalled"
                    }
                } else if current {
                    "running"
                } else {
                    "stopped"
                };
                (state, (state != "stopped").then_some(lease))
            }
        };
        let stale = pid_file_exists
            && !matches!((&holder, pid_file), (Some(h), Some(p)) if h.holder.pid == p);
        let running = c.running_runs()?;
        let next_due = c.next_due_loop()?;
        Ok(DaemonStatusDocument {
            state: state.to_owned(),
            running: holder.is_some(),
            pid: holder.as_ref().map(|h| h.holder.pid),
            host: holder.as_ref().map(|h| h.holder.host.clone()),
            since: holder.as_ref().map(|h| format_instant(&h.acquired_at)),
            uptime_ms: holder
                .as_ref()
                .map(|h| (now - h.acquired_at).num_milliseconds().max(0)),
            lease_expires_at: holder.as_ref().map(|h| format_instant(&h.expires_at)),
            running_runs: running,
            next_due: next_due.map(|l| NextDue {
                id: l.id.to_string(),
                name: l.name,
                next_run_at: l.next_run_at.map(|t| format_instant(&t)),
            }),
            stale_pid_file: stale,
        })
    })
    .await?;
    Ok(Json(doc))
}
