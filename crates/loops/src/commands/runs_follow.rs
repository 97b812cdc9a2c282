//! `runs --follow [loop]`: one line per run as it starts and as it ends, until
//! interrupted. Polls the store every [`RUNS_POLL`] (a quarter second) with bounded
//! queries, so a line appears within about that long of the event (README, "Watching
//! runs").

use super::runs::RunsArgs;
use super::Context;
use crate::exit::Exit;
use crate::output::{self, write_stdout_bytes};
use crate::Failure;
use chrono::Local;
use loops_core::{Run, RunStatus};
use loops_runtime::live::{RunEvent, RUNS_POLL};

pub fn run(ctx: &Context, args: &RunsArgs) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let mut watch = client.watch_runs(args.r#loop.as_deref())?;
    loop {
        let events = watch.poll()?;
        let mut out = String::new();
        for event in events {
            let line = if ctx.json {
                json_line(event, args.show_output)
            } else {
                // Human text, one line (control characters escaped).
                output::one_line(&human_line(&event, args.show_output)).into_owned()
            };
            out.push_str(&line);
            out.push('\n');
        }
        if !out.is_empty() {
            write_stdout_bytes(out.as_bytes())?;
        }
        std::thread::sleep(RUNS_POLL);
    }
}

fn json_line(event: RunEvent, reveal: bool) -> String {
    let (name, mut run) = match event {
        RunEvent::Started(run) => ("started", run),
        RunEvent::Ended(run) => ("ended", run),
    };
    if !reveal {
        output::redact_run(&mut run);
    }
    serde_json::json!({ "event": name, "run": run }).to_string()
}

/// `12:00:00.123  run 3fa4c0d1e2f3 of hello started (slot 12:00:00)`, or
/// `… of hello failed in 30ms: exited with status 3` (`…: boom`, its stderr's first
/// line, with `--show-output`).
fn human_line(event: &RunEvent, reveal: bool) -> String {
    match event {
        RunEvent::Started(run) => format!(
            "{}  run {} of {} started (slot {}{})",
            stamp(run.started_at.unwrap_or(run.created_at)),
            run.id,
            run.loop_name,
            run.scheduled_for.with_timezone(&Local).format("%H:%M:%S"),
            attempt(run)
        ),
        RunEvent::Ended(run) => {
            let took = run
                .duration_ms
                .filter(|_| run.status != RunStatus::Skipped)
                .map(|ms| format!(" in {}", output::elapsed_text(ms)))
                .unwrap_or_default();
            let error = output::error_line(run, reveal);
            let error = if error.is_empty() {
                String::new()
            } else {
                format!(": {error}")
            };
            format!(
                "{}  run {} of {} {}{took}{error}",
                stamp(run.finished_at.unwrap_or(run.updated_at)),
                run.id,
                run.loop_name,
                run.status
            )
        }
    }
}

fn attempt(run: &Run) -> String {
    if run.attempt > 1 {
        format!(", attempt {}", run.attempt)
    } else {
        String::new()
    }
}

fn stamp(t: loops_core::Instant) -> String {
    t.with_timezone(&Local).format("%H:%M:%S%.3f").to_string()
}
