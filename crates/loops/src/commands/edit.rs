//! `edit`, `rename`, `archive`, `unarchive`: a loop changed in place, its id and run
//! history kept. `edit` takes `create`'s flags, laid over the stored definition by the
//! same functions (`definition`), so it accepts and refuses what `create` does.

use super::definition::{self, AgentFlags, CommandFlags};
use super::Context;
use crate::cli::{ArchiveArgs, ClearField, EditArgs, LoopArg, RenameArgs};
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use loops_core::{Loop, Target};
use loops_runtime::client::LoopDefinition;

pub fn edit(ctx: &Context, args: EditArgs) -> Result<Exit, Failure> {
    let now = output::now();
    let client = ctx.client()?;
    let before = client.get(&args.r#loop)?;
    check_kind(&before, &args)?;
    let mut def = LoopDefinition::from(&before);
    for field in &args.clear {
        clear(&mut def, *field)?;
    }
    for label in &args.unlabels {
        loops_core::validate::label(label).map_err(|e| Failure::usage(e.to_string()))?;
        def.labels.retain(|l| l != label);
    }
    for key in &args.unset_env {
        match &mut def.target {
            Target::Command(c) => c.env.remove(key),
            Target::Agent(a) => a.env.remove(key),
            Target::Workflow(_) => {
                return Err(kind_error(&before, "--unset-env", "command or agent"))
            }
        };
    }
    if let Some(s) = definition::schedule(&args.def, Some(&def.schedule), now)? {
        def.schedule = s;
    }
    def.target = target(def.target, &args)?;
    definition::apply(&mut def, &args.def, now)?;
    if args.def.preflight {
        definition::preflight(&client, &def.target)?;
    }
    let mut after = client.edit(before.id.as_str(), def, now)?;
    if ctx.json {
        output::redact_loop(&mut after);
        return print_json(&after).map(|()| Exit::Success);
    }
    let changed = changes(&before, &after);
    outln!(
        "edited {} ({}): {}; next run {}",
        after.name,
        after.id,
        if changed.is_empty() {
            "nothing changed".to_owned()
        } else {
            format!("changed {}", changed.join(", "))
        },
        output::when(after.next_run_at, now)
    )?;
    Ok(Exit::Success)
}

/// The target flags laid over the loop's target (of the same type: see
/// [`check_kind`]).
fn target(target: Target, a: &EditArgs) -> Result<Target, Failure> {
    Ok(match target {
        Target::Command(t) => {
            let flags = CommandFlags {
                cmd: a.cmd.clone(),
                shell: match (a.shell, a.no_shell) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                args: (!a.args.is_empty()).then(|| a.args.clone()),
            };
            Target::Command(definition::command_target(Some(t), flags, &a.def)?)
        }
        Target::Agent(t) => {
            let flags = AgentFlags {
                provider: a.provider.as_deref(),
                prompt: a.prompt.as_deref(),
                prompt_file: a.prompt_file.as_deref(),
                options: &a.agent,
            };
            Target::Agent(definition::agent_target(Some(t), flags, &a.def)?)
        }
        Target::Workflow(t) => Target::Workflow(definition::workflow_target(
            Some(t),
            a.workflow.as_deref(),
            &a.def,
        )?),
    })
}

/// A target's type is fixed: flags of another type are refused, naming the loop's.
fn check_kind(lp: &Loop, a: &EditArgs) -> Result<(), Failure> {
    let o = &a.agent;
    let command = [
        ("--cmd", a.cmd.is_some()),
        ("--no-shell", a.no_shell),
        ("--shell", a.shell),
        ("arguments after `--`", !a.args.is_empty()),
    ];
    let agent = [
        ("--provider", a.provider.is_some()),
        ("--prompt", a.prompt.is_some()),
        ("--prompt-file", a.prompt_file.is_some()),
        ("--model", o.model.is_some()),
        ("--agent", o.agent.is_some()),
        ("--auth-profile", o.auth_profile.is_some()),
        ("--config-isolation", o.config_isolation.is_some()),
        ("--config-override", !o.config_overrides.is_empty()),
    ];
    let workflow = [("--workflow", a.workflow.is_some())];
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

fn kind_error(lp: &Loop, flag: &str, kind: &str) -> Failure {
    Failure::usage(format!(
        "{flag} is for {kind} loops; loop {:?} runs a {} target (a target's type cannot be changed: create a new loop)",
        lp.name,
        lp.target.kind()
    ))
}

/// `--clear FIELD`.
fn clear(def: &mut LoopDefinition, field: ClearField) -> Result<(), Failure> {
    let kind = def.target.kind();
    let wrong = || {
        Failure::usage(format!(
            "--clear {} is not a setting of a {kind} loop",
            field_name(field)
        ))
    };
    match field {
        ClearField::Description => def.description = None,
        ClearField::ExpiresAt => def.policy.expires_at = None,
        ClearField::Jitter => def.policy.jitter_ms = 0,
        ClearField::Labels => def.labels.clear(),
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
        | ClearField::ConfigOverrides => {
            let Target::Agent(a) = &mut def.target else {
                return Err(wrong());
            };
            match field {
                ClearField::Model => a.model = None,
                ClearField::Agent => a.agent = None,
                ClearField::AuthProfile => a.auth_profile = None,
                _ => a.config_overrides.clear(),
            }
        }
    }
    Ok(())
}

/// The flag value of `field` (`auth-profile`).
fn field_name(field: ClearField) -> String {
    use clap::ValueEnum;
    field
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
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
    if ctx.json {
        return report_json(&lp);
    }
    outln!("renamed {} to {} ({})", before.name, lp.name, lp.id)?;
    Ok(Exit::Success)
}

pub fn archive(ctx: &Context, args: ArchiveArgs) -> Result<Exit, Failure> {
    let lp = ctx
        .client()?
        .archive(&args.r#loop, args.free_name, output::now())?;
    if ctx.json {
        return report_json(&lp);
    }
    outln!(
        "archived {} ({}); `loops unarchive {}` brings it back",
        lp.name,
        lp.id,
        lp.id
    )?;
    Ok(Exit::Success)
}

pub fn unarchive(ctx: &Context, args: LoopArg) -> Result<Exit, Failure> {
    let lp = ctx.client()?.unarchive(&args.r#loop, output::now())?;
    if ctx.json {
        return report_json(&lp);
    }
    outln!(
        "unarchived {} ({}), paused; `loops resume {}` schedules it again",
        lp.name,
        lp.id,
        lp.name
    )?;
    Ok(Exit::Success)
}

fn report_json(lp: &Loop) -> Result<Exit, Failure> {
    let mut shown = lp.clone();
    output::redact_loop(&mut shown);
    print_json(&shown)?;
    Ok(Exit::Success)
}
