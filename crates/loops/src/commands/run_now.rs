//! `run-now <loop> [--show-output] [--on-runner]`: runs the due slot (advancing the
//! loop) when one is due, else an ad-hoc slot at now — here, or on a live runner of the
//! store; exits non-zero when the run does not succeed.

use super::{runtime, Context};
use crate::cli::Span;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use clap::Args;
use loops_core::RunStatus;
use loops_runtime::client::RunNowJson;
use loops_runtime::client::DEFAULT_RUNNER_WAIT;

#[derive(Debug, Args)]
pub struct RunNowArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Print the run's stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
    /// Start the run even while another run of the loop is in flight (by default a
    /// loop with overlap `skip` refuses a second concurrent run).
    #[arg(long)]
    pub allow_overlap: bool,
    /// Ask a live runner of the store (PostgreSQL) to run it, instead of running it in
    /// this process; waits for the run to end, as without.
    #[arg(long)]
    pub on_runner: bool,
    /// With --on-runner: how long a runner may take to start it before the request is
    /// withdrawn.
    #[arg(long, value_name = "DURATION", default_value_t = Span(DEFAULT_RUNNER_WAIT), requires = "on_runner")]
    pub runner_wait: Span,
}

pub fn run(ctx: &Context, args: RunNowArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let outcome = if args.on_runner {
        runtime()?.block_on(client.run_now_on_runner(
            &args.r#loop,
            args.allow_overlap,
            args.runner_wait.0,
        ))?
    } else {
        runtime()?.block_on(client.run_now(&args.r#loop, args.allow_overlap))?
    };
    let (run, source) = (outcome.run, outcome.source);
    let mut shown = run.clone();
    if !args.show_output {
        output::redact_run(&mut shown);
    }
    if ctx.json {
        print_json(&RunNowJson::new(&shown, source))?;
    } else {
        outln!(
            "run {} of {} ({}, attempt {}): {}{}{}",
            run.id,
            run.loop_name,
            source,
            run.attempt,
            run.status,
            run.duration_ms
                .map(|d| format!(" in {}", output::elapsed_text(d)))
                .unwrap_or_default(),
            run.exit_code
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default(),
        )?;
        let error = output::error_line(&run, args.show_output);
        if !error.is_empty() {
            outln!("error: {error}")?;
        }
        if let Some(summary) = shown.summary.as_deref().filter(|s| !s.is_empty()) {
            outln!("summary: {}", summary.lines().next().unwrap_or(""))?;
        }
        if let Some(usage) = &run.usage {
            outln!("usage: {}", output::usage_text(usage))?;
        }
        if args.show_output {
            output::print_streams(run.stdout.as_deref(), run.stderr.as_deref(), args.raw)?;
        }
    }
    Ok(if run.status == RunStatus::Succeeded {
        Exit::Success
    } else {
        Exit::Failed
    })
}
