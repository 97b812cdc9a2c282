//! Flags → a loop's [`LoopDefinition`], shared by `create` and `edit`: each function
//! lays the flags that were given over a base — the defaults on `create`, the stored
//! loop on `edit` — so both verbs accept the same flags with the same messages.
//! Everything here runs before the store is touched; the checks of the definition
//! as a whole are the client's (`Client::create`, `Client::edit`).

use crate::cli::{AgentOptions, DefinitionArgs};
use crate::timeparse::parse_instant;
use crate::Failure;
use loops_core::cron::CronSchedule;
use loops_core::limits::MAX_PROMPT_BYTES;
use loops_core::{
    Account, AgentTarget, Anchor, CommandTarget, ConfigIsolation, Instant, Notify, NotifyOn,
    Policy, Provider, Schedule, WorkflowTarget,
};
use loops_runtime::client::LoopDefinition;
use loops_runtime::input::{absolute_path, read_text};
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

/// Lays the flags every target type has, but the schedule's ([`schedule`]), over
/// `def`: policy, description, labels (added), notification settings. The target's
/// flags are the target functions' ([`command_target`], [`agent_target`],
/// [`workflow_target`]).
pub fn apply(def: &mut LoopDefinition, c: &DefinitionArgs, now: Instant) -> Result<(), Failure> {
    def.policy = policy(def.policy.clone(), c, now)?;
    if let Some(d) = &c.description {
        def.description = Some(d.clone());
    }
    def.labels.extend(c.labels.iter().cloned());
    def.notify = notify(def.notify.take(), c)?;
    Ok(())
}

/// The schedule the flags give, if any. `current` is the schedule being edited: then
/// `--tz` alone moves a cron loop to another zone and `--anchor` alone re-anchors an
/// interval, `--cron` keeps the loop's zone and `--every` its anchor.
pub fn schedule(
    c: &DefinitionArgs,
    current: Option<&Schedule>,
    now: Instant,
) -> Result<Option<Schedule>, Failure> {
    let given = c.at.is_some() || c.every.is_some() || c.cron.is_some() || c.dynamic.is_some();
    // clap's `requires` cannot say this: the schedule flags conflict with each other,
    // and clap counts a required flag that conflicts with a given one as satisfied.
    if c.tz.is_some() && c.cron.is_none() {
        return match (given, current, &c.tz) {
            (false, Some(Schedule::Cron { expression, .. }), Some(tz)) => {
                cron(expression, tz.clone()).map(Some)
            }
            _ => Err(Failure::usage(
                "--tz is for --cron (other schedules do not use a time zone)",
            )),
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
            _ => Err(Failure::usage("--anchor is for --every")),
        };
    }
    if let Some(at) = &c.at {
        let at = parse_instant("--at", at, now).map_err(Failure::usage)?;
        if at <= now {
            return Err(Failure::usage(format!(
                "--at {} is in the past; use `loops run-now` to run immediately",
                loops_core::format_instant(&at)
            )));
        }
        return Ok(Some(Schedule::Once { at }));
    }
    if let Some(every) = c.every {
        let anchor = match (&c.anchor, current) {
            (Some(a), _) => parse_enum::<Anchor>("--anchor", a)?,
            (None, Some(Schedule::Interval { anchor, .. })) => *anchor,
            (None, _) => Anchor::FixedRate,
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

fn cron(expression: &str, timezone: String) -> Result<Schedule, Failure> {
    CronSchedule::parse(expression, &timezone).map_err(|e| Failure::usage(e.to_string()))?;
    Ok(Schedule::Cron {
        expression: expression.trim().to_owned(),
        timezone,
    })
}

/// The host's IANA zone: `$TZ` when it names one, else the system setting, else UTC.
pub(super) fn local_zone() -> String {
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
pub fn policy(mut p: Policy, c: &DefinitionArgs, now: Instant) -> Result<Policy, Failure> {
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
        p.expires_at = Some(parse_instant("--expires-at", v, now).map_err(Failure::usage)?);
    }
    if let Some(v) = c.jitter {
        p.jitter_ms = v.as_millis();
    }
    Ok(p)
}

/// `--notify-cmd` / `--notify-url` / `--notify-on` laid over `base`; `--notify-on`
/// without a command or URL (given or kept) is refused.
pub fn notify(base: Option<Notify>, c: &DefinitionArgs) -> Result<Option<Notify>, Failure> {
    let on = c
        .notify_on
        .as_deref()
        .map(|v| parse_enum::<NotifyOn>("--notify-on", v))
        .transpose()?;
    let mut n = base.unwrap_or(Notify {
        cmd: None,
        url: None,
        on: NotifyOn::Failure,
    });
    if let Some(cmd) = &c.notify_cmd {
        n.cmd = Some(cmd.clone());
    }
    if let Some(url) = &c.notify_url {
        n.url = Some(url.clone());
    }
    if n.cmd.is_none() && n.url.is_none() {
        if on.is_some() {
            return Err(Failure::usage(
                "--notify-on needs --notify-cmd or --notify-url",
            ));
        }
        return Ok(None);
    }
    if let Some(on) = on {
        n.on = on;
    }
    Ok(Some(n))
}

/// What the command flags of one command line ask for; `None` keeps that part.
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
    c: &DefinitionArgs,
) -> Result<CommandTarget, Failure> {
    let mut t = base.unwrap_or(CommandTarget {
        command: String::new(),
        args: Vec::new(),
        cwd: None,
        shell: true,
        env: BTreeMap::new(),
        timeout: None,
        account: None,
    });
    if let Some(cmd) = f.cmd {
        t.command = cmd;
    }
    if let Some(shell) = f.shell {
        t.shell = shell;
    }
    if let Some(args) = f.args {
        t.args = args;
    }
    if t.shell && !t.args.is_empty() {
        return Err(Failure::usage(
            "arguments after `--` need --no-shell (with a shell, put them in --cmd)",
        ));
    }
    if let Some(cwd) = cwd(c)? {
        t.cwd = Some(cwd);
    }
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    t.env.extend(env_map(&c.env)?);
    if let Some(account) = account(c) {
        t.account = Some(account);
    }
    if !t.shell && t.command.trim().contains(char::is_whitespace) {
        return Err(Failure::usage(format!(
            "--cmd {:?} contains spaces but --no-shell executes it directly; pass arguments after `--` (e.g. --cmd git -- status --short)",
            t.command
        )));
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
    c: &DefinitionArgs,
) -> Result<AgentTarget, Failure> {
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
            return Err(Failure::usage("prompt is empty"));
        }
    }
    let mut t = match (base, provider, prompt.clone()) {
        (Some(t), _, _) => t,
        (None, Some(provider), Some((prompt, prompt_file))) => AgentTarget {
            provider,
            prompt,
            prompt_file,
            cwd: None,
            model: None,
            agent: None,
            auth_profile: None,
            config_isolation: ConfigIsolation::Safe,
            config_overrides: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            account: None,
        },
        (None, None, _) => return Err(Failure::usage("--provider is required")),
        (None, _, None) => return Err(Failure::usage("--prompt or --prompt-file is required")),
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
    t.config_overrides
        .extend(key_values("--config-override", &o.config_overrides)?);
    if let Some(cwd) = cwd(c)? {
        t.cwd = Some(cwd);
    }
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    t.env.extend(env_map(&c.env)?);
    if let Some(account) = account(c) {
        t.account = Some(account);
    }
    Ok(t)
}

/// `--prompt-file`: read (at most 1 MiB) and kept with its absolute path.
fn prompt_file(path: &Path) -> Result<(String, Option<String>), Failure> {
    let typed = path.to_str().ok_or_else(|| {
        Failure::usage(format!(
            "--prompt-file {} is not valid UTF-8",
            path.display()
        ))
    })?;
    let abs = absolute_path(typed, None, "--prompt-file").map_err(Failure::usage)?;
    let text =
        read_text(Path::new(&abs), MAX_PROMPT_BYTES, "--prompt-file").map_err(Failure::usage)?;
    if text.trim().is_empty() {
        return Err(Failure::usage(format!("--prompt-file {abs} is empty")));
    }
    Ok((text, Some(abs)))
}

/// A workflow target: `--workflow` and `--timeout` laid over `base` (`None` on
/// `create`, where `--workflow` is given).
pub fn workflow_target(
    base: Option<WorkflowTarget>,
    workflow: Option<&str>,
    c: &DefinitionArgs,
) -> Result<WorkflowTarget, Failure> {
    let mut t = match (base, workflow) {
        (Some(t), _) => t,
        (None, Some(w)) => WorkflowTarget {
            workflow: w.to_owned(),
            timeout: None,
        },
        (None, None) => return Err(Failure::usage("--workflow is required")),
    };
    if let Some(w) = workflow {
        t.workflow = w.to_owned();
    }
    if c.timeout.is_some() {
        t.timeout = c.timeout;
    }
    Ok(t)
}

/// `--cwd`, made absolute against this process's directory (`~/` is `$HOME`), so the
/// run does not depend on where its runner was started.
fn cwd(c: &DefinitionArgs) -> Result<Option<String>, Failure> {
    match c.cwd.as_deref() {
        // Left for validation to name ("cwd is empty").
        Some(dir) if dir.trim().is_empty() => Ok(Some(dir.to_owned())),
        Some(dir) => absolute_path(dir, None, "--cwd")
            .map(Some)
            .map_err(Failure::usage),
        None => Ok(None),
    }
}

fn account(c: &DefinitionArgs) -> Option<Account> {
    c.account.as_ref().map(|profile| Account {
        profile: profile.clone(),
        tool: c.account_tool.clone(),
    })
}

fn env_map(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    key_values("--env", pairs)
}

/// Repeated `KEY=VALUE` flags; only the first `=` splits (values may contain `=`, as
/// TOML does in `model_providers.mock={name="Mock"}`). A key given twice is refused
/// rather than silently keeping the last value.
fn key_values(flag: &str, pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut map = BTreeMap::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            Failure::usage(format!("invalid {flag} {pair:?}: expected KEY=VALUE"))
        })?;
        if map.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(Failure::usage(format!(
                "{flag} {k} is given twice; give each key once"
            )));
        }
    }
    Ok(map)
}

/// An enum flag's value: "invalid Provider \"x\": expected …" becomes "invalid
/// --provider \"x\": expected …".
pub fn parse_enum<T: FromStr<Err = String>>(flag: &str, text: &str) -> Result<T, Failure> {
    T::from_str(text).map_err(|e| {
        let rest = e.split_once(' ').map(|(_, r)| r).unwrap_or(&e);
        let rest = rest.split_once(' ').map(|(_, r)| r).unwrap_or(rest);
        Failure::usage(format!("invalid {flag} {rest}"))
    })
}

/// Checks that the target could start now: its executable resolves on the effective
/// PATH and a working directory exists (for a workflow target: the workflow is active
/// and every step's target can start).
pub fn preflight(
    client: &loops_runtime::Client,
    target: &loops_core::Target,
) -> Result<(), Failure> {
    let problems = client.check_target(target);
    if let Some(first) = problems.first() {
        return Err(Failure::usage(format!("preflight failed: {first}")));
    }
    Ok(())
}
