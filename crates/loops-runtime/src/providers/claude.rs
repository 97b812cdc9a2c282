//! Claude Code (`claude`).
//!
//! argv: `[--safe-mode --setting-sources local --no-session-persistence] -p
//! --output-format json [--model M] [--agent A] [OPTIONS] [--resume ID]`, the first
//! group under `configIsolation: safe`, OPTIONS the provider options
//! ([`loops_core::provider_options`]: `--permission-mode`, `--effort`, `--add-dir`,
//! `--max-turns`, `--allowed-tools`, `--disallowed-tools`). The prompt is read from stdin by `-p`. With `session:
//! continue` the session is kept on disk (no `--no-session-persistence`: "they can't be
//! resumed"), and a run that resumes one passes `--resume ID` (claude keeps the id; it
//! only forks a new one with `--fork-session`). A session that does not exist (in this
//! working directory's project) ends claude with status 1, nothing on stdout and
//! [`RESUME_REFUSED`] on stderr.
//!
//! Output: one JSON object (`"type": "result"`). Success is `is_error == false` (and
//! exit 0): `subtype` says `"success"` even for API errors, so it is not consulted.
//! `result` holds the final text, or the error message when `is_error`. `--agent` must
//! name an existing agent, else claude exits 1 with a message on stderr only.
//!
//! A failed API call leaves `api_error_status` (the HTTP status), `api_error_type`
//! (`rate_limit_error`, `overloaded_error`, `authentication_error`) and
//! `terminal_reason` (`api_error`, `prompt_too_long`) beside the message in `result`
//! ("API Error: Request rejected (429) · Claude usage limit reached. Your limit will
//! reset at 9am (America/Chicago)."); `session_id` names the conversation.

use loops_core::{session, AgentTarget, ConfigIsolation};
use serde_json::Value;

use super::output::{add_usage, json_lines, str_at, strip_truncation_marker, sum_present, u64_at};
use super::Report;

/// What claude 2.1 prints on stderr for `--resume` of an unknown session ("No
/// conversation found with session ID: <id>").
pub(super) const RESUME_REFUSED: &str = "No conversation found with session ID";

pub(super) fn args(t: &AgentTarget, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if t.config_isolation == ConfigIsolation::Safe {
        // No CLAUDE.md, hooks, plugins or MCP servers from the user's setup, and no
        // session files left behind by an unattended run — unless the loop resumes
        // its sessions.
        args.extend(["--safe-mode", "--setting-sources", "local"].map(String::from));
        if !session::continues(t.session) {
            args.push("--no-session-persistence".to_owned());
        }
    }
    args.extend(["-p", "--output-format", "json"].map(String::from));
    args.extend(super::options_then_resume(t, "--resume", resume));
    args
}

pub(super) fn parse(stdout: &str) -> Report {
    result_object(stdout).map_or_else(Report::default, |v| parse_result(&v))
}

/// The `"type": "result"` object: the whole output, or (for wrappers that print more)
/// the last JSON line that is one.
pub(super) fn result_object(stdout: &str) -> Option<Value> {
    let whole = strip_truncation_marker(stdout).trim();
    if let Ok(v) = serde_json::from_str::<Value>(whole) {
        if v.is_object() {
            return Some(v);
        }
    }
    json_lines(stdout)
        .filter(|v| str_at(v, &["type"]) == Some("result"))
        .last()
}

/// Reads a claude-shaped result object (cursor's `agent` prints the same shape).
pub(super) fn parse_result(v: &Value) -> Report {
    let mut usage = None;
    // Anthropic's `input_tokens` excludes cache reads and writes; the run consumed all
    // three, so the reported input is their sum.
    let input = sum_present(&[
        u64_at(v, &["usage", "input_tokens"]),
        u64_at(v, &["usage", "cache_creation_input_tokens"]),
        u64_at(v, &["usage", "cache_read_input_tokens"]),
    ]);
    let output = u64_at(v, &["usage", "output_tokens"]);
    let cost = v.get("total_cost_usd").and_then(Value::as_f64);
    add_usage(&mut usage, input, output, cost);
    let result = str_at(v, &["result"]).map(str::to_owned);
    let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let session_id = str_at(v, &["session_id"]).map(str::to_owned);
    let tool_denials = v
        .get("permission_denials")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if is_error {
        let message = result
            .filter(|r| !r.trim().is_empty())
            .or_else(|| {
                str_at(v, &["subtype"])
                    .filter(|s| *s != "success")
                    .map(|s| format!("claude reported an error ({s})"))
            })
            .unwrap_or_else(|| "claude reported an error".to_owned());
        return Report {
            text: None,
            usage,
            error: Some(message),
            http_status: u64_at(v, &["api_error_status"]).and_then(|s| u16::try_from(s).ok()),
            error_type: str_at(v, &["api_error_type"]).map(str::to_owned),
            stop_reason: str_at(v, &["terminal_reason"]).map(str::to_owned),
            tool_denials,
            retry_after_secs: None,
            session_id,
        };
    }
    Report {
        text: result,
        usage,
        session_id,
        tool_denials,
        ..Report::default()
    }
}
