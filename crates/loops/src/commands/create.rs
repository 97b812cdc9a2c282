//! `create command|agent|workflow <name>`: flags → a validated [`LoopDefinition`]
//! (through the functions `edit` shares, in `definition`). Everything is checked
//! before the store is touched, so bad input writes nothing.

use super::Context;
use crate::cli::{CommonCreate, CreateCommand};
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use loops_core::{Policy, Target};
use loops_runtime::client::LoopDefinition;
use loops_runtime::definition::{self, AgentFlags, CommandFlags};

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
    let schedule = definition::schedule(flags, None, now)
        .map_err(Failure::usage)?
        .ok_or_else(|| {
            // clap's required group makes this unreachable; keep a clear message anyway.
            Failure::usage("a schedule is required: --at, --every, --cron or --dynamic")
        })?;
    let mut def = LoopDefinition {
        name: common.name.clone(),
        description: None,
        schedule,
        target,
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
    };
    definition::apply(&mut def, flags, now).map_err(Failure::usage)?;
    let client = ctx.client()?;
    if flags.preflight {
        definition::preflight(&client, &def.target).map_err(Failure::usage)?;
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
