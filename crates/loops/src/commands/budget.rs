//! `budget set|list|clear`: the store-wide budgets per provider and account (issue #20
//! item 7, `loops_core::budget`).

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, print_json, Table};
use crate::Failure;
use clap::{Args, Subcommand};
use loops_core::budget::BudgetStatus;

#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Set the budget of KEY (`provider=NAME[,account=PROFILE]`; without an account,
    /// every account of the provider): the limits given replace the key's.
    Set(BudgetSetArgs),
    /// The store-wide budgets, each against its spend in its current window.
    List,
    /// Remove the budget of exactly KEY (its loops are no longer held by it).
    Clear(BudgetClearArgs),
}

#[derive(Debug, Args)]
pub struct BudgetSetArgs {
    /// `provider=claude` or `provider=claude,account=work`.
    pub key: String,
    /// Tokens (input + output) per UTC day or week: `N/day` or `N/week`.
    #[arg(long, value_name = "N/WINDOW")]
    pub tokens: Option<String>,
    /// US dollars (the reported cost) per UTC day or week: `X/day` or `X/week`.
    #[arg(long, value_name = "X/WINDOW")]
    pub usd: Option<String>,
}

#[derive(Debug, Args)]
pub struct BudgetClearArgs {
    /// `provider=claude` or `provider=claude,account=work`.
    pub key: String,
}

pub fn run(ctx: &Context, command: BudgetCommand) -> Result<Exit, Failure> {
    match command {
        BudgetCommand::Set(args) => set(ctx, args),
        BudgetCommand::List => list(ctx),
        BudgetCommand::Clear(args) => clear(ctx, args),
    }
}

fn set(ctx: &Context, args: BudgetSetArgs) -> Result<Exit, Failure> {
    let now = output::now();
    let client = ctx.client()?;
    let budget = client.set_budget(&args.key, args.tokens.as_deref(), args.usd.as_deref(), now)?;
    if ctx.json {
        print_json(&budget)?;
        return Ok(Exit::Success);
    }
    let status = client.budget_status(&[], true, now)?;
    for s in status.iter().filter(|s| s.scope == budget.scope()) {
        outln!("{} {}: {}", s.scope, s.metric, s.line())?;
    }
    Ok(Exit::Success)
}

fn list(ctx: &Context) -> Result<Exit, Failure> {
    let now = output::now();
    let status = ctx.reader()?.budget_status(&[], true, now)?;
    let empty = "no store-wide budget (loops budget set provider=NAME --tokens N/day)";
    if output::print_json_or_empty(ctx.json, || &status, status.is_empty(), empty)? {
        return Ok(Exit::Success);
    }
    print_table(&status, now)?;
    Ok(Exit::Success)
}

/// One line per budget: its scope, what it limits, the spend against it, the reset.
pub(crate) fn print_table(
    status: &[BudgetStatus],
    now: loops_core::Instant,
) -> Result<(), Failure> {
    let mut table = Table::new(vec!["BUDGET", "LIMITS", "SPENT", "STATE", "RESETS"]);
    for s in status {
        table.row(vec![
            s.loop_name
                .as_ref()
                .map_or_else(|| s.scope.to_string(), |name| format!("loop {name}"))
                .into(),
            format!("{} {}/{}", s.metric, s.limit, s.window).into(),
            s.line().into(),
            output::status_cell(if s.spent_out { "held" } else { "ok" }),
            output::when(Some(s.resets_at), now).into(),
        ]);
    }
    table.print()?;
    Ok(())
}

fn clear(ctx: &Context, args: BudgetClearArgs) -> Result<Exit, Failure> {
    let cleared = ctx.client()?.clear_budget(&args.key, output::now())?;
    if ctx.json {
        print_json(&cleared)?;
        return Ok(Exit::Success);
    }
    outln!(
        "removed the budget of {}: its loops are no longer held by it",
        cleared.scope()
    )?;
    Ok(Exit::Success)
}
