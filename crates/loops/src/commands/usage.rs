//! `usage [--since D] [--by loop|provider|day]`: tokens and cost of agent runs and
//! agent workflow steps, with totals.

use super::Context;
use crate::cli::duration;
use crate::exit::Exit;
use crate::output::{self, outln, print_json, Table};
use crate::Failure;
use clap::Args;
use loops_core::usage::{GroupBy, UsageTotals};
use loops_core::Duration;

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Runs that finished in the last DURATION.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = duration)]
    pub since: Duration,
    /// Group by loop, provider or day (UTC).
    #[arg(long, value_name = "GROUP", default_value = "loop")]
    pub by: String,
}

pub fn run(ctx: &Context, args: UsageArgs) -> Result<Exit, Failure> {
    let by: GroupBy = args.by.parse().map_err(Failure::usage)?;
    let now = output::now();
    let since = now - args.since.to_chrono();
    let report = ctx.reader()?.usage(since, by)?;
    if ctx.json {
        print_json(&report)?;
        return Ok(Exit::Success);
    }
    if report.groups.is_empty() {
        outln!(
            "no agent usage recorded since {}",
            output::instant_text(Some(since))
        )?;
        print_budgets(&report.budgets, now)?;
        return Ok(Exit::Success);
    }
    let header = match by {
        GroupBy::Loop => "LOOP",
        GroupBy::Provider => "PROVIDER",
        GroupBy::Day => "DAY (UTC)",
    };
    let mut table = Table::new(vec![header, "RUNS", "STEPS", "INPUT", "OUTPUT", "COST"]);
    let row = |key: &str, t: &UsageTotals| {
        vec![
            key.into(),
            t.runs.to_string().into(),
            t.steps.to_string().into(),
            t.input_tokens.to_string().into(),
            t.output_tokens.to_string().into(),
            cost_text(t).into(),
        ]
    };
    for g in &report.groups {
        table.row(row(&g.key, &g.totals));
    }
    table.row(row("total", &report.total));
    table.print()?;
    print_budgets(&report.budgets, now)?;
    Ok(Exit::Success)
}

/// The budgets against their spend in their current window, after the usage.
fn print_budgets(
    budgets: &[loops_core::budget::BudgetStatus],
    now: loops_core::Instant,
) -> Result<(), Failure> {
    if budgets.is_empty() {
        return Ok(());
    }
    outln!()?;
    super::budget::print_table(budgets, now)
}

/// `$1.2345`, with the runs that reported no price; `-` when none did.
fn cost_text(t: &UsageTotals) -> String {
    match (t.cost_usd, t.unpriced) {
        (None, _) => "-".into(),
        (Some(c), 0) => format!("${c:.4}"),
        (Some(c), n) => format!("${c:.4} ({n} unpriced)"),
    }
}
