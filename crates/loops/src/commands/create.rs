//! `create command|agent|workflow <name>`: flags → a validated
//! [`LoopDefinition`](loops_runtime::client::LoopDefinition)
//! (through the functions `edit` shares, in `definition`). Everything is checked
//! before the store is touched, so bad input writes nothing.

use super::Context;
use crate::cli::flags::SCHEDULE_FLAGS;
use crate::cli::flags::{AgentOptions, DefinitionArgs};
use crate::exit::Exit;
use crate::output;
use crate::Failure;
use clap::{Args, Subcommand};
use loops_core::Target;
use loops_runtime::definition::{self, AgentFlags, CommandFlags};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
// Parsed once per process: the agent's flags being the most is not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum CreateCommand {
    /// A loop that runs a shell command (or an executable with --no-shell).
    Command(CreateCommandArgs),
    /// A loop that runs a headless AI coding agent with a prompt.
    Agent(CreateAgentArgs),
    /// A loop that runs a stored workflow.
    Workflow(CreateWorkflowArgs),
}

/// Flags shared by every `create` subcommand.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").args(SCHEDULE_FLAGS).required(true).multiple(false)))]
pub struct CommonCreate {
    /// Unique loop name. Names that look like an id (12 lowercase hex characters) or
    /// like a prefix of an existing loop's id are refused: loops are resolved by exact
    /// id first, then exact name, then unambiguous id prefix.
    pub name: String,
    #[command(flatten)]
    pub def: DefinitionArgs,
}

#[derive(Debug, Args)]
pub struct CreateCommandArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// The command line (run by /bin/sh unless --no-shell); with ARGS at most 64 KiB.
    #[arg(long, value_name = "COMMAND")]
    pub cmd: String,
    /// Execute the command directly; arguments go after `--` (given arguments, it is
    /// executed directly anyway).
    #[arg(long)]
    pub no_shell: bool,
    /// Arguments: the command is then executed directly, not by /bin/sh.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CreateAgentArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// claude, cursor, codewith, aicopilot, opencode or codex.
    #[arg(long, value_name = "PROVIDER")]
    pub provider: String,
    /// The prompt, written to the agent's stdin (at most 1 MiB).
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "prompt_file",
        required_unless_present = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from a file (at most 1 MiB; stored as text, with its absolute
    /// path).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    #[command(flatten)]
    pub options: AgentOptions,
}

#[derive(Debug, Args)]
pub struct CreateWorkflowArgs {
    #[command(flatten)]
    pub common: CommonCreate,
    /// Name of the stored workflow to run (an active workflow of that name must exist).
    #[arg(long, value_name = "WORKFLOW")]
    pub workflow: String,
    /// A value for one of the workflow's params, for every run of this loop
    /// (repeatable; checked against the spec).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
}

pub fn run(ctx: &Context, cmd: CreateCommand) -> Result<Exit, Failure> {
    let now = output::now();
    let (common, target): (CommonCreate, _) = match cmd {
        CreateCommand::Command(args) => {
            // Without --no-shell, the default: a shell for one string, none for
            // a program and its arguments (the API's default too).
            let flags = CommandFlags {
                cmd: Some(args.cmd),
                shell: args.no_shell.then_some(false),
                args: Some(args.args),
            };
            let target = definition::command_target(None, flags, &args.common.def.flags())
                .map_err(Failure::usage)?;
            (args.common, Target::Command(target))
        }
        CreateCommand::Agent(args) => {
            let options = args.options.flags();
            let flags = AgentFlags {
                provider: Some(&args.provider),
                prompt: args.prompt.as_deref(),
                prompt_file: args.prompt_file.as_deref(),
                options: &options,
            };
            let target = definition::agent_target(None, flags, &args.common.def.flags())
                .map_err(Failure::usage)?;
            (args.common, Target::Agent(target))
        }
        CreateCommand::Workflow(args) => {
            let flags = definition::WorkflowFlags {
                workflow: Some(&args.workflow),
                params: &args.params,
                unset_params: &[],
            };
            let target = definition::workflow_target(None, flags, &args.common.def.flags())
                .map_err(Failure::usage)?;
            (args.common, Target::Workflow(target))
        }
    };
    let flags = &common.def.flags();
    // A missing schedule is refused by clap's required group before this.
    let def =
        definition::created(common.name.clone(), target, flags, now).map_err(Failure::usage)?;
    let client = ctx.client()?;
    if flags.preflight {
        definition::preflight(&client, &def.target).map_err(Failure::usage)?;
    }
    let lp = client.create(def, now)?;
    let next = output::when(lp.next_run_at, now);
    output::report_loop(
        ctx.json,
        &lp,
        format_args!("created {} ({}); next run {next}", lp.name, lp.id),
    )
}
