//! `runs [loop] [--limit N] [--show-output] [--status S]… [--since D|TIME] [--until
//! D|TIME] [--label L]…` (`--follow`: `runs_follow`).

use super::Context;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json, Table};
use crate::timeparse::parse_past;
use crate::Failure;
use clap::Args;
use loops_core::{Instant, RunStatus};
use loops_runtime::client::RunQuery;
use loops_runtime::definition::parse_enum;

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this loop.
    pub r#loop: Option<String>,
    /// At most N runs (default 20; 0 = all).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Include stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
    /// Only runs with this status (repeatable: any of them): running, succeeded,
    /// failed, timed_out, abandoned, skipped.
    #[arg(long = "status", value_name = "STATUS")]
    pub statuses: Vec<String>,
    /// Only runs started at or after this: a duration ago (1d, 2h) or an instant
    /// (RFC 3339, local "YYYY-MM-DD HH:MM").
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only runs started before this: a duration ago or an instant, as --since.
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Only runs of loops with this label (repeatable: loops with all of them).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Keep printing runs as they start and end, until interrupted (polls the store
    /// four times a second; with --json, one JSON object per line). Takes a loop but
    /// not the other filters.
    #[arg(long, conflicts_with_all = ["statuses", "since", "until", "labels", "limit"])]
    pub follow: bool,
}

pub fn run(ctx: &Context, args: RunsArgs) -> Result<Exit, Failure> {
    if args.follow {
        return super::runs_follow::run(ctx, &args);
    }
    let limit = loops_core::limits::runs_listed(args.limit);
    let now = output::now();
    let statuses = args
        .statuses
        .iter()
        .map(|s| parse_enum::<RunStatus>("--status", s).map_err(Failure::usage))
        .collect::<Result<Vec<_>, _>>()?;
    let query = RunQuery {
        loop_key: args.r#loop.clone(),
        labels: args.labels.clone(),
        statuses,
        since: since("--since", args.since.as_deref(), now)?,
        until: since("--until", args.until.as_deref(), now)?,
        limit,
    };
    let client = ctx.reader()?;
    let mut runs = client.query_runs(&query)?;
    // Before redaction: with --show-output a failed run's line quotes its output.
    let errors: Vec<String> = runs
        .iter()
        .map(|r| output::error_line(r, args.show_output))
        .collect();
    if !args.show_output {
        runs.iter_mut().for_each(output::redact_run);
    }
    if ctx.json {
        let ids: Vec<_> = runs.iter().map(|r| r.id.clone()).collect();
        let deliveries = client.deliveries_of_runs(&ids)?;
        print_json(&output::runs_with_notifications(
            runs,
            deliveries,
            args.show_output,
        ))?;
        return Ok(Exit::Success);
    }
    if runs.is_empty() {
        let filtered = query.loop_key.is_some()
            || !query.labels.is_empty()
            || !query.statuses.is_empty()
            || query.since.is_some()
            || query.until.is_some();
        outln!(
            "{}",
            if filtered {
                "no matching runs"
            } else {
                "no runs yet"
            }
        )?;
        return Ok(Exit::Success);
    }
    // The account a run ran on, when one of them names one (pooled loops choose it).
    let accounts = runs.iter().any(|r| r.account.is_some());
    let mut headers = vec![
        "RUN",
        "LOOP",
        "SCHEDULED",
        "ATTEMPT",
        "STATUS",
        "DURATION",
        "EXIT",
        "CLASS",
    ];
    if accounts {
        headers.push("ACCOUNT");
    }
    headers.push("ERROR");
    let mut table = Table::new(headers);
    for (run, error) in runs.iter().zip(errors) {
        let mut row = vec![
            run.id.as_str().into(),
            run.loop_name.as_str().into(),
            output::when(Some(run.scheduled_for), now).into(),
            run.attempt.to_string().into(),
            output::run_status(run.status),
            output::duration_cell(run.duration_ms),
            output::exit_cell(run.exit_code),
            output::failure_text(run, now)
                .unwrap_or_else(|| "-".into())
                .into(),
        ];
        if accounts {
            row.push(run.account.as_deref().unwrap_or("-").into());
        }
        row.push(error.into());
        table.row(row);
    }
    table.print()?;
    if args.show_output {
        for run in &runs {
            outln!(
                "\n--- {} {} attempt {} ---",
                run.id,
                run.loop_name,
                run.attempt
            )?;
            output::print_agent_result(run)?;
            output::print_streams(run.stdout.as_deref(), run.stderr.as_deref(), args.raw)?;
        }
    }
    Ok(Exit::Success)
}

/// `--since` / `--until`: a duration ago or an instant.
fn since(flag: &str, text: Option<&str>, now: Instant) -> Result<Option<Instant>, Failure> {
    text.map(|t| parse_past(flag, t, now).map_err(Failure::usage))
        .transpose()
}
