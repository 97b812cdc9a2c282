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

/// What the command flags of one command line ask for; `None` keeps that part (on
/// `create`, `None` for `shell` is [`CommandTarget::default_shell`]).
pub struct CommandFlags {
    pub cmd: Option<String>,
    /// `Some(false)` for `--no-shell`.
    pub shell: Option<bool>,
    pub args: Option<Vec<String>>,
}

/// A command target: the command flags and the shared target flags (`--cwd`,
/// `--timeout`, `--env`, `--account`) laid over `base` (`None` on `create`, where
/// `--cmd` is given).
pub fn command_target(
    base: Option<CommandTarget>,
    f: CommandFlags,
    c: &DefinitionFlags,
) -> Result<CommandTarget, String> {
    let created = base.is_none();
    let mut t = base.unwrap_or(CommandTarget {
        command: String::new(),
        args: Vec::new(),
        cwd: None,
        shell: true,
        env: BTreeMap::new(),
        timeout: None,
        idle_timeout: None,
        account: None,
    });
    if let Some(cmd) = f.cmd {
        t.command = cmd;
    }
    if let Some(args) = f.args {
        t.args = args;
    }
    match f.shell {
        Some(shell) => t.shell = shell,
        None if created => t.shell = CommandTarget::default_shell(&t.args),
        None => {}
    }
    if t.shell && !t.args.is_empty() {
        return Err(
            "arguments after `--` need --no-shell (with a shell, put them in --cmd)".to_owned(),
        );
    }
    if let Some(cwd) = cwd(c)? {
        t.cwd = Some(cwd);
    }
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    if c.idle_timeout.is_some() {
        t.idle_timeout = c.idle_timeout;
    }
    t.env.extend(env_map(&c.env)?);
    if let Some(account) = account(c) {
        t.account = Some(account);
    }
    if !t.shell && t.command.trim().contains(char::is_whitespace) {
        return Err(format!(
            "--cmd {:?} contains spaces but --no-shell executes it directly; pass arguments after `--` (e.g. --cmd git -- status --short)",
            t.command
        ));
    }
    Ok(t)
}

/// What the agent flags of one command line ask for; `None` keeps that part.
pub struct AgentFlags<'a> {
    pub provider: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub prompt_file: Option<&'a Path>,
    pub options: &'a AgentOptions,
}

/// An agent target: the agent flags and the shared target flags laid over `base`
/// (`None` on `create`, where `--provider` and a prompt are given). A prompt given as
/// text drops the stored prompt file's path.
pub fn agent_target(
    base: Option<AgentTarget>,
    f: AgentFlags<'_>,
    c: &DefinitionFlags,
) -> Result<AgentTarget, String> {
    let provider = f
        .provider
        .map(|p| parse_enum::<Provider>("--provider", p))
        .transpose()?;
    let prompt = match (f.prompt, f.prompt_file) {
        (Some(p), _) => Some((p.to_owned(), None)),
        (None, Some(path)) => Some(prompt_file(path)?),
        (None, None) => None,
    };
    if let Some((text, _)) = &prompt {
        if text.trim().is_empty() {
            return Err("prompt is empty".to_owned());
        }
    }
    let mut t = match (base, provider, prompt.clone()) {
        (Some(t), _, _) => t,
        (None, Some(provider), Some((prompt, prompt_file))) => AgentTarget {
            account_pool: Vec::new(),
            provider,
            prompt,
            prompt_file,
            cwd: None,
            model: None,
            agent: None,
            auth_profile: None,
            config_isolation: ConfigIsolation::DEFAULT,
            config_overrides: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            idle_timeout: None,
            account: None,
            session: loops_core::SessionMode::DEFAULT,
            permission_mode: None,
            sandbox: None,
            effort: None,
            variant: None,
            add_dirs: Vec::new(),
            max_turns: None,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
        },
        (None, None, _) => return Err("--provider is required".to_owned()),
        (None, _, None) => return Err("--prompt or --prompt-file is required".to_owned()),
    };
    if let Some(provider) = provider {
        t.provider = provider;
    }
    if let Some((text, file)) = prompt {
        t.prompt = text;
        t.prompt_file = file;
    }
    let o = f.options;
    if let Some(m) = &o.model {
        t.model = Some(m.clone());
    }
    if let Some(a) = &o.agent {
        t.agent = Some(a.clone());
    }
    if let Some(p) = &o.auth_profile {
        t.auth_profile = Some(p.clone());
    }
    if let Some(v) = &o.config_isolation {
        t.config_isolation = parse_enum("--config-isolation", v)?;
    }
    if let Some(v) = &o.session {
        t.session = parse_enum("--session", v)?;
    }
    t.config_overrides
        .extend(key_values("--config-override", &o.config_overrides)?);
    o.apply_provider_options(&mut t)?;
    if let Some(cwd) = cwd(c)? {
        t.cwd = Some(cwd);
    }
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    if c.idle_timeout.is_some() {
        t.idle_timeout = c.idle_timeout;
    }
    t.env.extend(env_map(&c.env)?);
    // One of `--account` and `--account-pool`: either replaces the other on `edit`.
    if !o.account_pool.is_empty() {
        if c.account.is_some() {
            return Err("--account and --account-pool are mutually exclusive".to_owned());
        }
        t.account_pool = o.account_pool.clone();
        t.account = None;
    }
    if let Some(account) = account(c) {
        t.account = Some(account);
        t.account_pool.clear();
    }
    Ok(t)
}

/// `--prompt-file`: read (at most 1 MiB) and kept with its absolute path.
fn prompt_file(path: &Path) -> Result<(String, Option<String>), String> {
    let typed = path
        .to_str()
        .ok_or_else(|| format!("--prompt-file {} is not valid UTF-8", path.display()))?;
    let abs = absolute_path(typed, None, "--prompt-file")?;
    let text = read_text(Path::new(&abs), MAX_PROMPT_BYTES, "--prompt-file")?;
    if text.trim().is_empty() {
        return Err(format!("--prompt-file {abs} is empty"));
    }
    Ok((text, Some(abs)))
}

/// A workflow target's own flags: `--workflow`, `--param NAME=VALUE` (set, each name
/// once) and, on `edit`, `--unset-param NAME`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkflowFlags<'a> {
    pub workflow: Option<&'a str>,
    pub params: &'a [String],
    pub unset_params: &'a [String],
}

/// A workflow target: `--workflow`, `--param`/`--unset-param` and `--timeout` laid over
/// `base` (`None` on `create`, where `--workflow` is given). The params are checked
/// against the workflow's spec by the client, which has it.
pub fn workflow_target(
    base: Option<WorkflowTarget>,
    w: WorkflowFlags<'_>,
    c: &DefinitionFlags,
) -> Result<WorkflowTarget, String> {
    let mut t = match (base, w.workflow) {
        (Some(t), _) => t,
        (None, Some(name)) => WorkflowTarget {
            workflow: name.to_owned(),
            timeout: None,
            params: BTreeMap::new(),
        },
        (None, None) => return Err("--workflow is required".to_owned()),
    };
    if let Some(name) = w.workflow {
        t.workflow = name.to_owned();
    }
    for name in w.unset_params {
        t.params.remove(name);
    }
    t.params
        .extend(loops_core::workflow_params::parse_assignments(w.params)?);
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    if c.idle_timeout.is_some() {
        return Err(
            "--idle-timeout is for command and agent loops (a workflow's steps take idleTimeoutMs in the spec)"
                .to_owned(),
        );
    }
    Ok(t)
}

/// `--cwd`, made absolute against this process's directory (`~/` is `$HOME`), so the
/// run does not depend on where its runner was started.
fn cwd(c: &DefinitionFlags) -> Result<Option<String>, String> {
    match c.cwd.as_deref() {
        // Left for validation to name ("cwd is empty").
        Some(dir) if dir.trim().is_empty() => Ok(Some(dir.to_owned())),
        Some(dir) => absolute_path(dir, None, "--cwd").map(Some),
        None => Ok(None),
    }
}

fn account(c: &DefinitionFlags) -> Option<Account> {
    c.account.as_ref().map(|profile| Account {
        profile: profile.clone(),
        tool: c.account_tool.clone(),
    })
}

fn env_map(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    key_values("--env", pairs)
}

/// Repeated `KEY=VALUE` flags; only the first `=` splits (values may contain `=`, as
/// TOML does in `model_providers.mock={name="Mock"}`). A key given twice is refused
/// rather than silently keeping the last value.
fn key_values(flag: &str, pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("invalid {flag} {pair:?}: expected KEY=VALUE"))?;
        if map.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(format!("{flag} {k} is given twice; give each key once"));
        }
    }
    Ok(map)
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

/// What `edit --clear` can clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearField {
    Description,
    Cwd,
    Timeout,
    Env,
    Account,
    Args,
    Model,
    Agent,
    AuthProfile,
    ConfigOverrides,
    ExpiresAt,
    Jitter,
    Labels,
    On,
    Notify,
    NotifyCmd,
    NotifyUrl,
    MaxFailures,
    IdleTimeout,
    UntilCmd,
    UntilOutput,
    MaxRuns,
    Session,
    BudgetTokens,
    BudgetUsd,
    AccountPool,
    /// A provider option (its [`ProviderOption::clear_name`]).
    Provider(ProviderOption),
}

impl ClearField {
    /// Every field, in the order `--clear` lists them.
    pub const ALL: [ClearField; 34] = [
        ClearField::Description,
        ClearField::Cwd,
        ClearField::Timeout,
        ClearField::Env,
        ClearField::Account,
        ClearField::Args,
        ClearField::Model,
        ClearField::Agent,
        ClearField::AuthProfile,
        ClearField::ConfigOverrides,
        ClearField::ExpiresAt,
        ClearField::Jitter,
        ClearField::Labels,
        ClearField::On,
        ClearField::Notify,
        ClearField::NotifyCmd,
        ClearField::NotifyUrl,
        ClearField::MaxFailures,
        ClearField::IdleTimeout,
        ClearField::UntilCmd,
        ClearField::UntilOutput,
        ClearField::MaxRuns,
        ClearField::Session,
        ClearField::BudgetTokens,
        ClearField::BudgetUsd,
        ClearField::AccountPool,
        ClearField::Provider(ProviderOption::PermissionMode),
        ClearField::Provider(ProviderOption::Sandbox),
        ClearField::Provider(ProviderOption::Effort),
        ClearField::Provider(ProviderOption::Variant),
        ClearField::Provider(ProviderOption::AddDir),
        ClearField::Provider(ProviderOption::MaxTurns),
        ClearField::Provider(ProviderOption::AllowTool),
        ClearField::Provider(ProviderOption::DenyTool),
    ];

    /// The flag value (`auth-profile`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClearField::Description => "description",
            ClearField::Cwd => "cwd",
            ClearField::Timeout => "timeout",
            ClearField::Env => "env",
            ClearField::Account => "account",
            ClearField::Args => "args",
            ClearField::Model => "model",
            ClearField::Agent => "agent",
            ClearField::AuthProfile => "auth-profile",
            ClearField::ConfigOverrides => "config-overrides",
            ClearField::ExpiresAt => "expires-at",
            ClearField::Jitter => "jitter",
            ClearField::Labels => "labels",
            ClearField::On => "on",
            ClearField::Notify => "notify",
            ClearField::NotifyCmd => "notify-cmd",
            ClearField::NotifyUrl => "notify-url",
            ClearField::MaxFailures => "max-failures",
            ClearField::UntilCmd => "until-cmd",
            ClearField::UntilOutput => "until-output",
            ClearField::MaxRuns => "max-runs",
            ClearField::IdleTimeout => "idle-timeout",
            ClearField::Session => "session",
            ClearField::BudgetTokens => "budget-tokens",
            ClearField::BudgetUsd => "budget-usd",
            ClearField::AccountPool => "account-pool",
            ClearField::Provider(option) => option.clear_name(),
        }
    }
}

impl FromStr for ClearField {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        ClearField::ALL
            .into_iter()
            .find(|f| f.as_str() == text)
            .ok_or_else(|| {
                let all: Vec<&str> = ClearField::ALL.iter().map(|f| f.as_str()).collect();
                format!(
                    "invalid --clear {text:?}: expected one of {}",
                    all.join(", ")
                )
            })
    }
}

/// The flags of one `edit`: the definition's, the target's (of the loop's type
/// only), and what to remove or clear.
#[derive(Debug, Clone, Default)]
pub struct EditFlags {
    pub def: DefinitionFlags,
    /// Labels to remove (one the loop does not have is ignored).
    pub unlabels: Vec<String>,
    /// Environment variables to remove.
    pub unset_env: Vec<String>,
    pub clear: Vec<ClearField>,
    /// (command loops) The command line.
    pub cmd: Option<String>,
    /// (command loops) Execute the command directly.
    pub no_shell: bool,
    /// (command loops) Run the command by /bin/sh again.
    pub shell: bool,
    /// (command loops) Arguments for a `--no-shell` command (replacing the stored
    /// ones); empty keeps them.
    pub args: Vec<String>,
    /// (agent loops)
    pub provider: Option<String>,
    pub prompt: Option<String>,
    pub prompt_file: Option<std::path::PathBuf>,
    pub agent: AgentOptions,
    /// (workflow loops) The stored workflow to run.
    pub workflow: Option<String>,
    /// (workflow loops) `NAME=VALUE` values for the workflow's params (set).
    pub params: Vec<String>,
    /// (workflow loops) Params whose value is removed (the spec's default applies).
    pub unset_params: Vec<String>,
}

/// The definition `e` makes of the loop `before`: cleared fields, removed labels and
/// env variables, then the given flags laid over the rest. Flags of another target
/// type than the loop's are refused, naming the loop's (a target's type is fixed).
pub fn edited(before: &Loop, e: &EditFlags, now: Instant) -> Result<LoopDefinition, String> {
    check_kind(before, e)?;
    let mut def = LoopDefinition::from(before);
    for field in &e.clear {
        clear(&mut def, *field)?;
    }
    for label in &e.unlabels {
        loops_core::validate::label(label).map_err(|e| e.to_string())?;
        def.labels.retain(|l| l != label);
    }
    for key in &e.unset_env {
        match &mut def.target {
            Target::Command(c) => c.env.remove(key),
            Target::Agent(a) => a.env.remove(key),
            Target::Workflow(_) => {
                return Err(kind_error(before, "--unset-env", "command or agent"))
            }
        };
    }
    if let Some(s) = schedule(&e.def, Some(&def.schedule), now)? {
        def.schedule = s;
    }
    def.target = edited_target(def.target, e)?;
    apply(&mut def, &e.def, now)?;
    Ok(def)
}

/// The target flags laid over the loop's target (of the same type: see
/// [`check_kind`]).
fn edited_target(target: Target, e: &EditFlags) -> Result<Target, String> {
    Ok(match target {
        Target::Command(t) => {
            let flags = CommandFlags {
                cmd: e.cmd.clone(),
                shell: match (e.shell, e.no_shell) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                args: (!e.args.is_empty()).then(|| e.args.clone()),
            };
            Target::Command(command_target(Some(t), flags, &e.def)?)
        }
        Target::Agent(t) => {
            let flags = AgentFlags {
                provider: e.provider.as_deref(),
                prompt: e.prompt.as_deref(),
                prompt_file: e.prompt_file.as_deref(),
                options: &e.agent,
            };
            Target::Agent(agent_target(Some(t), flags, &e.def)?)
        }
        Target::Workflow(t) => {
            let flags = WorkflowFlags {
                workflow: e.workflow.as_deref(),
                params: &e.params,
                unset_params: &e.unset_params,
            };
            Target::Workflow(workflow_target(Some(t), flags, &e.def)?)
        }
    })
}

/// A target's type is fixed: flags of another type are refused, naming the loop's.
fn check_kind(lp: &Loop, e: &EditFlags) -> Result<(), String> {
    let o = &e.agent;
    let command = [
        ("--cmd", e.cmd.is_some()),
        ("--no-shell", e.no_shell),
        ("--shell", e.shell),
        ("arguments after `--`", !e.args.is_empty()),
    ];
    let agent = [
        ("--provider", e.provider.is_some()),
        ("--prompt", e.prompt.is_some()),
        ("--prompt-file", e.prompt_file.is_some()),
        ("--model", o.model.is_some()),
        ("--agent", o.agent.is_some()),
        ("--auth-profile", o.auth_profile.is_some()),
        ("--config-isolation", o.config_isolation.is_some()),
        ("--config-override", !o.config_overrides.is_empty()),
        ("--session", o.session.is_some()),
        ("--account-pool", !o.account_pool.is_empty()),
        (
            o.provider_option_given().unwrap_or("a provider option"),
            o.provider_option_given().is_some(),
        ),
    ];
    let workflow = [
        ("--workflow", e.workflow.is_some()),
        ("--param", !e.params.is_empty()),
        ("--unset-param", !e.unset_params.is_empty()),
    ];
    let (others, kinds): (Vec<&[(&str, bool)]>, _) = match &lp.target {
        Target::Command(_) => (vec![&agent, &workflow], ["agent", "workflow"]),
        Target::Agent(_) => (vec![&command, &workflow], ["command", "workflow"]),
        Target::Workflow(_) => (vec![&command, &agent], ["command", "agent"]),
    };
    for (flags, kind) in others.into_iter().zip(kinds) {
        if let Some((flag, _)) = flags.iter().find(|(_, given)| *given) {
            return Err(kind_error(lp, flag, kind));
        }
    }
    Ok(())
}

fn kind_error(lp: &Loop, flag: &str, kind: &str) -> String {
    format!(
        "{flag} is for {kind} loops; loop {:?} runs a {} target (a target's type cannot be changed: create a new loop)",
        lp.name,
        lp.target.kind()
    )
}

/// `--clear FIELD`.
fn clear(def: &mut LoopDefinition, field: ClearField) -> Result<(), String> {
    let kind = def.target.kind();
    let wrong = || {
        format!(
            "--clear {} is not a setting of a {kind} loop",
            field.as_str()
        )
    };
    match field {
        ClearField::Description => def.description = None,
        ClearField::ExpiresAt => def.policy.expires_at = None,
        ClearField::Jitter => def.policy.jitter_ms = 0,
        ClearField::Labels => def.labels.clear(),
        ClearField::On => def.policy.runs_on.clear(),
        ClearField::MaxFailures => def.policy.ops.max_failures = None,
        ClearField::UntilCmd => def.policy.ops.until_cmd = None,
        ClearField::UntilOutput => def.policy.ops.until_output = None,
        ClearField::MaxRuns => def.policy.ops.max_runs = None,
        ClearField::BudgetTokens => def.policy.ops.budget_tokens = None,
        ClearField::BudgetUsd => def.policy.ops.budget_usd = None,
        ClearField::Notify => def.notify = None,
        ClearField::NotifyCmd | ClearField::NotifyUrl => {
            if let Some(n) = def.notify.as_mut() {
                if field == ClearField::NotifyCmd {
                    n.cmd = None;
                } else {
                    n.url = None;
                }
                if n.cmd.is_none() && n.url.is_none() {
                    def.notify = None;
                }
            }
        }
        ClearField::IdleTimeout => match &mut def.target {
            Target::Command(c) => c.idle_timeout = None,
            Target::Agent(a) => a.idle_timeout = None,
            Target::Workflow(_) => return Err(wrong()),
        },
        ClearField::Timeout => match &mut def.target {
            Target::Command(c) => c.timeout = None,
            Target::Agent(a) => a.timeout = None,
            Target::Workflow(w) => w.timeout = None,
        },
        ClearField::Cwd | ClearField::Env | ClearField::Account => {
            let (cwd, env, account) = match &mut def.target {
                Target::Command(c) => (&mut c.cwd, &mut c.env, &mut c.account),
                Target::Agent(a) => (&mut a.cwd, &mut a.env, &mut a.account),
                Target::Workflow(_) => return Err(wrong()),
            };
            match field {
                ClearField::Cwd => *cwd = None,
                ClearField::Env => env.clear(),
                _ => *account = None,
            }
        }
        ClearField::Args => match &mut def.target {
            Target::Command(c) => c.args.clear(),
            _ => return Err(wrong()),
        },
        ClearField::Model
        | ClearField::Agent
        | ClearField::AuthProfile
        | ClearField::ConfigOverrides
        | ClearField::Session
        | ClearField::AccountPool
        | ClearField::Provider(_) => {
            let Target::Agent(a) = &mut def.target else {
                return Err(wrong());
            };
            match field {
                ClearField::Model => a.model = None,
                ClearField::Agent => a.agent = None,
                ClearField::AuthProfile => a.auth_profile = None,
                ClearField::Session => a.session = loops_core::SessionMode::DEFAULT,
                ClearField::AccountPool => a.account_pool.clear(),
                ClearField::Provider(option) => option.clear(a),
                _ => a.config_overrides.clear(),
            }
        }
    }
    Ok(())
}
