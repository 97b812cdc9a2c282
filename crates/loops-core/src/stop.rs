//! Stop conditions (issue #20 item 8, README "Agent operations"): what ends a loop
//! whose work is done — "run the agent again until the tests pass", safely.
//!
//! - `--until-cmd CMD`: after each successful slot run, the runner runs `CMD` (by
//!   `/bin/sh`, in the loop's cwd, with the loop's environment) before recording the
//!   run; exit 0 means done.
//! - `--until-output REGEX`: after each successful slot run, the runner matches the
//!   regex against the run's summary (agent loops) or its stdout as captured (command
//!   and workflow loops), before recording it; a match means done.
//! - `--max-runs N`: the loop is done once N of its slots have ended, whatever their
//!   outcome (a retried attempt is not an end: its slot ends with its last attempt).
//!   It bounds what an unattended loop can spend, failing or not.
//!
//! The runner's finding travels with the outcome ([`crate::RunOutcome::stop`]); the
//! decision is [`crate::transitions::on_finish`]'s, in the finalization's transaction:
//! status `done`, `statusReason` saying which condition ended it and after which run
//! (never the matched text: that is output), and one [`crate::NotifyEvent::Done`].
//! Ad-hoc runs (`run-now` off the schedule) neither count nor end the loop. `resume`
//! starts a done loop again with a fresh count (`runCount`).

use crate::{Loop, Run, RunId, Target};

/// A condition the runner found met after a successful run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMet {
    /// `--until-cmd` exited 0.
    UntilCmd,
    /// `--until-output` matched.
    UntilOutput,
}

/// The most bytes a compiled `--until-output` regex may take (`regex`'s size limits:
/// the compiled program and the lazy DFA's cache), so a pattern cannot make the
/// runner build a huge automaton.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// The longest `--until-output` pattern accepted.
pub const MAX_PATTERN_BYTES: usize = 1_000;

/// Compiles an `--until-output` pattern under the size limits; the error is one line.
pub fn compile(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "--until-output is longer than {MAX_PATTERN_BYTES} bytes"
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            let why = match e {
                regex::Error::CompiledTooBig(_) => "it compiles too big".to_owned(),
                // The syntax error's last line says what is wrong ("error: …").
                other => other
                    .to_string()
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("invalid")
                    .trim()
                    .trim_start_matches("error: ")
                    .to_owned(),
            };
            format!("--until-output {pattern:?} is not a valid regex: {why}")
        })
}

/// What `--until-output` is matched against for `lp`: `summary` for agent loops,
/// `stdout` otherwise.
pub fn output_field(lp: &Loop) -> &'static str {
    match lp.target {
        Target::Agent(_) => "summary",
        Target::Command(_) | Target::Workflow(_) => "stdout",
    }
}

/// Whether a successful run's output meets `lp`'s `--until-output`: its summary
/// (agents) or stdout (the rest) matches. A pattern that no longer compiles never
/// matches (it was checked when it was set).
pub fn output_met(lp: &Loop, summary: Option<&str>, stdout: &str) -> bool {
    let Some(pattern) = lp.ops.until_output.as_deref() else {
        return false;
    };
    let Ok(re) = compile(pattern) else {
        return false;
    };
    let text = match lp.target {
        Target::Agent(_) => summary.unwrap_or_default(),
        Target::Command(_) | Target::Workflow(_) => stdout,
    };
    re.is_match(text)
}

/// The loop's `statusReason` once `met` (or `--max-runs`, when `met` is `None`) ended
/// it after `run`, its `count`-th ended slot: the condition and the run, never the
/// output that met it.
pub fn reason(lp: &Loop, met: Option<StopMet>, count: u32, run: &RunId) -> String {
    match met {
        Some(StopMet::UntilCmd) => format!("--until-cmd exited 0 after run {count} ({run})"),
        Some(StopMet::UntilOutput) => format!(
            "{} matched /{}/ in run {count} ({run})",
            output_field(lp),
            lp.ops.until_output.as_deref().unwrap_or_default()
        ),
        None => format!(
            "--max-runs {} reached (run {count}, {run})",
            lp.ops.max_runs.unwrap_or(count)
        ),
    }
}

/// Whether the runner checks `lp`'s until-conditions after `run`: a successful run
/// of a slot (not ad hoc) of a loop that has one.
pub fn checks_after(lp: &Loop, run: &Run, succeeded: bool) -> bool {
    succeeded
        && run.source != crate::RunSource::AdHoc
        && (lp.ops.until_cmd.is_some() || lp.ops.until_output.is_some())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn lp(target: serde_json::Value, until_output: &str) -> Loop {
        let mut lp: Loop = serde_json::from_value(serde_json::json!({
            "id": "aaaaaaaaaaaa", "name": "l", "status": "active",
            "schedule": {"type": "interval", "everyMs": 1000, "anchor": "fixed_rate"},
            "target": target,
            "catchUp": "latest", "catchUpLimit": 10, "overlap": "skip", "maxAttempts": 1,
            "retryDelayMs": 60000, "leaseMs": 1800000,
            "createdAt": "2026-02-28T12:00:00.000Z", "updatedAt": "2026-03-10T12:00:00.000Z",
        }))
        .unwrap();
        lp.ops.until_output = Some(until_output.to_owned());
        lp
    }

    #[test]
    fn until_output_matches_the_summary_of_agents_and_the_stdout_of_commands() {
        let agent = lp(
            serde_json::json!({"type": "agent", "provider": "claude", "prompt": "p"}),
            "ALL TESTS PASS",
        );
        assert!(output_met(&agent, Some("ok: ALL TESTS PASS"), ""));
        assert!(!output_met(&agent, Some("2 failed"), "ALL TESTS PASS"));
        assert!(!output_met(&agent, None, "ALL TESTS PASS"));
        let cmd = lp(
            serde_json::json!({"type": "command", "command": "true"}),
            r"^PASS \d+$",
        );
        assert!(output_met(&cmd, None, "PASS 12"));
        assert!(
            !output_met(&cmd, None, "x\nPASS 12"),
            "^ is the text's start"
        );
        assert!(!output_met(&cmd, Some("PASS 12"), "FAIL"));
        assert_eq!(
            reason(
                &cmd,
                Some(StopMet::UntilOutput),
                2,
                &RunId::new("bbbbbbbbbbbb")
            ),
            r"stdout matched /^PASS \d+$/ in run 2 (bbbbbbbbbbbb)"
        );
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_refused_in_one_line() {
        let err = compile("(unclosed").unwrap_err();
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.starts_with("--until-output \"(unclosed\" is not a valid regex: "),
            "{err}"
        );
        let err = compile(r"\w{1000}{1000}").unwrap_err();
        assert!(err.ends_with("it compiles too big"), "{err}");
        assert!(compile(&"a".repeat(MAX_PATTERN_BYTES + 1)).is_err());
        assert!(compile("ALL TESTS PASS").is_ok());
    }
}
