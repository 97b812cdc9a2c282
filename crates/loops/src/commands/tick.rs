//! `tick`: one scheduler pass from the command line (e.g. from system cron), waiting
//! for the runs it started.

use super::{runtime, Context};
use crate::cli::TickArgs;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::print_json;
use crate::Failure;
use loops_runtime::engine::{Engine, EngineConfig, SystemClock};
use std::sync::Arc;

pub fn run(ctx: &Context, args: TickArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let cfg = EngineConfig {
        max_concurrent: args.max_concurrent.max(1),
        ..EngineConfig::for_data_dir(client.data_dir())
    };
    let engine = Engine::new(Arc::clone(client.store()), cfg, Arc::new(SystemClock))
        .map_err(Failure::from)?;
    let report = runtime()?.block_on(async {
        let _heartbeat = engine.spawn_heartbeat(std::time::Duration::from_secs(10));
        let mut total = loops_runtime::engine::TickReport::default();
        loop {
            let report = engine.tick().map_err(Failure::from)?;
            let saturated = report.saturated;
            total.claimed.extend(report.claimed);
            total.skipped.extend(report.skipped);
            total.recovered.extend(report.recovered);
            total.expired.extend(report.expired);
            if !saturated {
                break;
            }
            // Every slot is busy: wait for one to free, then pick up the rest.
            engine.run_finished().await;
        }
        engine.drain().await;
        Ok::<_, Failure>(total)
    })?;
    let store = client.store();
    let runs: Vec<_> = report
        .claimed
        .iter()
        .filter_map(|id| store.get_run(id).ok().flatten())
        .collect();
    if ctx.json {
        print_json(&serde_json::json!({
            "claimed": runs,
            "skipped": report.skipped,
            "recovered": report.recovered,
            "expired": report.expired,
        }))?;
    } else {
        outln!(
            "tick: {} run(s), {} skipped, {} recovered, {} expired",
            runs.len(),
            report.skipped.len(),
            report.recovered.len(),
            report.expired.len()
        )?;
        for run in &runs {
            outln!(
                "  {} {} attempt {}: {}",
                run.id,
                run.loop_name,
                run.attempt,
                run.status
            )?;
        }
    }
    Ok(Exit::Success)
}
