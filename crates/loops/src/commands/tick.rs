//! `tick`: one scheduler pass from the command line (e.g. from system cron), waiting
//! for the runs it started.

use super::{runtime, Context};
use crate::exit::Exit;
use crate::output::outln;
use crate::output::print_json;
use crate::Failure;
use clap::Args;
use loops_runtime::engine::DEFAULT_MAX_CONCURRENT;
use std::num::NonZeroUsize;

#[derive(Debug, Args)]
pub struct TickArgs {
    /// Most runs executing at once (at least 1).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT)]
    pub max_concurrent: NonZeroUsize,
}

pub fn run(ctx: &Context, args: TickArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let report = runtime()?.block_on(client.tick(args.max_concurrent))?;
    let runs = &report.claimed;
    if ctx.json {
        print_json(&serde_json::json!({
            "claimed": runs,
            "skipped": report.skipped,
            "recovered": report.recovered,
            "expired": report.expired,
        }))?;
    } else {
        outln!(
            "tick: {} run(s), {} skipped, {} recovered, {} expired",
            runs.len(),
            report.skipped.len(),
            report.recovered.len(),
            report.expired.len()
        )?;
        for run in runs {
            outln!(
                "  {} {} attempt {}: {}",
                run.id,
                run.loop_name,
                run.attempt,
                run.status
            )?;
        }
    }
    Ok(Exit::Success)
}
