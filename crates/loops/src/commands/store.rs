//! `store copy --to postgres://… [--force] [--dry-run]`: moves the data dir's SQLite
//! store to PostgreSQL (issue #12), keeping every id, instant and event number; with
//! `--store postgres://… store copy --to sqlite:PATH`, a PostgreSQL store back into a
//! SQLite file (issue #23).

use super::Context;
use crate::cli::StoreArg;
use crate::exit::Exit;
use crate::output::{outln, print_json};
use crate::Failure;
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy everything (loops, workflow specs, runs, workflow runs, notification
    /// deliveries, events) from the data dir's SQLite store into a PostgreSQL
    /// database — or, with --store postgres://… and --to sqlite:PATH, from PostgreSQL
    /// into a SQLite file — keeping ids and history; refuses a target that holds data
    /// unless --force.
    Copy(StoreCopyArgs),
}

#[derive(Debug, Args)]
pub struct StoreCopyArgs {
    /// The target database: a postgres:// URL (LOOPS_STORE does not name it), or
    /// sqlite:PATH for a SQLite file (from a PostgreSQL --store).
    #[arg(long, value_name = "URL")]
    pub to: StoreArg,
    /// Replace what the target holds (refused while a runner is live there).
    #[arg(long)]
    pub force: bool,
    /// Only read the source and print the counts; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(ctx: &Context, cmd: StoreCommand) -> Result<Exit, Failure> {
    match cmd {
        StoreCommand::Copy(args) => copy(ctx, args),
    }
}

fn copy(ctx: &Context, args: StoreCopyArgs) -> Result<Exit, Failure> {
    let to_sqlite = args.to.as_str().starts_with("sqlite:");
    if to_sqlite && ctx.store_url().is_none() {
        return Err(Failure::usage(
            "store copy --to sqlite:PATH reads a PostgreSQL store: give it with --store \
             postgres://… (a SQLite store is copied with `loops backup`)",
        ));
    }
    if !to_sqlite && ctx.store_url().is_some() {
        return Err(Failure::usage(
            "store copy reads the data dir's SQLite store: run it without --store / LOOPS_STORE \
             (the target is --to)",
        ));
    }
    let report = ctx
        .reader()?
        .copy_store_to(args.to.as_str(), args.force, args.dry_run)?;
    if ctx.json {
        print_json(&report)?;
        return Ok(Exit::Success);
    }
    let c = &report.counts;
    let verb = if report.dry_run {
        "would copy"
    } else {
        "copied"
    };
    let schema = match (report.dry_run, report.target_migrations) {
        (_, 0) => String::new(),
        (true, n) => format!(" (its schema would get {n} migration(s); the dry run applied none)"),
        (false, n) => format!(" (its schema got {n} migration(s))"),
    };
    outln!(
        "{verb} {} loops, {} workflow specs, {} runs, {} workflow runs ({} steps, {} workflow \
         events), {} notification deliveries, {} events from {} to {}{}{schema}",
        c.loops,
        c.workflows,
        c.runs,
        c.workflow_runs,
        c.step_runs,
        c.workflow_events,
        c.deliveries,
        c.events,
        report.from,
        report.to,
        if report.replaced {
            " (replacing what it held)"
        } else {
            ""
        }
    )?;
    Ok(Exit::Success)
}
