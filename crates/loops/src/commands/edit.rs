//! `edit`, `rename`, `archive`, `unarchive`: a loop changed in place, its id and run
//! history kept. `edit` takes `create`'s flags, laid over the stored definition by the
//! same functions (`definition`), so it accepts and refuses what `create` does.

use super::Context;
use crate::cli::flags::LoopArg;
use crate::cli::flags::SCHEDULE_FLAGS;
use crate::cli::flags::{AgentOptions, DefinitionArgs};
use crate::exit::Exit;
use crate::output;
use crate::Failure;
use clap::Args;
use loops_core::Loop;
use loops_runtime::definition;
use std::path::PathBuf;

/// `loops edit`: the loop, then any flag of `create` (a flag not given leaves its
/// part as it is), and the flags that take things away. Removals and clears apply
/// first, then the flags that set values.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").args(SCHEDULE_FLAGS).multiple(false)))]
pub struct EditArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    #[command(flatten)]
    pub def: DefinitionArgs,
    /// Remove a label (repeatable; a label the loop does not have is ignored).
    #[arg(long = "unlabel", value_name = "NAME")]
    pub unlabels: Vec<String>,
    /// Remove an environment variable (repeatable).
    #[arg(long = "unset-env", value_name = "KEY")]
    pub unset_env: Vec<String>,
    /// Clear a setting (repeatable): description, cwd, timeout, env, account, args,
    /// model, agent, auth-profile, config-overrides, expires-at, jitter, labels,
    /// notify (all notification settings), notify-cmd, notify-url, max-failures,
    /// idle-timeout, until-cmd, until-output, max-runs, session (back to fresh),
    /// budget-tokens, budget-usd, account-pool, permission-mode, sandbox, effort,
    /// variant, add-dirs, max-turns, allow-tools, deny-tools.
    #[arg(long = "clear", value_name = "FIELD", value_parser = clear_field())]
    pub clear: Vec<definition::ClearField>,

    /// (command loops) The command line.
    #[arg(long, value_name = "COMMAND")]
    pub cmd: Option<String>,
    /// (command loops) Execute the command directly; arguments go after `--`.
    #[arg(long, conflicts_with = "shell")]
    pub no_shell: bool,
    /// (command loops) Run the command by /bin/sh again.
    #[arg(long)]
    pub shell: bool,
    /// (command loops) Arguments for --no-shell commands (replacing the stored ones).
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,

    /// (agent loops) claude, cursor, codewith, aicopilot, opencode or codex.
    #[arg(long, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// (agent loops) The prompt, written to the agent's stdin (at most 1 MiB).
    #[arg(long, value_name = "TEXT", conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// (agent loops) Read the prompt from a file (at most 1 MiB).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    #[command(flatten)]
    pub agent: AgentOptions,

    /// (workflow loops) Name of the stored workflow to run (an active workflow).
    #[arg(long, value_name = "WORKFLOW")]
    pub workflow: Option<String>,
    /// (workflow loops) Set a value for one of the workflow's params (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// (workflow loops) Remove a param's value: the spec's default applies (repeatable).
    #[arg(long = "unset-param", value_name = "NAME")]
    pub unset_params: Vec<String>,
}

/// `--clear FIELD`: the runtime's fields, by the names it gives them, listed in `--help`.
fn clear_field() -> impl clap::builder::TypedValueParser<Value = definition::ClearField> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(
        definition::ClearField::ALL.map(definition::ClearField::as_str),
    )
    .try_map(|name| name.parse::<definition::ClearField>())
}

#[derive(Debug, Args)]
pub struct RenameArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// The new name (the rules of `create`: unique, not shaped like an id).
    pub new_name: String,
}

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Also free the name for a new loop: the archived loop is renamed NAME~ID.
    #[arg(long)]
    pub free_name: bool,
}

impl EditArgs {
    pub fn flags(&self) -> definition::EditFlags {
        definition::EditFlags {
            def: self.def.flags(),
            unlabels: self.unlabels.clone(),
            unset_env: self.unset_env.clone(),
            clear: self.clear.clone(),
            cmd: self.cmd.clone(),
            no_shell: self.no_shell,
            shell: self.shell,
            args: self.args.clone(),
            provider: self.provider.clone(),
            prompt: self.prompt.clone(),
            prompt_file: self.prompt_file.clone(),
            agent: self.agent.flags(),
            workflow: self.workflow.clone(),
            params: self.params.clone(),
            unset_params: self.unset_params.clone(),
        }
    }
}

pub fn edit(ctx: &Context, args: EditArgs) -> Result<Exit, Failure> {
    let now = output::now();
    let client = ctx.client()?;
    let before = client.get(&args.r#loop)?;
    let flags = args.flags();
    let def = definition::edited(&before, &flags, now).map_err(Failure::usage)?;
    if flags.def.preflight {
        definition::preflight(&client, &def.target).map_err(Failure::usage)?;
    }
    let after = client.edit(before.id.as_str(), def, now)?;
    let changed = changes(&before, &after);
    let changed = if changed.is_empty() {
        "nothing changed".to_owned()
    } else {
        format!("changed {}", changed.join(", "))
    };
    let next = output::when(after.next_run_at, now);
    output::report_loop(
        ctx.json,
        &after,
        format_args!(
            "edited {} ({}): {changed}; next run {next}",
            after.name, after.id
        ),
    )
}

/// The parts of a loop an edit changed, for the one-line report.
fn changes(before: &Loop, after: &Loop) -> Vec<&'static str> {
    let parts = [
        ("name", before.name != after.name),
        ("description", before.description != after.description),
        ("schedule", before.schedule != after.schedule),
        ("target", before.target != after.target),
        ("policy", before.policy() != after.policy()),
        ("labels", before.labels != after.labels),
        ("notifications", before.notify != after.notify),
    ];
    parts
        .into_iter()
        .filter(|(_, changed)| *changed)
        .map(|(name, _)| name)
        .collect()
}

pub fn rename(ctx: &Context, args: RenameArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let before = client.get(&args.r#loop)?;
    let lp = client.rename(before.id.as_str(), &args.new_name, output::now())?;
    output::report_loop(
        ctx.json,
        &lp,
        format_args!("renamed {} to {} ({})", before.name, lp.name, lp.id),
    )
}

pub fn archive(ctx: &Context, args: ArchiveArgs) -> Result<Exit, Failure> {
    let lp = ctx
        .client()?
        .archive(&args.r#loop, args.free_name, output::now())?;
    output::report_loop(
        ctx.json,
        &lp,
        format_args!(
            "archived {} ({}); `loops unarchive {}` brings it back",
            lp.name, lp.id, lp.id
        ),
    )
}

pub fn unarchive(ctx: &Context, args: LoopArg) -> Result<Exit, Failure> {
    let lp = ctx.client()?.unarchive(&args.r#loop, output::now())?;
    output::report_loop(
        ctx.json,
        &lp,
        format_args!(
            "unarchived {} ({}), paused; `loops resume {}` schedules it again",
            lp.name, lp.id, lp.name
        ),
    )
}
