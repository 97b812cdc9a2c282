//! `edit`, `rename`, `archive`, `unarchive`: a loop changed in place, its id and run
//! history kept. `edit` takes `create`'s flags, laid over the stored definition by the
//! same functions (`definition`), so it accepts and refuses what `create` does.

use super::Context;
use crate::cli::{ArchiveArgs, EditArgs, LoopArg, RenameArgs};
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use loops_core::Loop;
use loops_runtime::definition;

pub fn edit(ctx: &Context, args: EditArgs) -> Result<Exit, Failure> {
    let now = output::now();
    let client = ctx.client()?;
    let before = client.get(&args.r#loop)?;
    let flags = args.flags();
    let def = definition::edited(&before, &flags, now).map_err(Failure::usage)?;
    if flags.def.preflight {
        definition::preflight(&client, &def.target).map_err(Failure::usage)?;
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
