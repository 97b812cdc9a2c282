//! `create command|agent|workflow <name>`: flags → a validated [`LoopDefinition`].
//! Everything is checked before the store is touched, so bad input writes nothing.

use super::Context;
use crate::cli::{
    CommonCreate, CreateAgentArgs, CreateCommand, CreateCommandArgs, CreateWorkflowArgs,
};
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::timeparse::parse_instant;
use crate::Failure;
use loops_core::cron::CronSchedule;
use loops_core::limits::MAX_PROMPT_BYTES;
use loops_core::{
    Account, AgentTarget, Anchor, CommandTarget, ConfigIsolation, Instant, Notify, NotifyOn,
    Policy, Provider, Schedule, Target, WorkflowTarget,
};
use loops_runtime::client::LoopDefinition;
use loops_runtime::input::{absolute_path, read_text};
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

pub fn run(ctx: &Context, cmd: CreateCommand) -> Result<Exit, Failure> {
    let now = output::now();
    let (common, target) = match cmd {
        CreateCommand::Command(args) => command_target(args)?,
        CreateCommand::Agent(args) => agent_target(args)?,
        CreateCommand::Workflow(args) => workflow_target(args)?,
    };
    let def = LoopDefinition {
        name: common.name.clone(),
        description: common.description.clone(),
        schedule: schedule(&common, now)?,
        target,
        policy: policy(&common, now)?,
        labels: common.labels.clone(),
        notify: notify(&common)?,
    };
    let client = ctx.client()?;
    if common.preflight {
        preflight(&client, &def.target)?;
    }
    let mut lp = client.create(def, now)?;
    if ctx.json {
        output::redact_loop(&mut lp);
        print_json(&lp)?;
    } else {
        outln!(
            "created {} ({}); next run {}",
            lp.name,
            lp.id,
            output::when(lp.next_run_at, now)
        )?;
    }
    Ok(Exit::Success)
}

fn schedule(c: &CommonCreate, now: Instant) -> Result<Schedule, Failure> {
    // clap's `requires` cannot say this: the schedule flags conflict with each other,
    // and clap counts a required flag that conflicts with a given one as satisfied.
    if c.tz.is_some() && c.cron.is_none() {
        return Err(Failure::usage(
            "--tz is for --cron (other schedules do not use a time zone)",
        ));
    }
    if c.anchor.is_some() && c.every.is_none() {
        return Err(Failure::usage("--anchor is for --every"));
    }
    if let Some(at) = &c.at {
        let at = parse_instant("--at", at, now).map_err(Failure::usage)?;
        if at <= now {
            return Err(Failure::usage(format!(
                "--at {} is in the past; use `loops run-now` to run immediately",
                loops_core::format_instant(&at)
            )));
        }
        return Ok(Schedule::Once { at });
    }
    if let Some(every) = c.every {
        let anchor = match &c.anchor {
            Some(a) => parse_enum::<Anchor>("--anchor", a)?,
            None => Anchor::FixedRate,
        };
        return Ok(Schedule::Interval {
            every_ms: every.as_millis(),
            anchor,
        });
    }
    if let Some(expression) = &c.cron {
        let timezone = match &c.tz {
            Some(tz) => tz.clone(),
            None => local_zone(),
        };
        CronSchedule::parse(expression, &timezone).map_err(|e| Failure::usage(e.to_string()))?;
        return Ok(Schedule::Cron {
            expression: expression.trim().to_owned(),
            timezone,
        });
    }
    if let Some(min) = c.dynamic {
        return Ok(Schedule::Dynamic {
            min_interval_ms: min.as_millis(),
        });
    }
    // clap's required group makes this unreachable; keep a clear message anyway.
    Err(Failure::usage(
        "a schedule is required: --at, --every, --cron or --dynamic",
    ))
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

fn policy(c: &CommonCreate, now: Instant) -> Result<Policy, Failure> {
    let mut p = Policy::default();
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

/// `--notify-cmd` / `--notify-url` / `--notify-on`; `--notify-on` alone is refused.
fn notify(c: &CommonCreate) -> Result<Option<Notify>, Failure> {
    let on = c
        .notify_on
        .as_deref()
        .map(|v| parse_enum::<NotifyOn>("--notify-on", v))
        .transpose()?;
    if c.notify_cmd.is_none() && c.notify_url.is_none() {
        if on.is_some() {
            return Err(Failure::usage(
                "--notify-on needs --notify-cmd or --notify-url",
            ));
        }
        return Ok(None);
    }
    Ok(Some(Notify {
        cmd: c.notify_cmd.clone(),
        url: c.notify_url.clone(),
        on: on.unwrap_or(NotifyOn::Failure),
    }))
}

fn command_target(args: CreateCommandArgs) -> Result<(CommonCreate, Target), Failure> {
    let c = &args.common;
    if !args.no_shell && !args.args.is_empty() {
        return Err(Failure::usage(
            "arguments after `--` need --no-shell (with a shell, put them in --cmd)",
        ));
    }
    let target = CommandTarget {
        command: args.cmd.clone(),
        args: args.args.clone(),
        cwd: cwd(c)?,
        shell: !args.no_shell,
        env: env_map(&c.env)?,
        timeout: c.timeout,
        account: account(c),
    };
    if !target.shell && target.command.trim().contains(char::is_whitespace) {
        return Err(Failure::usage(format!(
            "--cmd {:?} contains spaces but --no-shell executes it directly; pass arguments after `--` (e.g. --cmd git -- status --short)",
            target.command
        )));
    }
    Ok((args.common, Target::Command(target)))
}

fn agent_target(args: CreateAgentArgs) -> Result<(CommonCreate, Target), Failure> {
    let c = &args.common;
    let provider = parse_enum::<Provider>("--provider", &args.provider)?;
    let (prompt, prompt_file) = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => (p.clone(), None),
        (None, Some(path)) => {
            let typed = path.to_str().ok_or_else(|| {
                Failure::usage(format!(
                    "--prompt-file {} is not valid UTF-8",
                    path.display()
                ))
            })?;
            let abs = absolute_path(typed, None, "--prompt-file").map_err(Failure::usage)?;
            let text = read_text(Path::new(&abs), MAX_PROMPT_BYTES, "--prompt-file")
                .map_err(Failure::usage)?;
            if text.trim().is_empty() {
                return Err(Failure::usage(format!("--prompt-file {abs} is empty")));
            }
            (text, Some(abs))
        }
        (None, None) => return Err(Failure::usage("--prompt or --prompt-file is required")),
    };
    if prompt.trim().is_empty() {
        return Err(Failure::usage("prompt is empty"));
    }
    let config_isolation = match &args.config_isolation {
        Some(v) => parse_enum("--config-isolation", v)?,
        None => ConfigIsolation::Safe,
    };
    let target = AgentTarget {
        provider,
        prompt,
        prompt_file,
        cwd: cwd(c)?,
        model: args.model.clone(),
        agent: args.agent.clone(),
        auth_profile: args.auth_profile.clone(),
        config_isolation,
        config_overrides: config_overrides(&args.config_overrides)?,
        env: env_map(&c.env)?,
        timeout: c.timeout,
        account: account(c),
    };
    Ok((args.common, Target::Agent(target)))
}

fn workflow_target(args: CreateWorkflowArgs) -> Result<(CommonCreate, Target), Failure> {
    let target = WorkflowTarget {
        workflow: args.workflow.clone(),
        timeout: args.common.timeout,
    };
    Ok((args.common, Target::Workflow(target)))
}

/// `--cwd`, made absolute against this process's directory (`~/` is `$HOME`), so the
/// run does not depend on where its runner was started.
fn cwd(c: &CommonCreate) -> Result<Option<String>, Failure> {
    match c.cwd.as_deref() {
        // Left for validation to name ("cwd is empty").
        Some(dir) if dir.trim().is_empty() => Ok(Some(dir.to_owned())),
        Some(dir) => absolute_path(dir, None, "--cwd")
            .map(Some)
            .map_err(Failure::usage),
        None => Ok(None),
    }
}

fn account(c: &CommonCreate) -> Option<Account> {
    c.account.as_ref().map(|profile| Account {
        profile: profile.clone(),
        tool: c.account_tool.clone(),
    })
}

fn env_map(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    key_values("--env", pairs)
}

/// `--config-override KEY=VALUE` pairs.
fn config_overrides(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    key_values("--config-override", pairs)
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

fn parse_enum<T: FromStr<Err = String>>(flag: &str, text: &str) -> Result<T, Failure> {
    T::from_str(text).map_err(|e| {
        // "invalid Provider \"x\": expected …" → "invalid --provider \"x\": expected …"
        let rest = e.split_once(' ').map(|(_, r)| r).unwrap_or(&e);
        let rest = rest.split_once(' ').map(|(_, r)| r).unwrap_or(rest);
        Failure::usage(format!("invalid {flag} {rest}"))
    })
}

/// Checks that the target could start now: its executable resolves on the effective
/// PATH and a working directory exists (for a workflow target: the workflow is active
/// and every step's target can start).
fn preflight(client: &loops_runtime::Client, target: &Target) -> Result<(), Failure> {
    let problems = client.check_target(target);
    if let Some(first) = problems.first() {
        return Err(Failure::usage(format!("preflight failed: {first}")));
    }
    Ok(())
}
