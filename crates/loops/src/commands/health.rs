//! `health [--label L]…`: one line per active (or parked) loop with its verdict; exits
//! 1 when any loop fails, so it can drive monitoring. The rules are
//! `loops_core::health`'s (README, "Health").

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, Cell, Table};
use crate::Failure;
use clap::Args;
use loops_core::health::{age_text, Verdict};

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Only loops with this label (repeatable: loops with all of them).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
}

pub fn run(ctx: &Context, args: HealthArgs) -> Result<Exit, Failure> {
    let now = output::now();
    let report = ctx.reader()?.health(now, &args.labels)?;
    let verdict = report.verdict();
    let exit = if verdict == Verdict::Fail {
        Exit::Failed
    } else {
        Exit::Success
    };
    let counts = [Verdict::Ok, Verdict::Warn, Verdict::Fail].map(|v| report.count(v));
    let empty = report.loops.is_empty();
    if output::print_json_or_empty(ctx.json, || report.json(), empty, "no active loops")? {
        return Ok(exit);
    }
    let mut table = Table::new(vec![
        "LOOP",
        "HEALTH",
        "LAST",
        "LAST SUCCESS",
        "FAILS",
        "SUCCESS",
        "MISSED",
        "SKIPPED",
        "REASON",
    ]);
    for line in &report.loops {
        let h = &line.health;
        let last = match (h.last_status, h.last_run_at) {
            (Some(status), Some(at)) => format!("{status} {} ago", age_text(now - at)),
            _ => "-".into(),
        };
        table.row(vec![
            line.loop_name.as_str().into(),
            verdict_cell(h.verdict),
            last.into(),
            h.last_success_at
                .map_or_else(|| "-".into(), |t| format!("{} ago", age_text(now - t)))
                .into(),
            h.consecutive_failures.to_string().into(),
            h.success_rate
                .map_or_else(
                    || "-".into(),
                    |r| format!("{:.0}% of {}", r * 100.0, h.rated_runs),
                )
                .into(),
            h.missed_slots.to_string().into(),
            h.skipped_slots.to_string().into(),
            h.reasons.join("; ").into(),
        ]);
    }
    table.print()?;
    outln!(
        "{}: {} ok, {} warn, {} fail",
        verdict,
        counts[0],
        counts[1],
        counts[2]
    )?;
    Ok(exit)
}

fn verdict_cell(v: Verdict) -> Cell {
    output::status_cell(match v {
        Verdict::Ok => "succeeded",
        Verdict::Warn => "skipped",
        Verdict::Fail => "failed",
    })
    .with_text(v.as_str())
}
