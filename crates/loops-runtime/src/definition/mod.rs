//! Flags → a loop's [`LoopDefinition`], shared by `create` and `edit` and by every
//! front end (the CLI's flags, the MCP tools' parameters): each function lays the
//! flags that were given over a base — the defaults on `create`, the stored loop on
//! `edit` — so every verb accepts the same flags with the same messages, which name
//! the CLI's flags (`invalid --catch-up "x": expected …`). Everything here runs before
//! the store is touched; the checks of the definition as a whole are the client's
//! ([`crate::Client::create`], [`crate::Client::edit`]). A refusal is its one-line
//! message: invalid input (the CLI's exit 2).

use crate::client::LoopDefinition;
use crate::input::{absolute_path, read_text};
use crate::timeparse::parse_instant;
use loops_core::budget::{Budget, BudgetMetric};
use loops_core::cron::CronSchedule;
use loops_core::limits::MAX_PROMPT_BYTES;
use loops_core::provider_options::ProviderOption;
use loops_core::Duration;
use loops_core::Loop;
use loops_core::Target;
use loops_core::{
    Account, AgentTarget, Anchor, CommandTarget, ConfigIsolation, Instant, Notify, NotifyOn,
    Policy, Provider, Schedule, WorkflowTarget,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

mod edit;
mod targets;

pub use edit::{edited, ClearField, EditFlags};
pub use targets::{
    agent_target, command_target, workflow_target, AgentFlags, CommandFlags, WorkflowFlags,
};

/// The flags of a loop's definition that every target type has (the CLI's
/// `create`/`edit` flags of the same names; durations already parsed). `None` and
/// empty lists leave that part as it is.
#[derive(Debug, Clone, Default)]
pub struct DefinitionFlags {
    /// One run at an instant: RFC 3339, local "YYYY-MM-DD HH:MM", or +DURATION.
    pub at: Option<String>,
    pub every: Option<Duration>,
    /// Five-field cron expression.
    pub cron: Option<String>,
    /// Minimum interval of a dynamic schedule.
    pub dynamic: Option<Duration>,
    pub tz: Option<String>,
    pub anchor: Option<String>,
    pub catch_up: Option<String>,
    pub catch_up_limit: Option<u32>,
    pub overlap: Option<String>,
    pub attempts: Option<u32>,
    pub retry_delay: Option<Duration>,
    pub lease: Option<Duration>,
    pub expires_at: Option<String>,
    pub description: Option<String>,
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
    /// Terminate the run after this long without output (command and agent loops).
    pub idle_timeout: Option<Duration>,
    /// `K=V` pairs, each key once.
    pub env: Vec<String>,
    pub account: Option<String>,
    pub account_tool: Option<String>,
    pub preflight: bool,
    pub labels: Vec<String>,
    /// Runner labels the loop requires (`--on`, added).
    pub runs_on: Vec<String>,
    pub jitter: Option<Duration>,
    pub notify_cmd: Option<String>,
    pub notify_url: Option<String>,
    pub notify_on: Option<String>,
    /// `fixed` or `exponential`.
    pub retry_backoff: Option<String>,
    pub retry_delay_max: Option<Duration>,
    pub max_failures: Option<u32>,
    /// Stop conditions (`loops_core::stop`).
    pub until_cmd: Option<String>,
    pub until_output: Option<String>,
    pub max_runs: Option<u32>,
    /// Budgets (`loops_core::budget`): `N/day|week` tokens, `X/day|week` dollars.
    pub budget_tokens: Option<String>,
    pub budget_usd: Option<String>,
}

/// The agent target's own flags (`--model`, `--agent`, `--auth-profile`,
/// `--config-isolation`, `--config-override`, `--session`).
#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    pub model: Option<String>,
    pub agent: Option<String>,
    pub auth_profile: Option<String>,
    pub config_isolation: Option<String>,
    /// `KEY=VALUE` pairs, each key once.
    pub config_overrides: Vec<String>,
    /// `fresh` or `continue` ([`loops_core::SessionMode`]).
    pub session: Option<String>,
    /// `--account-pool`: account profiles a run may take (instead of `--account`).
    pub account_pool: Vec<String>,
    /// The provider options ([`loops_core::provider_options`]); the lists are added
    /// to (`edit --clear add-dirs` empties one first).
    pub permission_mode: Option<String>,
    pub sandbox: Option<String>,
    pub effort: Option<String>,
    pub variant: Option<String>,
    /// As typed: made absolute like `--cwd`.
    pub add_dirs: Vec<String>,
    pub max_turns: Option<u32>,
    pub allow_tools: Vec<String>,
    pub deny_tools: Vec<String>,
}

impl AgentOptions {
    /// The first provider option flag given, if any (an edit of a loop of another
    /// type names it).
    fn provider_option_given(&self) -> Option<&'static str> {
        use loops_core::provider_options::ProviderOption as P;
        [
            (P::PermissionMode, self.permission_mode.is_some()),
            (P::Sandbox, self.sandbox.is_some()),
            (P::Effort, self.effort.is_some()),
            (P::Variant, self.variant.is_some()),
            (P::AddDir, !self.add_dirs.is_empty()),
            (P::MaxTurns, self.max_turns.is_some()),
            (P::AllowTool, !self.allow_tools.is_empty()),
            (P::DenyTool, !self.deny_tools.is_empty()),
        ]
        .into_iter()
        .find(|(_, given)| *given)
        .map(|(option, _)| option.flag())
    }

    /// Lays the provider options over `t` (validation then checks them against the
    /// provider).
    fn apply_provider_options(&self, t: &mut AgentTarget) -> Result<(), String> {
        for (value, field) in [
            (&self.permission_mode, &mut t.permission_mode),
            (&self.sandbox, &mut t.sandbox),
            (&self.effort, &mut t.effort),
            (&self.variant, &mut t.variant),
        ] {
            if let Some(v) = value {
                *field = Some(v.clone());
            }
        }
        if self.max_turns.is_some() {
            t.max_turns = self.max_turns;
        }
        let mut dirs = Vec::with_capacity(self.add_dirs.len());
        for dir in &self.add_dirs {
            dirs.push(if dir.trim().is_empty() {
                dir.clone()
            } else {
                absolute_path(dir, None, "--add-dir")?
            });
        }
        for (given, list) in [
            (&dirs, &mut t.add_dirs),
            (&self.allow_tools, &mut t.allow_tools),
            (&self.deny_tools, &mut t.deny_tools),
        ] {
            for value in given {
                if !list.contains(value) {
                    list.push(value.clone());
                }
            }
        }
        Ok(())
    }
}

/// Lays the flags every target type has, but the schedule's ([`schedule`]), over
/// `def`: policy, description, labels (added), notification settings. The target's
/// flags are the target functions' ([`command_target`], [`agent_target`],
/// [`workflow_target`]).
pub fn apply(def: &mut LoopDefinition, c: &DefinitionFlags, now: Instant) -> Result<(), String> {
    def.policy = policy(def.policy.clone(), c, now)?;
    if let Some(d) = &c.description {
        def.description = Some(d.clone());
    }
    def.labels.extend(c.labels.iter().cloned());
    def.policy.runs_on.extend(c.runs_on.iter().cloned());
    def.notify = notify(def.notify.take(), c)?;
    Ok(())
}

/// The definition `create` makes of a name, a target and the flags: the flags'
/// schedule (one is required) and the flags every target type has laid over the
/// defaults ([`apply`]). One place, so every front end creates the same loop.
pub fn created(
    name: String,
    target: Target,
    c: &DefinitionFlags,
    now: Instant,
) -> Result<LoopDefinition, String> {
    let schedule = schedule(c, None, now)?
        .ok_or("a schedule is required: --at, --every, --cron or --dynamic")?;
    let mut def = LoopDefinition {
        name,
        description: None,
        schedule,
        target,
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
    };
    apply(&mut def, c, now)?;
    Ok(def)
}

/// The schedule the flags give, if any. `current` is the schedule being edited: then
/// `--tz` alone moves a cron loop to another zone and `--anchor` alone re-anchors an
/// interval, `--cron` keeps the loop's zone and `--every` its anchor.
pub fn schedule(
    c: &DefinitionFlags,
    current: Option<&Schedule>,
    now: Instant,
) -> Result<Option<Schedule>, String> {
    let given = c.at.is_some() || c.every.is_some() || c.cron.is_some() || c.dynamic.is_some();
    // clap's `requires` cannot say this: the schedule flags conflict with each other,
    // and clap counts a required flag that conflicts with a given one as satisfied.
    if c.tz.is_some() && c.cron.is_none() {
        return match (given, current, &c.tz) {
            (false, Some(Schedule::Cron { expression, .. }), Some(tz)) => {
                cron(expression, tz.clone()).map(Some)
            }
            _ => Err("--tz is for --cron (other schedules do not use a time zone)".to_owned()),
        };
    }
    if c.anchor.is_some() && c.every.is_none() {
        return match (given, current, &c.anchor) {
            (false, Some(Schedule::Interval { every_ms, .. }), Some(a)) => {
                Ok(Some(Schedule::Interval {
                    every_ms: *every_ms,
                    anchor: parse_enum::<Anchor>("--anchor", a)?,
                }))
            }
            _ => Err("--anchor is for --every".to_owned()),
        };
    }
    if let Some(at) = &c.at {
        let at = parse_instant("--at", at, now)?;
        if at <= now {
            return Err(format!(
                "--at {} is in the past; use `loops run-now` to run immediately",
                loops_core::format_instant(&at)
            ));
        }
        return Ok(Some(Schedule::Once { at }));
    }
    if let Some(every) = c.every {
        let anchor = match (&c.anchor, current) {
            (Some(a), _) => parse_enum::<Anchor>("--anchor", a)?,
            (None, Some(Schedule::Interval { anchor, .. })) => *anchor,
            (None, _) => Anchor::DEFAULT,
        };
        return Ok(Some(Schedule::Interval {
            every_ms: every.as_millis(),
            anchor,
        }));
    }
    if let Some(expression) = &c.cron {
        let timezone = match (&c.tz, current) {
            (Some(tz), _) => tz.clone(),
            (None, Some(Schedule::Cron { timezone, .. })) => timezone.clone(),
            (None, _) => local_zone(),
        };
        return cron(expression, timezone).map(Some);
    }
    if let Some(min) = c.dynamic {
        return Ok(Some(Schedule::Dynamic {
            min_interval_ms: min.as_millis(),
        }));
    }
    Ok(None)
}

fn cron(expression: &str, timezone: String) -> Result<Schedule, String> {
    CronSchedule::parse(expression, &timezone).map_err(|e| e.to_string())?;
    Ok(Schedule::Cron {
        expression: expression.trim().to_owned(),
        timezone,
    })
}

/// The host's IANA zone: `$TZ` when it names one, else the system setting, else UTC.
pub fn local_zone() -> String {
    if let Ok(tz) = std::env::var("TZ") {
        let tz = tz.trim_start_matches(':');
        if loops_core::cron::parse_timezone(tz).is_ok() {
            return tz.to_owned();
        }
    }
    iana_time_zone::get_timezone()
        .ok()
        .filter(|tz| loops_core::cron::parse_timezone(tz).is_ok())
        .unwrap_or_else(|| "UTC".to_owned())
}

/// The policy flags laid over `p`.
pub fn policy(mut p: Policy, c: &DefinitionFlags, now: Instant) -> Result<Policy, String> {
    if let Some(v) = &c.catch_up {
        p.catch_up = parse_enum("--catch-up", v)?;
    }
    if let Some(n) = c.catch_up_limit {
        p.catch_up_limit = n;
    }
    if let Some(v) = &c.overlap {
        p.overlap = parse_enum("--overlap", v)?;
    }
    if let Some(n) = c.attempts {
        p.max_attempts = n;
    }
    if let Some(v) = c.retry_delay {
        p.retry_delay_ms = v.as_millis();
    }
    if let Some(v) = c.lease {
        p.lease_ms = v.as_millis();
    }
    if let Some(v) = &c.expires_at {
        p.expires_at = Some(parse_instant("--expires-at", v, now)?);
    }
    if let Some(v) = c.jitter {
        p.jitter_ms = v.as_millis();
    }
    if let Some(v) = &c.retry_backoff {
        p.ops.retry_backoff = parse_enum("--retry-backoff", v)?;
    }
    if let Some(v) = c.retry_delay_max {
        p.ops.retry_delay_max_ms = v.as_millis();
    }
    if let Some(n) = c.max_failures {
        p.ops.max_failures = Some(n);
    }
    if let Some(cmd) = &c.until_cmd {
        p.ops.until_cmd = Some(cmd.clone());
    }
    if let Some(pattern) = &c.until_output {
        p.ops.until_output = Some(pattern.clone());
    }
    if let Some(n) = c.max_runs {
        p.ops.max_runs = Some(n);
    }
    if let Some(text) = &c.budget_tokens {
        p.ops.budget_tokens = Some(Budget::parse(
            BudgetMetric::Tokens,
            text,
            "--budget-tokens",
        )?);
    }
    if let Some(text) = &c.budget_usd {
        p.ops.budget_usd = Some(Budget::parse(BudgetMetric::Usd, text, "--budget-usd")?);
    }
    Ok(p)
}

/// `--notify-cmd` / `--notify-url` / `--notify-on` laid over `base`; `--notify-on`
/// without a command or URL (given or kept) is refused.
pub fn notify(base: Option<Notify>, c: &DefinitionFlags) -> Result<Option<Notify>, String> {
    let on = c
        .notify_on
        .as_deref()
        .map(|v| parse_enum::<NotifyOn>("--notify-on", v))
        .transpose()?;
    let mut n = base.unwrap_or(Notify {
        cmd: None,
        url: None,
        on: NotifyOn::DEFAULT,
    });
    if let Some(cmd) = &c.notify_cmd {
        n.cmd = Some(cmd.clone());
    }
    if let Some(url) = &c.notify_url {
        n.url = Some(url.clone());
    }
    if n.cmd.is_none() && n.url.is_none() {
        if on.is_some() {
            return Err("--notify-on needs --notify-cmd or --notify-url".to_owned());
        }
        return Ok(None);
    }
    if let Some(on) = on {
        n.on = on;
    }
    Ok(Some(n))
}

/// An enum flag's value: "invalid Provider \"x\": expected …" becomes "invalid
/// --provider \"x\": expected …".
pub fn parse_enum<T: FromStr<Err = String>>(flag: &str, text: &str) -> Result<T, String> {
    T::from_str(text).map_err(|e| {
        let rest = e.split_once(' ').map(|(_, r)| r).unwrap_or(&e);
        let rest = rest.split_once(' ').map(|(_, r)| r).unwrap_or(rest);
        format!("invalid {flag} {rest}")
    })
}

/// Checks that the target could start now: its executable resolves on the effective
/// PATH and a working directory exists (for a workflow target: the workflow is active
/// and every step's target can start).
pub fn preflight(client: &crate::Client, target: &loops_core::Target) -> Result<(), String> {
    let problems = client.check_target(target);
    if let Some(first) = problems.first() {
        return Err(format!("preflight failed: {first}"));
    }
    Ok(())
}
