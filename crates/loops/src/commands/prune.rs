//! `prune [--older-than D] [--keep N] [--dry-run]`. Without flags the daemon's default
//! retention policy applies.

use super::Context;
use crate::cli::PruneArgs;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use loops_store::PrunePolicy;

pub fn run(ctx: &Context, args: PruneArgs) -> Result<Exit, Failure> {
    let now = output::now();
    let policy = if args.older_than.is_none() && args.keep.is_none() {
        loops_runtime::daemon::default_prune_policy(now)
    } else {
        PrunePolicy {
            older_than: args.older_than.map(|d| now - d.to_chrono()),
            keep_per_loop: args.keep,
            keep_events: Some(loops_runtime::daemon::DEFAULT_KEEP_EVENTS),
        }
    };
    let pruned = ctx.client()?.prune(&policy, args.dry_run)?;
    let (count, workflow_runs) = (pruned.runs, pruned.workflow_runs);
    if ctx.json {
        print_json(&serde_json::json!({
            "pruned": if args.dry_run { 0 } else { count },
            "matched": count,
            "workflowRunsMatched": workflow_runs,
            "dryRun": args.dry_run,
        }))?;
    } else if args.dry_run {
        outln!("would prune {count} run(s) and {workflow_runs} workflow run(s)")?;
    } else {
        outln!("pruned {count} run(s) and {workflow_runs} workflow run(s)")?;
    }
    Ok(Exit::Success)
}
