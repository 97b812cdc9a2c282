//! `create command|agent|workflow <name>`: flags → a validated [`LoopDefinition`].
//! Everything is checked before the store is touched, so bad input writes nothing.

use super::Context;
use crate::cli::{
    CommonCreate, CreateAgentArgs, CreateCommand, CreateCommandArgs, CreateWorkflowArgs,
};
use crate::output::outln;
use crate::output::{self, print_json};
use crate::timeparse::parse_instant;
use crate::Failure;
use loops_core::cron::CronSchedule;
use loops_core::{
    Account, AgentTarget, Anchor, CommandTarget, ConfigIsolation, Duration, Instant, Policy,
    Provider, Schedule, Target, WorkflowTarget,
};
use loops_runtime::client::LoopDefinition;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::str::FromStr;

pub fn run(ctx: &Context, cmd: CreateCommand) -> Result<ExitCode, Failure> {
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
    };
    if common.preflight {
        preflight(&def.target)?;
    }
    let client = ctx.client()?;
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
    Ok(ExitCode::SUCCESS)
}

fn schedule(c: &CommonCreate, now: Instant) -> Result<Schedule, Failure> {
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
    if let Some(every) = &c.every {
        let anchor = match &c.anchor {
            Some(a) => parse_enum::<Anchor>("--anchor", a)?,
            None => Anchor::FixedRate,
        };
        return Ok(Schedule::Interval {
            every_ms: duration("--every", every)?,
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
    if let Some(min) = &c.dynamic {
        return Ok(Schedule::Dynamic {
            min_interval_ms: duration("--dynamic", min)?,
        });
    }
    // clap's required group makes this unreachable; keep a clear message anyway.
    Err(Failure::usage(
        "a schedule is required: --at, --every, --cron or --dynamic",
    ))
}

/// The host's IANA zone: `$TZ` when it names one, else the system setting, else UTC.
fn local_zone() -> String {
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
    if let Some(v) = &c.retry_delay {
        p.retry_delay_ms = duration("--retry-delay", v)?;
    }
    if let Some(v) = &c.lease {
        p.lease_ms = duration("--lease", v)?;
    }
    if let Some(v) = &c.expires_at {
        p.expires_at = Some(parse_instant("--expires-at", v, now).map_err(Failure::usage)?);
    }
    Ok(p)
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
        cwd: c.cwd.clone(),
        shell: !args.no_shell,
        env: env_map(&c.env)?,
        timeout_ms: timeout(c)?,
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
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("cannot read --prompt-file {}: {e}", path.display()))
            })?;
            let abs = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            (text, Some(abs.display().to_string()))
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
        cwd: c.cwd.clone(),
        model: args.model.clone(),
        agent: args.agent.clone(),
        auth_profile: args.auth_profile.clone(),
        config_isolation,
        config_overrides: config_overrides(&args.config_overrides)?,
        env: env_map(&c.env)?,
        timeout_ms: timeout(c)?,
        account: account(c),
    };
    Ok((args.common, Target::Agent(target)))
}

fn workflow_target(args: CreateWorkflowArgs) -> Result<(CommonCreate, Target), Failure> {
    let target = WorkflowTarget {
        workflow: args.workflow.clone(),
        timeout_ms: timeout(&args.common)?,
    };
    Ok((args.common, Target::Workflow(target)))
}

fn timeout(c: &CommonCreate) -> Result<Option<u64>, Failure> {
    c.timeout
        .as_deref()
        .map(|t| duration("--timeout", t))
        .transpose()
}

fn account(c: &CommonCreate) -> Option<Account> {
    c.account.as_ref().map(|profile| Account {
        profile: profile.clone(),
        tool: c.account_tool.clone(),
    })
}

fn env_map(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut env = BTreeMap::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("invalid --env {pair:?}: expected KEY=VALUE")))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    Ok(env)
}

/// `--config-override KEY=VALUE` pairs; only the first `=` splits (TOML values may
/// contain `=`, as in `model_providers.mock={name="Mock"}`).
fn config_overrides(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut overrides = BTreeMap::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            Failure::usage(format!(
                "invalid --config-override {pair:?}: expected KEY=VALUE"
            ))
        })?;
        overrides.insert(k.to_owned(), v.to_owned());
    }
    Ok(overrides)
}

fn duration(flag: &str, text: &str) -> Result<u64, Failure> {
    Duration::parse(text)
        .map(Duration::as_millis)
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))
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
/// PATH and a working directory exists.
fn preflight(target: &Target) -> Result<(), Failure> {
    let problems = loops_runtime::preflight::check_target(target);
    if let Some(first) = problems.first() {
        return Err(Failure::usage(format!("preflight failed: {first}")));
    }
    Ok(())
}
