//! `run-now <loop> [--show-output]`: runs the due slot (advancing the loop) when one is
//! due, else an ad-hoc slot at now; exits non-zero when the run does not succeed.

use super::{runtime, Context};
use crate::cli::RunNowArgs;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json};
use crate::Failure;
use loops_core::{Run, RunSource, RunStatus};
use loops_runtime::engine::{Engine, EngineConfig, SystemClock};
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunNowInfo {
    source: RunSource,
    advances_loop: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunNowOutput<'a> {
    #[serde(flatten)]
    run: &'a Run,
    run_now: RunNowInfo,
}

pub fn run(ctx: &Context, args: RunNowArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let lp = client.get(&args.r#loop)?;
    let engine = Engine::new(
        Arc::clone(client.store()),
        EngineConfig::for_data_dir(client.data_dir()),
        Arc::new(SystemClock),
    )
    .map_err(Failure::from)?;
    let (run, source) = runtime()?
        .block_on(async {
            let _heartbeat = engine.spawn_heartbeat(super::heartbeat_every(lp.lease_ms));
            engine.run_now(&lp, args.allow_overlap).await
        })
        .map_err(Failure::from)?;
    // The loop's next slot may have moved: let a daemon re-plan.
    loops_runtime::wake::poke(client.data_dir());
    let mut shown = run.clone();
    if !args.show_output {
        output::redact_run(&mut shown);
    }
    if ctx.json {
        print_json(&RunNowOutput {
            run: &shown,
            run_now: RunNowInfo {
                source,
                advances_loop: source != RunSource::AdHoc,
            },
        })?;
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
        if let Some(e) = &run.error {
            outln!("error: {e}")?;
        }
        if let Some(summary) = run.summary.as_deref().filter(|s| !s.is_empty()) {
            outln!("summary: {}", summary.lines().next().unwrap_or(""))?;
        }
        if let Some(usage) = &run.usage {
            outln!("usage: {}", output::usage_text(usage))?;
        }
        if args.show_output {
            output::print_streams(&run)?;
        }
    }
    Ok(if run.status == RunStatus::Succeeded {
        Exit::Success
    } else {
        Exit::Failed
    })
}
