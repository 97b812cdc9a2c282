//! Status tools: the daemon's status and `doctor`, as the CLI reports them.

use crate::server::{blocking, json, result, LoopsMcp};
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

#[tool_router(router = status_router, vis = "pub(crate)")]
impl LoopsMcp {
    #[tool(
        name = "loops_daemon_status",
        description = "Whether the loops daemon, which runs loops on schedule, is up (like `loops daemon status --json`). Check it when runs do not happen. Returns {state: running|stalled|stopped, running, pid, host, since, uptimeMs, leaseExpiresAt, runningRuns: [runs in flight], nextDue: {id, name, nextRunAt}, stalePidFile}. Without a running daemon nothing runs on schedule; the user starts it with `loops daemon start`.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_daemon_status(&self) -> CallToolResult {
        let client = match self.reader() {
            Ok(client) => client,
            Err(e) => return result(Err(e)),
        };
        result(
            blocking(move || {
                let status = client.daemon_status().map_err(|e| e.to_string())?;
                json(&status.to_json(chrono::Utc::now()))
            })
            .await,
        )
    }

    #[tool(
        name = "loops_doctor",
        description = "Check the installation (like `loops doctor --json`): the data dir and its permissions, the database's integrity, the daemon, every active loop's target (executables on PATH, working dirs, accounts) and which agent CLIs are installed. Use it when loops fail to run. Returns {ok, checks: [{check, status: ok|warn|fail, detail}]}; ok is false when any check failed.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_doctor(&self) -> CallToolResult {
        let dir = self.options().data_dir.clone();
        result(blocking(move || json(&loops_runtime::doctor::doctor(&dir))).await)
    }
}
