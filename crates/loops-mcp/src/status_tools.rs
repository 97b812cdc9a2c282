//! Status tools: the daemon's status, `doctor`, `health` and `usage`, as the CLI
//! reports them.

use crate::params::{HealthParams, HoldsClearParams, UsageParams};
use crate::server::{blocking, json, result, LoopsMcp, Outcome};
use loops_core::usage::GroupBy;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

/// `usage`'s window when `since` is not given (as `loops usage`).
const DEFAULT_USAGE_SINCE: &str = "7d";

#[tool_router(router = status_router, vis = "pub(crate)")]
impl LoopsMcp {
    #[tool(
        name = "loops_daemon_status",
        description = "Whether the loops daemon, which runs loops on schedule, is up (like `loops daemon status --json`). Check it when runs do not happen. Returns {state: running|stalled|stopped, running, pid, host, since, uptimeMs, leaseExpiresAt, runningRuns: [runs in flight], nextDue: {id, name, nextRunAt}, stalePidFile}. Without a running daemon nothing runs on schedule; the user starts it with `loops daemon start`.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_daemon_status(&self) -> CallToolResult {
        result(
            self.read(|c| Ok(c.daemon_status()?.to_json(chrono::Utc::now())))
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
        let store = self.options().store.clone();
        result(blocking(move || json(&loops_runtime::doctor::doctor(&dir, store.as_deref()))).await)
    }

    #[tool(
        name = "loops_health",
        description = "Judge every active (or parked) loop (like `loops health --json`): is it running as scheduled and succeeding? Use it to check on loops you scheduled. Returns {verdict: ok|warn|fail (the worst), at, counts: {ok, warn, fail}, loops: [{loopId, loopName, status, verdict, reasons: [why], lastRunAt, lastSuccessAt, …}]}. Fail: parked, 3 failed attempts in a row, or no success in 3 periods; warn: recent failures, skipped or missed slots, overdue.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_health(&self, Parameters(p): Parameters<HealthParams>) -> CallToolResult {
        result(self.health(p).await)
    }

    #[tool(
        name = "loops_usage",
        description = "Tokens and cost that agent runs and agent workflow steps reported (like `loops usage --json`), for runs finished in the last `since` (default 7d), grouped by loop, provider or day. Returns {by, since, groups: [{key, totals: {runs, steps, inputTokens, outputTokens, costUsd, unpriced}}], total}.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_usage(&self, Parameters(p): Parameters<UsageParams>) -> CallToolResult {
        result(self.usage(p).await)
    }

    #[tool(
        name = "loops_holds",
        description = "Accounts held by a usage limit (like `loops holds --json`): while held, no agent loop on that provider and account is started; they resume by themselves when the hold ends. Returns [{provider, account, heldUntil, reason, since, probes, notified, updatedAt}]; a hold whose heldUntil passed stops nothing and waits for a run to show the limit is gone.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_holds(&self) -> CallToolResult {
        result(self.read(|c| c.holds()).await)
    }

    #[tool(
        name = "loops_budgets",
        description = "Every budget against its spend in its current UTC day or week (like the budgets of `loops usage --json`): each loop's own (budgetTokens, budgetUsd) and the store-wide ones per provider and account. Returns [{scope, metric, window, limit, spent, percent, unpriced, windowStart, resetsAt, spentOut}]; a spent budget holds its loops (heldUntil, heldReason on the loop) until resetsAt.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn loops_budgets(&self) -> CallToolResult {
        result(self.read(|c| c.all_budget_status(chrono::Utc::now())).await)
    }

    #[tool(
        name = "loops_holds_clear",
        description = "Release the usage-limit hold of a provider (on one account, or all of its accounts), for when the user knows the limit was lifted: its loops are due again at once. Returns the holds released. Needs a server started with --allow-mutations.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn loops_holds_clear(
        &self,
        Parameters(p): Parameters<HoldsClearParams>,
    ) -> CallToolResult {
        result(self.holds_clear(p).await)
    }
}

impl LoopsMcp {
    async fn health(&self, p: HealthParams) -> Outcome {
        let client = self.reader()?;
        blocking(move || {
            let report = client
                .health(chrono::Utc::now(), &p.labels)
                .map_err(|e| e.to_string())?;
            json(&report.json())
        })
        .await
    }

    async fn holds_clear(&self, p: HoldsClearParams) -> Outcome {
        self.mutation("loops_holds_clear")?;
        let provider: loops_core::Provider = p.provider.parse()?;
        self.write(move |c| c.clear_holds(provider, p.account.as_deref()))
            .await
    }

    async fn usage(&self, p: UsageParams) -> Outcome {
        let window =
            crate::flags::duration("--since", p.since.as_deref().unwrap_or(DEFAULT_USAGE_SINCE))?;
        let by: GroupBy = p.by.as_deref().unwrap_or("loop").parse()?;
        let since = chrono::Utc::now() - window.to_chrono();
        self.read(move |c| c.usage(since, by)).await
    }
}
