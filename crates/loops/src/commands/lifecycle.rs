//! `pause`, `resume`, `stop`, `remove`.

use super::Context;
use crate::cli::flags::LoopArg;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use clap::Args;
use loops_core::Loop;

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Stop the loop's runs in flight first (SIGTERM to their process groups, SIGKILL
    /// after the kill grace), then remove it.
    #[arg(long)]
    pub force: bool,
}

pub fn pause(ctx: &Context, args: LoopArg) -> Result<Exit, Failure> {
    let lp = ctx.client()?.pause(&args.r#loop, output::now())?;
    report(ctx, &lp, "paused")
}

pub fn resume(ctx: &Context, args: LoopArg) -> Result<Exit, Failure> {
    let lp = ctx.client()?.resume(&args.r#loop, output::now())?;
    report(ctx, &lp, "resumed")
}

pub fn stop(ctx: &Context, args: LoopArg) -> Result<Exit, Failure> {
    let lp = ctx.client()?.stop(&args.r#loop, output::now())?;
    report(ctx, &lp, "stopped")
}

pub fn remove(ctx: &Context, args: RemoveArgs) -> Result<Exit, Failure> {
    let lp = ctx.client()?.remove(&args.r#loop, args.force)?;
    if ctx.json {
        print_json(&serde_json::json!({ "removed": true, "id": lp.id, "name": lp.name }))?;
    } else {
        outln!("removed {} ({})", lp.name, lp.id)?;
    }
    Ok(Exit::Success)
}

fn report(ctx: &Context, lp: &Loop, verb: &str) -> Result<Exit, Failure> {
    let next = output::when(lp.next_run_at, output::now());
    output::report_loop(
        ctx.json,
        lp,
        format_args!("{verb} {} ({}); next run {next}", lp.name, lp.id),
    )
}
