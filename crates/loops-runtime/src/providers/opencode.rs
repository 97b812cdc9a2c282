//! opencode (`opencode`), and the `run --format json` argv and JSONL shared with
//! aicopilot.
//!
//! argv: `opencode run --format json [--pure] [--dir DIR] [--model provider/model]
//! [--agent A] [--variant V] [--session ID]` (`--variant`: the provider option,
//! [`loops_core::provider_options`]); `--pure` (no external plugins) under `configIsolation:
//! safe`. The prompt is read from stdin. opencode always keeps its sessions; `--session
//! ID` continues one (under the same id). An unknown id ends opencode with status 1,
//! nothing on stdout and [`RESUME_REFUSED`] on stderr ("Error: Session not found"). Without an explicit model opencode retries forever, so
//! validation requires `model` for opencode.
//!
//! Output: JSON lines (`step_start`, `text`, `tool_use`, `step_finish`, `error`).
//! The final text is the text of the last step that produced any; usage is summed
//! over `step_finish` parts; an `error` event fails the run. Exit 1 with nothing on
//! stdout means the CLI rejected its arguments or input (it prints usage to stderr).
//! An `error` event carries the API's `statusCode` and `responseHeaders` (so a
//! `retry-after`); every event names the session (`sessionID`). A retryable API error
//! (429) is retried by opencode itself, without printing anything, until it is stopped.

use loops_core::{AgentTarget, ConfigIsolation};
use serde_json::Value;

use super::output::{add_usage, at, json_lines, str_at, sum_present, u64_at};
use super::Report;

/// What opencode 1.18 prints on stderr for `--session` of an unknown id.
pub(super) const RESUME_REFUSED: &str = "Session not found";

pub(super) fn args(t: &AgentTarget, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["run", "--format", "json"].map(String::from).into();
    if t.config_isolation == ConfigIsolation::Safe {
        args.push("--pure".to_owned());
    }
    if let Some(dir) = &t.cwd {
        args.extend(["--dir".to_owned(), dir.clone()]);
    }
    args.extend(super::options_then_resume(t, "--session", resume));
    args
}

pub(super) fn parse(stdout: &str) -> Report {
    // Text of each step; the answer is the last step that said something (earlier
    // steps narrate tool calls).
    let mut steps: Vec<String> = vec![String::new()];
    let mut usage = None;
    let mut error = None;
    let mut failure = Report::default();
    let mut session_id = None;
    for event in json_lines(stdout) {
        if session_id.is_none() {
            session_id = str_at(&event, &["sessionID"]).map(str::to_owned);
        }
        match str_at(&event, &["type"]) {
            // A new step starts a new text group, unless the last one said nothing.
            Some("step_start") if steps.last().is_some_and(|s| !s.is_empty()) => {
                steps.push(String::new());
            }
            Some("text") => {
                if let (Some(text), Some(step)) =
                    (str_at(&event, &["part", "text"]), steps.last_mut())
                {
                    if !step.is_empty() {
                        step.push('\n');
                    }
                    step.push_str(text);
                }
            }
            Some("step_finish") => {
                let tokens = |path: &[&str]| {
                    let mut full = vec!["part", "tokens"];
                    full.extend_from_slice(path);
                    u64_at(&event, &full)
                };
                // opencode splits cache reads/writes out of `input` and reasoning out
                // of `output`; the run consumed all of them.
                let input = sum_present(&[
                    tokens(&["input"]),
                    tokens(&["cache", "read"]),
                    tokens(&["cache", "write"]),
                ]);
                let output = sum_present(&[tokens(&["output"]), tokens(&["reasoning"])]);
                // opencode writes 0 when it knows no price for the model: not a cost.
                let cost = at(&event, &["part", "cost"])
                    .and_then(Value::as_f64)
                    .filter(|c| *c > 0.0);
                add_usage(&mut usage, input, output, cost);
            }
            Some("error") => {
                error = Some(error_message(&event));
                failure.http_status = u64_at(&event, &["error", "data", "statusCode"])
                    .and_then(|s| u16::try_from(s).ok());
                failure.error_type = str_at(&event, &["error", "name"]).map(str::to_owned);
                failure.retry_after_secs =
                    str_at(&event, &["error", "data", "responseHeaders", "retry-after"])
                        .and_then(|v| v.trim().parse().ok());
            }
            _ => {}
        }
    }
    let text = steps.into_iter().rev().find(|s| !s.trim().is_empty());
    Report {
        text: if error.is_some() { None } else { text },
        usage,
        error,
        session_id,
        ..failure
    }
}

/// `error.data.message` (API errors), else `error.message`, else the error's name.
fn error_message(event: &Value) -> String {
    str_at(event, &["error", "data", "message"])
        .or_else(|| str_at(event, &["error", "message"]))
        .or_else(|| str_at(event, &["error", "name"]))
        .map_or_else(
            || format!("opencode reported an error: {event}"),
            str::to_owned,
        )
}
