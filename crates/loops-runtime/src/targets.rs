//! Turns a loop's target and a claimed run into an [`Invocation`]: executable, argv,
//! stdin and the environment (README, "Running loops" → "Execution"), built in one
//! place.
//!
//! Environment layers, lowest first: the daemon's environment, then (under an
//! account) that environment scrubbed of auth variables with the profile applied,
//! then PATH extension, the target's `env`, and the `LOOPS_*` metadata (including
//! `LOOPS_ACCOUNT_*`). Account resolution runs `accounts env` synchronously, before
//! anything is spawned, so a failure fails the run before a provider sees the prompt.

use crate::accounts;
use crate::env::build_env;
use crate::executor::{Invocation, DEFAULT_KILL_GRACE, DEFAULT_MAX_OUTPUT_BYTES};
use crate::providers::{account_tool, agent_args};
use crate::spool::Spool;
use loops_core::{format_instant, Account, AgentTarget, CommandTarget, Loop, Run, Target};
use std::path::PathBuf;
use std::time::Duration;

/// How processes are run — the process layer's knobs, the same for loop runs and
/// workflow steps.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// Time between SIGTERM and SIGKILL when a run is stopped.
    pub kill_grace: Duration,
    /// Bytes kept of each output stream (the tail).
    pub max_output_bytes: usize,
    /// Home dir whose user bin dirs extend PATH.
    pub home: Option<PathBuf>,
    /// Where running output is spooled (`<data dir>/spool`); `None` keeps it in memory
    /// only, so a runner that dies loses it.
    pub spool: Option<Spool>,
    /// Where supervisors leave status files (`<data dir>/supervise`), read by whoever
    /// recovers a run whose runner is gone; `None` outside a data dir.
    pub supervise_dir: Option<PathBuf>,
    /// Where processes run: here, or under this host's supervisors (the daemon).
    pub launcher: crate::supervisor::Launcher,
}

impl ExecSettings {
    /// Defaults for this process: its `HOME`, no spool.
    pub fn for_this_process() -> Self {
        Self {
            kill_grace: DEFAULT_KILL_GRACE,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            home: std::env::var_os("HOME").map(PathBuf::from),
            spool: None,
            supervise_dir: None,
            launcher: crate::supervisor::Launcher::InProcess,
        }
    }

    /// [`Self::for_this_process`], spooling output in `data_dir`.
    pub fn for_data_dir(data_dir: &std::path::Path) -> Self {
        Self {
            spool: Some(Spool::in_data_dir(data_dir)),
            supervise_dir: Some(crate::supervisor::dir_in(data_dir)),
            ..Self::for_this_process()
        }
    }
}

/// A target that cannot be turned into a process; the message becomes the run's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

/// The `LOOPS_*` metadata of a run.
pub fn run_metadata(lp: &Loop, run: &Run) -> Vec<(&'static str, String)> {
    vec![
        ("LOOPS_LOOP_ID", lp.id.to_string()),
        ("LOOPS_LOOP_NAME", lp.name.clone()),
        ("LOOPS_RUN_ID", run.id.to_string()),
        ("LOOPS_SCHEDULED_FOR", format_instant(&run.scheduled_for)),
        ("LOOPS_ATTEMPT", run.attempt.to_string()),
    ]
}

/// The inherited part of a child's environment (to be passed to [`build_env`]):
/// the daemon's own, or under `account` the scrubbed environment with the profile
/// applied; in that case `LOOPS_ACCOUNT_PROFILE` / `LOOPS_ACCOUNT_TOOL` are appended to
/// `metadata`. `tool_hint` is the provider's tool for agents, `None` for commands.
///
/// Blocks while `accounts env` runs (bounded by [`accounts::ACCOUNTS_TIMEOUT`]); on a
/// multi-threaded runtime the worker is handed off first so other runs keep going.
pub fn inherited_env(
    account: Option<&Account>,
    tool_hint: Option<&str>,
    metadata: &mut Vec<(&'static str, String)>,
) -> Result<Vec<(String, String)>, SpecError> {
    let inherited = crate::env::inherited();
    let Some(account) = account else {
        return Ok(inherited);
    };
    let resolved =
        blocking(|| accounts::resolve(account, tool_hint, &inherited)).map_err(SpecError)?;
    metadata.extend(resolved.metadata());
    Ok(resolved.apply(inherited))
}

/// Runs blocking work from sync code that may sit on a Tokio worker thread.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        // A current-thread runtime (`run-now`, `tick`) runs one run at a time anyway.
        _ => work(),
    }
}

/// A target that runs as one process: a loop's command or agent target, or a
/// workflow step's.
#[derive(Debug, Clone, Copy)]
pub enum ProcessTarget<'a> {
    Command(&'a CommandTarget),
    /// An agent, resuming the session given (a `session: continue` loop's previous
    /// run's; see [`loops_core::session`]), or starting a new one.
    Agent(&'a AgentTarget, Option<&'a str>),
}

/// The process to start for `run` of `lp`, resuming session `resume` when the loop's
/// agent resumes its sessions (the engine looks it up in the store).
pub fn loop_invocation(
    lp: &Loop,
    run: &Run,
    resume: Option<&str>,
    cfg: &ExecSettings,
) -> Result<Invocation, SpecError> {
    let metadata = run_metadata(lp, run);
    match &lp.target {
        Target::Command(c) => invocation(
            ProcessTarget::Command(c),
            c.account.as_ref(),
            c.timeout,
            metadata,
            cfg,
        ),
        Target::Agent(a) => {
            // A pooled run runs on the account its claim chose (`Run::account`).
            let pooled = match (&run.account, a.account_pool.is_empty()) {
                (Some(profile), false) => Some(Account {
                    profile: profile.clone(),
                    tool: None,
                }),
                _ => None,
            };
            invocation(
                ProcessTarget::Agent(a, resume),
                pooled.as_ref().or(a.account.as_ref()),
                a.timeout,
                metadata,
                cfg,
            )
        }
        Target::Workflow(w) => Err(SpecError(format!(
            "workflow {:?} runs through the workflow runner, not as one process",
            w.workflow
        ))),
    }
}

/// How long a loop's `--until-cmd` may run when the loop has no timeout of its own.
pub const UNTIL_CMD_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Output kept of an `--until-cmd` (discarded; only a failure to start is noted).
const UNTIL_CMD_OUTPUT_BYTES: usize = 4 << 10;

/// The process of `lp`'s `--until-cmd` (`cmd`) after `run` ([`loops_core::stop`]):
/// `/bin/sh -c cmd` in the target's cwd, with the target's `env` and the run's
/// `LOOPS_*` metadata over the inherited environment (never [`crate::env::PRIVATE_VARS`];
/// not under the target's account profile: it checks the work, it does not do it),
/// bounded by the target's timeout or [`UNTIL_CMD_TIMEOUT`], its output bounded.
pub fn until_invocation(
    lp: &Loop,
    run: &Run,
    cmd: &str,
    cfg: &ExecSettings,
) -> Result<Invocation, SpecError> {
    let (cwd, env) = match &lp.target {
        Target::Command(c) => (c.cwd.clone(), c.env.clone()),
        Target::Agent(a) => (a.cwd.clone(), a.env.clone()),
        Target::Workflow(_) => (None, Default::default()),
    };
    let check = CommandTarget {
        command: cmd.to_owned(),
        args: Vec::new(),
        cwd,
        shell: true,
        env,
        timeout: None,
        idle_timeout: None,
        account: None,
    };
    let mut invocation = invocation(
        ProcessTarget::Command(&check),
        None,
        lp.target.timeout(),
        run_metadata(lp, run),
        cfg,
    )?;
    invocation.timeout = Some(invocation.timeout.unwrap_or(UNTIL_CMD_TIMEOUT));
    invocation.max_output_bytes = UNTIL_CMD_OUTPUT_BYTES;
    Ok(invocation)
}

/// Executable, argv, stdin and environment for a process target, under `account` (if
/// any) with `timeout` and the given `LOOPS_*` metadata.
pub fn invocation(
    target: ProcessTarget<'_>,
    account: Option<&Account>,
    timeout: Option<loops_core::Duration>,
    mut metadata: Vec<(&'static str, String)>,
    cfg: &ExecSettings,
) -> Result<Invocation, SpecError> {
    let home = cfg.home.as_deref();
    let mut invocation = match target {
        ProcessTarget::Command(c) => {
            let base = inherited_env(account, None, &mut metadata)?;
            let mut invocation = if c.shell {
                Invocation::shell(c.command.clone())
            } else {
                Invocation::direct(c.command.clone(), Vec::<String>::new())
            };
            // With a shell, args are appended as single-quoted words.
            invocation.args = c.args.clone();
            invocation.cwd = c.cwd.as_ref().map(PathBuf::from);
            invocation.env = build_env(base, home, &c.env, &metadata);
            invocation
        }
        ProcessTarget::Agent(a, resume) => {
            let tool = account_tool(a.provider);
            let base = inherited_env(account, Some(tool), &mut metadata)?;
            let mut invocation = Invocation::direct(a.provider.executable(), agent_args(a, resume));
            invocation.cwd = a.cwd.as_ref().map(PathBuf::from);
            invocation.env = build_env(base, home, &a.env, &metadata);
            // The prompt goes to stdin only: argv is visible to every user via /proc.
            invocation.stdin = Some(a.prompt.clone().into_bytes());
            invocation
        }
    };
    invocation.timeout = timeout.map(loops_core::Duration::to_std);
    invocation.idle_timeout = match target {
        ProcessTarget::Command(c) => c.idle_timeout,
        ProcessTarget::Agent(a, _) => a.idle_timeout,
    }
    .map(loops_core::Duration::to_std);
    invocation.kill_grace = cfg.kill_grace;
    invocation.max_output_bytes = cfg.max_output_bytes;
    Ok(invocation)
}
