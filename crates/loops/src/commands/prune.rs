//! `prune [--older-than D] [--keep N] [--keep-backups N] [--dry-run]`. Without flags the
//! daemon's default retention policy applies; `--keep-backups` alone prunes only the
//! backups in `<data dir>/backups`.

use super::Context;
use crate::cli::duration;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use clap::Args;
use loops_core::Duration;
use loops_store::PrunePolicy;

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Delete finished runs older than DURATION.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub older_than: Option<Duration>,
    /// Keep the newest N runs of every loop.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Delete all but the newest N backups of each kind (manual, before-restore,
    /// before-migration) in <data dir>/backups; alone, prunes only backups.
    #[arg(long, value_name = "N")]
    pub keep_backups: Option<usize>,
    /// Only count what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(ctx: &Context, args: PruneArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let backups = match args.keep_backups {
        Some(keep) => Some(client.prune_backups(keep, args.dry_run)?),
        None => None,
    };
    if let Some(removed) = &backups {
        if args.older_than.is_none() && args.keep.is_none() {
            if ctx.json {
                print_json(&serde_json::json!({
                    "backupsMatched": removed,
                    "dryRun": args.dry_run,
                }))?;
            } else {
                backups_text(removed, args.dry_run)?;
            }
            return Ok(Exit::Success);
        }
    }
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
    let pruned = client.prune(&policy, args.dry_run)?;
    let (count, workflow_runs) = (pruned.runs, pruned.workflow_runs);
    if ctx.json {
        let mut doc = serde_json::json!({
            "pruned": if args.dry_run { 0 } else { count },
            "matched": count,
            "workflowRunsMatched": workflow_runs,
            "dryRun": args.dry_run,
        });
        if let Some(removed) = &backups {
            doc["backupsMatched"] = serde_json::json!(removed);
        }
        print_json(&doc)?;
        return Ok(Exit::Success);
    }
    if let Some(removed) = &backups {
        backups_text(removed, args.dry_run)?;
    }
    if args.dry_run {
        outln!("would prune {count} run(s) and {workflow_runs} workflow run(s)")?;
    } else {
        outln!("pruned {count} run(s) and {workflow_runs} workflow run(s)")?;
    }
    Ok(Exit::Success)
}

fn backups_text(removed: &[std::path::PathBuf], dry_run: bool) -> Result<(), Failure> {
    let verb = if dry_run { "would remove" } else { "removed" };
    outln!("{verb} {} backup(s)", removed.len())?;
    for path in removed {
        outln!("  {}", path.display())?;
    }
    Ok(())
}
