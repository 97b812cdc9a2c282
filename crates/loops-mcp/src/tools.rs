//! Every tool, declared once: its name (the function's), its description, its
//! annotations, its input (`p`, a [`crate::params`] struct, when it has one) and the
//! server method that answers it; the tool's result is that method's [`Outcome`] as an
//! MCP result ([`result`]). The methods are the modules' beside this one: loops
//! (`loop_tools`), defining them (`define_tools`), workflows (`workflow_tools`), the
//! status (`status_tools`).
//!
//! `read` tools change nothing (`readOnlyHint`) and reach nothing outside the store;
//! `change` tools say whether they destroy, whether repeating them does nothing more,
//! and whether they reach beyond the store (start processes).
//!
//! [`Outcome`]: crate::server::Outcome

use crate::params::{
    CancelParams, CreateAgentParams, CreateCommandParams, CreateWorkflowParams, EditParams,
    HealthParams, HoldsClearParams, InspectParams, ListParams, LoopParams, RemoveParams,
    RunNowParams, RunsParams, ShowParams, UsageParams, ValidateParams, WorkflowParams,
    WorkflowRunParams, WorkflowsListParams,
};
use crate::server::{result, LoopsMcp};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

/// Declares the tools: `read` or `change(…)`, then `name(p: Params) =>
/// method(args), "description";` for each, into the one `#[tool_router]` impl
/// ([`LoopsMcp::tool_router`]).
macro_rules! tools {
    // Every tool declared: the router.
    (@tools [$($done:tt)*]) => {
        #[tool_router(router = tool_router, vis = "pub(crate)")]
        impl LoopsMcp {
            $($done)*
        }
    };
    (@tools $done:tt read $($rest:tt)*) => {
        tools! { @tool $done [read_only_hint = true, open_world_hint = false] $($rest)* }
    };
    (@tools $done:tt
        change(destructive = $destructive:tt, idempotent = $idempotent:tt, open_world = $open:tt)
        $($rest:tt)*
    ) => {
        tools! { @tool $done [
            read_only_hint = false,
            destructive_hint = $destructive,
            idempotent_hint = $idempotent,
            open_world_hint = $open
        ] $($rest)* }
    };
    (@tool [$($done:tt)*] [$($hints:tt)*]
        $tool:ident($($p:ident: $params:ident)?) => $method:ident($($arg:tt)*),
        $description:literal;
        $($rest:tt)*
    ) => {
        tools! { @tools [$($done)*
            #[tool(description = $description, annotations($($hints)*))]
            async fn $tool(&self, $(Parameters($p): Parameters<$params>)?) -> CallToolResult {
                result(self.$method($($arg)*).await)
            }
        ] $($rest)* }
    };
    (tools: $($tools:tt)*) => {
        tools! { @tools [] $($tools)* }
    };
}

tools! {
    tools:
    // Loops (`loop_tools`).
    read
    loops_list(p: ListParams) => list(p),
        "List the scheduled loops (like `loops list --json`). Use it first to see what exists, to find a loop's exact name or id, or to check statuses. Archived loops are hidden unless all: true; labels filters by labels (all of them). Returns a JSON array of loops by name, each with id, name, status (active, paused, stopped, expired, done, archived; done: a stop condition ended it, statusReason says which), schedule, target (command, agent or workflow), policy fields, labels, nextRunAt and timestamps. Prompts and env values are redacted.";

    read
    loops_show(p: ShowParams) => show(p),
        "Show one loop in full (like `loops show --json`): its schedule, target, policy, labels, notification settings, next slot and status. Use it to inspect a loop before changing it or to check when it runs next. `loop` is an exact id, an exact name, or an unambiguous id prefix. Returns one JSON loop object; prompt and env values are redacted unless showOutput is allowed.";

    read
    loops_runs(p: RunsParams) => runs(p),
        "List runs (attempts at a loop's slots), newest first (like `loops runs --json`). Use it to see whether a loop ran, succeeded or failed, and why: each run has id, loopId, loopName, scheduledFor, attempt, status (running, succeeded, failed, timed_out, abandoned, skipped), startedAt, finishedAt, durationMs, exitCode, error, for agents summary and usage, and notifications (their deliveries). Filter by loop, status (any of), labels, since/until (\"1d\" ago or an instant). The run's output — stdout, stderr, an agent's summary, errorOutput (what a failure quoted from the output; error itself is our words) — is replaced by its size unless showOutput is allowed. Default 20 runs; limit 0 for all.";

    change(destructive = false, idempotent = true, open_world = false)
    loops_pause(p: LoopParams) => lifecycle("loops_pause", p.key, |c, key, now| c.pause(key, now)),
        "Pause a loop: it is not scheduled until loops_resume; its next slot is kept. A run in flight finishes. Returns the loop as changed (status paused). Needs a server started with --allow-mutations.";

    change(destructive = false, idempotent = true, open_world = false)
    loops_resume(p: LoopParams) => lifecycle("loops_resume", p.key, |c, key, now| c.resume(key, now)),
        "Re-activate a paused or stopped loop. A slot missed meanwhile runs as its catch-up policy says (latest: once; all: each, bounded; none: skipped). Returns the loop as changed (status active, nextRunAt). Needs a server started with --allow-mutations.";

    change(destructive = false, idempotent = true, open_world = false)
    loops_stop(p: LoopParams) => lifecycle("loops_stop", p.key, |c, key, now| c.stop(key, now)),
        "Stop a loop: it is no longer scheduled (until an explicit loops_resume) but stays listed with its run history. Does not terminate a run in flight. Returns the loop as changed (status stopped). Needs a server started with --allow-mutations.";

    change(destructive = true, idempotent = false, open_world = false)
    loops_remove(p: RemoveParams) => remove(p),
        "Delete a loop and its whole run history, for good. Prefer loops_stop to keep the history. Requires confirm: true; a loop with a run in flight is refused unless force: true, which terminates that run first. Returns {removed: true, id, name}. Needs a server started with --allow-mutations.";

    change(destructive = false, idempotent = false, open_world = true)
    loops_run_now(p: RunNowParams) => run_now(p),
        "Run a loop now, in the MCP server's process: its due slot (or pending retry) when one is due, which moves the schedule on, else a one-off ad-hoc run that leaves the schedule alone. Returns at once with the run (id, status running) and runNow {source, advancesLoop}; follow it with loops_runs. With wait: true it waits up to waitTimeout (default 60s, at most 10m) and returns the run as recorded (succeeded, failed, timed_out, …). Needs a server started with --allow-mutations.";

    // Defining loops (`define_tools`).
    change(destructive = false, idempotent = false, open_world = true)
    loops_create_command(p: CreateCommandParams) => create_command(p),
        "Create a loop that runs a command on a schedule (like `loops create command NAME --json`), e.g. to schedule follow-up work: give name, cmd, and exactly one schedule (at, every, cron or dynamic). A cmd alone runs by /bin/sh, as in the CLI; with args (or noShell: true) it is argv: the program in cmd, its arguments in args. Returns the created loop (id, nextRunAt, …). The loops daemon must be running for it to run on schedule (see loops_daemon_status). Defining a command is code execution: needs a server started with --allow-code.";

    change(destructive = false, idempotent = false, open_world = true)
    loops_create_agent(p: CreateAgentParams) => create_agent(p),
        "Create a loop that runs a headless AI coding agent (claude, codex, opencode, cursor, codewith, aicopilot) with a prompt on a schedule (like `loops create agent NAME --json`): give name, provider, prompt (or promptFile) and exactly one schedule (at, every, cron or dynamic); cwd is where the agent works. Returns the created loop, prompt redacted. An agent acts on its prompt (a coding agent runs commands), so this is code execution: needs a server started with --allow-code.";

    change(destructive = false, idempotent = false, open_world = true)
    loops_create_workflow(p: CreateWorkflowParams) => create_workflow(p),
        "Create a loop that runs a stored workflow on a schedule (like `loops create workflow NAME --workflow WF --json`): give name, workflow (an active workflow's name, see workflows_list) and exactly one schedule (at, every, cron or dynamic). Returns the created loop. Needs a server started with --allow-mutations (it schedules a workflow already stored; notifyCmd and untilCmd need --allow-code, notifyUrl --allow-secrets).";

    change(destructive = false, idempotent = true, open_world = true)
    loops_edit(p: EditParams) => edit(p),
        "Change a loop in place (like `loops edit LOOP --json`), keeping its id and run history: only the fields given change — a new schedule (at most one of at, every, cron, dynamic), policy, labels (added; unlabel removes), on, the runner labels (added; clear \"on\" removes), env (added; unsetEnv removes), clear to unset settings, and the target's own fields (cmd/args for command loops, prompt/model/… for agent loops, workflow for workflow loops; a target's type cannot change). A run in flight is left alone. Returns the loop as changed. Needs a server started with --allow-mutations for the schedule, policy, labels, description, timeout and a workflow loop's workflow; anything else that changes what runs (cmd, args, shell, the agent's fields, env, cwd, account, notifyCmd, untilCmd) is code execution and needs --allow-code; notifyUrl needs --allow-secrets.";

    // Workflows (`workflow_tools`).
    read
    workflows_list(p: WorkflowsListParams) => workflows_list_impl(p),
        "List stored workflows (DAGs of steps), like `loops workflows list --json`: active ones by default, archived versions with all: true or status: archived. Returns a JSON array; each workflow has id, name, version, status, createdAt and its spec's fields (description, maxParallel, steps with id, dependsOn and a command or agent target). Prompts and env values are redacted.";

    read
    workflow_show(p: WorkflowParams) => workflow_show_impl(p),
        "Show one stored workflow (like `loops workflows show --json`): its steps, their dependencies and targets. `workflow` is an exact id, an active workflow's exact name, or an unambiguous id prefix. Returns one JSON workflow object; prompts and env values are redacted.";

    read
    workflow_validate(p: ValidateParams) => workflow_validate_impl(p),
        "Check a workflow spec without storing it (like `loops workflows validate --json`): from a JSON file (`file`) or given inline (`spec`). Use it before asking the user to store a workflow. Returns {valid: true, name, steps: <count>}; an invalid spec is a tool error naming the problem (e.g. `steps[1].dependsOn: unknown step \"x\"`).";

    change(destructive = false, idempotent = false, open_world = true)
    workflow_run(p: WorkflowRunParams) => workflow_run_impl(p),
        "Start a run of a stored workflow now, in the MCP server's process, and return once it has started (detached): {workflowRun: {id, status: running, …}, steps}. Follow it with workflow_run_inspect; stop it with workflow_cancel. With wait: true it waits up to waitTimeout (default 60s, at most 10m) for the end. Needs a server started with --allow-mutations.";

    read
    workflow_run_inspect(p: InspectParams) => workflow_run_inspect_impl(p),
        "Inspect one workflow run (like `loops workflows inspect --json`): {workflowRun: {id, workflowName, status, attempt, startedAt, durationMs, error, …}, steps: [{stepId, status, exitCode, durationMs, error, summary, …}], events: [the run's event log]}. The steps' output — stdout, stderr, summary, errorOutput — is replaced by its size unless showOutput is allowed.";

    change(destructive = true, idempotent = false, open_world = false)
    workflow_cancel(p: CancelParams) => workflow_cancel_impl(p),
        "Ask a running workflow run to stop (like `loops workflows cancel --json`), from whichever process runs it: its running steps are terminated and the rest cancelled within about a second. Returns the workflow run with the cancellation requested. A run that is not running is refused. Needs a server started with --allow-mutations.";

    // The status (`status_tools`).
    read
    loops_daemon_status() => read(|c| Ok(c.daemon_status()?.to_json(chrono::Utc::now()))),
        "Whether the loops daemon, which runs loops on schedule, is up (like `loops daemon status --json`). Check it when runs do not happen. Returns {state: running|stalled|stopped, running, pid, host, since, uptimeMs, leaseExpiresAt, runningRuns: [runs in flight], nextDue: {id, name, nextRunAt}, stalePidFile}. Without a running daemon nothing runs on schedule; the user starts it with `loops daemon start`.";

    read
    loops_doctor() => doctor(),
        "Check the installation (like `loops doctor --json`): the data dir and its permissions, the database's integrity, the daemon, every active loop's target (executables on PATH, working dirs, accounts) and which agent CLIs are installed. Use it when loops fail to run. Returns {ok, checks: [{check, status: ok|warn|fail, detail}]}; ok is false when any check failed.";

    read
    loops_health(p: HealthParams) => health(p),
        "Judge every active (or parked) loop (like `loops health --json`): is it running as scheduled and succeeding? Use it to check on loops you scheduled. Returns {verdict: ok|warn|fail (the worst), at, counts: {ok, warn, fail}, loops: [{loopId, loopName, status, verdict, reasons: [why], lastRunAt, lastSuccessAt, …}]}. Fail: parked, 3 failed attempts in a row, or no success in 3 periods; warn: recent failures, skipped or missed slots, overdue.";

    read
    loops_usage(p: UsageParams) => usage(p),
        "Tokens and cost that agent runs and agent workflow steps reported (like `loops usage --json`), for runs finished in the last `since` (default 7d), grouped by loop, provider or day. Returns {by, since, groups: [{key, totals: {runs, steps, inputTokens, outputTokens, costUsd, unpriced}}], total}.";

    read
    loops_holds() => read(|c| c.holds()),
        "Accounts held by a usage limit (like `loops holds --json`): while held, no agent loop on that provider and account is started; they resume by themselves when the hold ends. Returns [{provider, account, heldUntil, reason, since, probes, notified, updatedAt}]; a hold whose heldUntil passed stops nothing and waits for a run to show the limit is gone.";

    read
    loops_budgets() => read(|c| c.all_budget_status(chrono::Utc::now())),
        "Every budget against its spend in its current UTC day or week (like the budgets of `loops usage --json`): each loop's own (budgetTokens, budgetUsd) and the store-wide ones per provider and account. Returns [{scope, metric, window, limit, spent, percent, unpriced, windowStart, resetsAt, spentOut}]; a spent budget holds its loops (heldUntil, heldReason on the loop) until resetsAt.";

    change(destructive = false, idempotent = true, open_world = false)
    loops_holds_clear(p: HoldsClearParams) => holds_clear(p),
        "Release the usage-limit hold of a provider (on one account, or all of its accounts), for when the user knows the limit was lifted: its loops are due again at once. Returns the holds released. Needs a server started with --allow-mutations.";
}
