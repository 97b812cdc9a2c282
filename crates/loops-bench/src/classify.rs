//! Issue #20: what reading an agent run's ending costs per run — the provider's
//! structured output parsed, the failure classified (`loops_core::failure`), the
//! summary, usage and session taken — i.e. `loops_runtime::providers::interpret`,
//! which every agent run's finalization calls once. Timed in-process over the real
//! CLIs' captured outputs (`crates/loops-runtime/tests/fixtures`), plus a failure
//! whose stderr is 1 MiB (the most a run keeps by default), the worst case of the
//! text scan.

use crate::harness::{Bencher, Stats};
use anyhow::{Context as _, Result};
use loops_core::{AgentTarget, RunOutcome, RunStatus};
use std::time::Instant as Mono;

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../loops-runtime/tests/fixtures/",
                $name
            )),
        )
    };
}

/// (provider, fixture, exit code, the text on stderr).
fn cases() -> Vec<(&'static str, (&'static str, &'static str), i32, String)> {
    let big_stderr = "error: upstream said no (request id 0123456789abcdef)\n".repeat(20_000);
    vec![
        ("claude", fixture!("claude_success.json"), 0, String::new()),
        (
            "claude",
            fixture!("claude_usage_limit.json"),
            1,
            String::new(),
        ),
        (
            "claude",
            fixture!("claude_overloaded.json"),
            1,
            String::new(),
        ),
        ("claude", fixture!("claude_api_error.json"), 1, big_stderr),
        ("codex", fixture!("codex_success.jsonl"), 0, String::new()),
        (
            "codex",
            fixture!("codex_usage_limit.jsonl"),
            1,
            String::new(),
        ),
        (
            "opencode",
            fixture!("opencode_success.jsonl"),
            0,
            String::new(),
        ),
        (
            "opencode",
            fixture!("opencode_api_error.jsonl"),
            1,
            String::new(),
        ),
    ]
}

impl Bencher {
    pub(super) fn classify(&self, reps: usize) -> Result<()> {
        println!(
            "## Classifying an agent run's ending (`providers::interpret`), {reps} calls each\n"
        );
        println!("| provider | output | stdout bytes | stderr bytes | class | p50 µs | p99 µs | max µs |");
        println!("|---|---|---:|---:|---|---:|---:|---:|");
        let now = chrono::Utc::now();
        for (provider, (name, stdout), exit, stderr) in cases() {
            let target: AgentTarget =
                serde_json::from_value(serde_json::json!({"provider": provider, "prompt": "x"}))
                    .context("agent target")?;
            let status = if exit == 0 {
                RunStatus::Succeeded
            } else {
                RunStatus::Failed
            };
            let mut base =
                RunOutcome::new(status, now).with_output(stdout.to_owned(), stderr.clone());
            base.exit_code = Some(exit);
            let mut times = Vec::with_capacity(reps);
            let mut class = None;
            for _ in 0..reps {
                // The clone is outside the timing: a run's outcome exists anyway.
                let mut outcome = base.clone();
                let t = Mono::now();
                loops_runtime::providers::interpret(&target, &mut outcome);
                times.push(t.elapsed().as_secs_f64() * 1e6);
                class = outcome.failure_class;
                std::hint::black_box(&outcome);
            }
            let s = Stats::of(times);
            println!(
                "| {provider} | {name} | {} | {} | {} | {:.1} | {:.1} | {:.1} |",
                stdout.len(),
                stderr.len(),
                class.map_or_else(|| "-".to_owned(), |c| c.as_str().to_owned()),
                s.p50,
                s.p99,
                s.max
            );
        }
        Ok(())
    }
}
