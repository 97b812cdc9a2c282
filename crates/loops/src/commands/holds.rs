//! `holds` and `holds clear`: the accounts a usage limit holds (issue #20 item 2,
//! `loops_core::hold`), and releasing one by hand.

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, print_json, Table};
use crate::Failure;
use clap::{Args, Subcommand};
use loops_core::Provider;

#[derive(Debug, Args)]
pub struct HoldsArgs {
    #[command(subcommand)]
    pub command: Option<HoldsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum HoldsCommand {
    /// Release the holds of PROVIDER (on ACCOUNT, else on every account of it): its
    /// loops are due again at once. For when you know the limit was lifted.
    Clear(HoldsClearArgs),
}

#[derive(Debug, Args)]
pub struct HoldsClearArgs {
    /// The agent CLI (claude, codex, …).
    pub provider: String,
    /// The account profile (`default` for agents without --account).
    pub account: Option<String>,
}

pub fn run(ctx: &Context, args: HoldsArgs) -> Result<Exit, Failure> {
    match args.command {
        None => list(ctx),
        Some(HoldsCommand::Clear(args)) => clear(ctx, args),
    }
}

fn list(ctx: &Context) -> Result<Exit, Failure> {
    let holds = ctx.reader()?.holds()?;
    if output::print_json_or_empty(ctx.json, || &holds, holds.is_empty(), "no account is held")? {
        return Ok(Exit::Success);
    }
    let now = output::now();
    let mut table = Table::new(vec![
        "PROVIDER",
        "ACCOUNT",
        "STATE",
        "HELD UNTIL",
        "SINCE",
        "REASON",
    ]);
    for h in &holds {
        // Past its instant a hold stops nothing: it waits for a run to show the limit
        // is gone (and keeps its probe count meanwhile).
        let state = if h.is_active(now) { "held" } else { "probing" };
        table.row(vec![
            h.provider.as_str().into(),
            h.account.clone().into(),
            output::status_cell(state),
            output::when(Some(h.held_until), now).into(),
            output::relative(h.since, now).into(),
            h.reason.clone().into(),
        ]);
    }
    table.print()?;
    Ok(Exit::Success)
}

fn clear(ctx: &Context, args: HoldsClearArgs) -> Result<Exit, Failure> {
    let provider: Provider = args
        .provider
        .parse()
        .map_err(|e: String| Failure::usage(e.replace("Provider", "PROVIDER")))?;
    let cleared = ctx
        .client()?
        .clear_holds(provider, args.account.as_deref())?;
    if ctx.json {
        print_json(&cleared)?;
        return Ok(Exit::Success);
    }
    if cleared.is_empty() {
        let on = args
            .account
            .map_or_else(String::new, |a| format!(" on account {a:?}"));
        outln!("{provider} is not held{on}")?;
        return Ok(Exit::Success);
    }
    for h in &cleared {
        outln!(
            "released {}/{}: its loops are due again",
            h.provider,
            h.account
        )?;
    }
    Ok(Exit::Success)
}
