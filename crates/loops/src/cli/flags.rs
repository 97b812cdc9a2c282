//! Flag groups several commands share: a loop's definition (schedule, policy,
//! target, notify: `create` and `edit`), an agent's provider options, and the one
//! loop a lifecycle verb names.

use crate::cli::{duration, timeout};
use clap::Args;
use loops_core::Duration;
use loops_runtime::definition;

/// The flags of a loop's definition that every target type has, shared by `create`
/// and `edit` (on `edit`, a flag that is not given leaves its part as it is).
#[derive(Debug, Args)]
pub struct DefinitionArgs {
    /// One run at an instant: RFC 3339, local "YYYY-MM-DD HH:MM", or +DURATION.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub at: Option<String>,
    /// Run every DURATION (500ms, 30s, 15m, 1.5h, 2d).
    #[arg(
        long,
        value_name = "DURATION",
        allow_hyphen_values = true,
        value_parser = duration
    )]
    pub every: Option<Duration>,
    /// Five-field cron expression ("*/15 * * * *", "0 9 * * MON-FRI").
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// First run MIN_INTERVAL after creation, then MIN_INTERVAL after each run
    /// finishes (default 1m), no backfill.
    #[arg(long, value_name = "MIN_INTERVAL", num_args = 0..=1, default_missing_value = "1m", value_parser = duration)]
    pub dynamic: Option<Duration>,
    /// IANA time zone for --cron (default: this host's zone); stored canonical
    /// (europe/berlin → Europe/Berlin). Only with --cron.
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Interval anchoring: fixed_rate (default) or fixed_delay. Only with --every.
    #[arg(long, value_name = "ANCHOR")]
    pub anchor: Option<String>,

    /// Missed slots after downtime: latest (default), all, none.
    #[arg(long, value_name = "POLICY")]
    pub catch_up: Option<String>,
    /// Most missed slots replayed with --catch-up all (default 10).
    #[arg(long, value_name = "N")]
    pub catch_up_limit: Option<u32>,
    /// While a run is active: skip (default, records a skipped run) or allow.
    #[arg(long, value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Attempts per slot, including the first (default 1).
    #[arg(long, value_name = "N")]
    pub attempts: Option<u32>,
    /// Delay before retrying a failed slot (default 1m).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub retry_delay: Option<Duration>,
    /// How retries back off: fixed (default: --retry-delay each time) or exponential
    /// (doubling per attempt, full jitter, capped at --retry-delay-max). Rate limits and
    /// overloads wait 4× longer; auth and context-length failures are not retried.
    #[arg(long, value_name = "KIND")]
    pub retry_backoff: Option<String>,
    /// Longest delay before a retry (default 6h).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub retry_delay_max: Option<Duration>,
    /// Park the loop (paused, with the reason, one notification) after N consecutive
    /// failed slots; `resume` starts a fresh streak.
    #[arg(long, value_name = "N")]
    pub max_failures: Option<u32>,
    /// Stop condition: after each successful run, run CMD by /bin/sh in the loop's cwd
    /// with its env (bounded by its timeout, else 10m); exit 0 ends the loop (status
    /// done, with the reason, one notification).
    #[arg(long, value_name = "CMD")]
    pub until_cmd: Option<String>,
    /// Stop condition: the loop ends when a successful run's summary (agents) or
    /// stdout (commands, workflows) matches REGEX (Rust regex syntax).
    #[arg(long, value_name = "REGEX", allow_hyphen_values = true)]
    pub until_output: Option<String>,
    /// Stop condition: the loop ends once N of its slots have ended, whatever their
    /// outcome (`resume` starts a fresh count).
    #[arg(long, value_name = "N")]
    pub max_runs: Option<u32>,
    /// (agent loops) Budget: tokens (input + output) the loop's runs may use per UTC
    /// day or week (`200000/day`); once spent the loop is held until the window resets.
    #[arg(long, value_name = "N/WINDOW")]
    pub budget_tokens: Option<String>,
    /// (agent loops) Budget: US dollars (the reported cost) per UTC day or week
    /// (`5/week`; runs without a cost count 0).
    #[arg(long, value_name = "X/WINDOW")]
    pub budget_usd: Option<String>,
    /// Lease of a running row before it is presumed dead (default 30m).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub lease: Option<Duration>,
    /// Stop scheduling after this instant (status becomes expired).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub expires_at: Option<String>,
    /// Free-text description (at most 4 KiB).
    #[arg(short = 'd', long = "description", value_name = "TEXT")]
    pub description: Option<String>,

    /// Working directory of the run; stored absolute (relative to the current
    /// directory, a leading ~/ is $HOME).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Kill the run after DURATION (omit for no limit).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = timeout)]
    pub timeout: Option<Duration>,
    /// Terminate the run (recorded timed_out, "no output for DURATION") once it printed
    /// nothing on stdout or stderr for DURATION (command and agent loops).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = timeout)]
    pub idle_timeout: Option<Duration>,
    /// Extra environment variable (repeatable, each key once; values at most 64 KiB).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// OpenAccounts profile to run under.
    #[arg(long, value_name = "PROFILE")]
    pub account: Option<String>,
    /// Tool whose credentials the account provides (default from the provider).
    #[arg(long, value_name = "TOOL", requires = "account")]
    pub account_tool: Option<String>,
    /// Check that the target can start (executable on PATH, accounts) before saving.
    #[arg(long)]
    pub preflight: bool,
    /// A label (repeatable): lowercase letters, digits, '.', '_', '-' (≤ 64 bytes).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Run only on a runner advertising this label (`daemon run --runner-label`;
    /// repeatable: a runner with all of them; PostgreSQL stores).
    #[arg(long = "on", value_name = "LABEL")]
    pub runs_on: Vec<String>,
    /// Start each slot a stable pseudo-random delay in [0, DURATION) after its time
    /// (shorter than the loop's period).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub jitter: Option<Duration>,
    #[command(flatten)]
    pub notify: NotifyFlags,
}

/// Where a slot's notifications go: a loop's own (`create`, `edit`) or the store-wide
/// default (`notify set`).
#[derive(Debug, Args)]
pub struct NotifyFlags {
    /// Run this command (by /bin/sh) with the run as JSON on stdin when a slot ends as
    /// --notify-on says (by default: when it failed).
    #[arg(long, value_name = "CMD")]
    pub notify_cmd: Option<String>,
    /// POST the run as JSON to this http(s) URL when a slot ends as --notify-on says.
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
    /// When notifications fire: failure (default: a slot failed on its last attempt),
    /// recovery (the first success after one), changes (both) or always (every
    /// finished slot).
    #[arg(long, value_name = "WHEN")]
    pub notify_on: Option<String>,
}

/// Agent flags shared by `create agent` and `edit`.
#[derive(Debug, Args)]
pub struct AgentOptions {
    /// Model name passed to the provider.
    #[arg(long)]
    pub model: Option<String>,
    /// Provider agent/persona name.
    #[arg(long)]
    pub agent: Option<String>,
    /// codewith auth profile.
    #[arg(long, value_name = "PROFILE")]
    pub auth_profile: Option<String>,
    /// safe (default: ignore user config) or none.
    #[arg(long, value_name = "MODE")]
    pub config_isolation: Option<String>,
    /// Provider config override KEY=VALUE (repeatable, each key once; codex and
    /// codewith, passed as `-c KEY=VALUE`, VALUE parsed as TOML), e.g.
    /// model_provider=mock.
    #[arg(long = "config-override", value_name = "KEY=VALUE")]
    pub config_overrides: Vec<String>,
    /// fresh (default: each run starts a new conversation) or continue (each run
    /// resumes the conversation the previous run reported; claude, codex, opencode).
    #[arg(long, value_name = "MODE")]
    pub session: Option<String>,
    /// Account profiles to run under, comma-separated (instead of --account): each run
    /// takes the least-loaded one no usage limit holds and no cap stops, in pool order
    /// on a tie; a usage limit holds that account only.
    #[arg(
        long,
        value_name = "PROFILES",
        value_delimiter = ',',
        conflicts_with = "account"
    )]
    pub account_pool: Vec<String>,
    /// claude's permission mode: acceptEdits, auto, bypassPermissions, manual,
    /// dontAsk or plan.
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// codex's sandbox: read-only, workspace-write (the default) or
    /// danger-full-access.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
    /// Reasoning effort: claude low, medium, high, xhigh, max; codex low, medium,
    /// high, xhigh, max, ultra (as -c model_reasoning_effort).
    #[arg(long, value_name = "LEVEL")]
    pub effort: Option<String>,
    /// opencode's model variant (provider-specific reasoning effort, e.g. high).
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,
    /// Another directory the agent may use (repeatable; claude, codex).
    #[arg(long = "add-dir", value_name = "DIR")]
    pub add_dirs: Vec<String>,
    /// claude: stop after this many turns.
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// claude: a tool rule the agent may use without asking (repeatable), e.g.
    /// 'Bash(git:*)'.
    #[arg(long = "allow-tool", value_name = "RULE")]
    pub allow_tools: Vec<String>,
    /// claude: a tool rule the agent is denied (repeatable), e.g. WebFetch.
    #[arg(long = "deny-tool", value_name = "RULE")]
    pub deny_tools: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LoopArg {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
}

/// The clap flags as the runtime's plain flags (`loops_runtime::definition`), which
/// the MCP tools fill from their parameters too.
impl DefinitionArgs {
    pub fn flags(&self) -> definition::DefinitionFlags {
        definition::DefinitionFlags {
            at: self.at.clone(),
            every: self.every,
            cron: self.cron.clone(),
            dynamic: self.dynamic,
            tz: self.tz.clone(),
            anchor: self.anchor.clone(),
            catch_up: self.catch_up.clone(),
            catch_up_limit: self.catch_up_limit,
            overlap: self.overlap.clone(),
            attempts: self.attempts,
            retry_delay: self.retry_delay,
            lease: self.lease,
            expires_at: self.expires_at.clone(),
            description: self.description.clone(),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            idle_timeout: self.idle_timeout,
            env: self.env.clone(),
            account: self.account.clone(),
            account_tool: self.account_tool.clone(),
            preflight: self.preflight,
            labels: self.labels.clone(),
            runs_on: self.runs_on.clone(),
            jitter: self.jitter,
            notify_cmd: self.notify.notify_cmd.clone(),
            notify_url: self.notify.notify_url.clone(),
            notify_on: self.notify.notify_on.clone(),
            retry_backoff: self.retry_backoff.clone(),
            retry_delay_max: self.retry_delay_max,
            max_failures: self.max_failures,
            until_cmd: self.until_cmd.clone(),
            until_output: self.until_output.clone(),
            max_runs: self.max_runs,
            budget_tokens: self.budget_tokens.clone(),
            budget_usd: self.budget_usd.clone(),
        }
    }
}

impl AgentOptions {
    pub fn flags(&self) -> definition::AgentOptions {
        definition::AgentOptions {
            model: self.model.clone(),
            agent: self.agent.clone(),
            auth_profile: self.auth_profile.clone(),
            config_isolation: self.config_isolation.clone(),
            config_overrides: self.config_overrides.clone(),
            session: self.session.clone(),
            account_pool: self.account_pool.clone(),
            permission_mode: self.permission_mode.clone(),
            sandbox: self.sandbox.clone(),
            effort: self.effort.clone(),
            variant: self.variant.clone(),
            add_dirs: self.add_dirs.clone(),
            max_turns: self.max_turns,
            allow_tools: self.allow_tools.clone(),
            deny_tools: self.deny_tools.clone(),
        }
    }
}

/// The schedule flags: one of them on `create`, at most one on `edit`.
pub const SCHEDULE_FLAGS: [&str; 4] = ["at", "every", "cron", "dynamic"];
