//! Agent provider adapters: how each agent CLI is invoked and how its output is read.
//!
//! One module per provider builds the argv (after the executable) from an
//! [`AgentTarget`] and parses what the CLI prints. The prompt always goes to stdin,
//! never on argv: argv is world-readable through `/proc`, and long prompts would hit
//! `ARG_MAX`.
//!
//! The facts encoded here were checked against the real CLIs (claude-code 2.1, codex
//! 0.171, opencode 1.18; see `ci/install-agent-clis.sh` for the pinned versions):
//! argv order matters (codex rejects `--ask-for-approval` after `exec`), and "exit 0"
//! is not "success" for every provider (claude reports API errors in its JSON).
//!
//! Entry points: [`agent_args`] (used when a run's process is built), [`interpret`]
//! (used by the engine after every agent run), [`account_tool`] (the default
//! `accounts --tool` of a provider) and [`detect_providers`] (for `doctor`).

mod aicopilot;
mod claude;
mod codewith;
mod codex;
mod cursor;
mod opencode;
mod output;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use loops_core::{AgentTarget, Provider, RunOutcome, RunStatus, Usage};

use crate::accounts::run_with_timeout;
use crate::env::resolve_executable;

/// Most bytes of an agent's final text kept as a run's `summary`.
pub const SUMMARY_MAX_BYTES: usize = 4 * 1024;

/// How long `doctor` waits for `<cli> --version`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What a provider's output says about a finished run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The final assistant text, unbounded.
    pub text: Option<String>,
    /// Tokens and cost, when the provider reported them.
    pub usage: Option<Usage>,
    /// An error the provider reported (API error, failed turn), in its own words.
    pub error: Option<String>,
}

/// The argv (after the executable) for `target`.
pub fn agent_args(target: &AgentTarget) -> Vec<String> {
    match target.provider {
        Provider::Claude => claude::args(target),
        Provider::Cursor => cursor::args(target),
        Provider::Codewith => codewith::args(target),
        Provider::Aicopilot => aicopilot::args(target),
        Provider::Opencode => opencode::args(target),
        Provider::Codex => codex::args(target),
    }
}

/// Parses what `provider` printed on stdout. Never fails: unreadable output yields an
/// empty report (a truncated capture or a wrapper script must not break the run).
pub fn parse_output(provider: Provider, stdout: &str) -> Report {
    match provider {
        Provider::Claude => claude::parse(stdout),
        Provider::Cursor => cursor::parse(stdout),
        Provider::Codewith => codewith::parse(stdout),
        Provider::Aicopilot => aicopilot::parse(stdout),
        Provider::Opencode => opencode::parse(stdout),
        Provider::Codex => codex::parse(stdout),
    }
}

/// The `accounts env --tool` name used for a provider when an account names no tool.
pub fn account_tool(provider: Provider) -> &'static str {
    // OpenAccounts names its tools after the providers.
    provider.as_str()
}

/// Reads the provider's structured output on a finished agent run: fills `summary`
/// and `usage`, turns a reported error (exit 0 with claude's `is_error`, codex's
/// `turn.failed`, opencode's `error` event) into a failure carrying the provider's
/// message, and explains a non-zero exit with what the CLI said.
pub fn interpret(target: &AgentTarget, outcome: &mut RunOutcome) {
    let provider = target.provider;
    let report = parse_output(provider, &outcome.stdout);
    if report.usage.is_some() {
        outcome.usage = report.usage.clone();
    }
    match outcome.status {
        RunStatus::Succeeded => match report.error {
            Some(message) => {
                outcome.status = RunStatus::Failed;
                outcome.error = Some(message);
            }
            None => {
                // Text-mode output (cursor) has no structure: the output is the answer.
                let text = report
                    .text
                    .or_else(|| plain_text_fallback(provider, &outcome.stdout));
                outcome.summary = text.as_deref().map(bounded_summary);
            }
        },
        RunStatus::Failed => {
            // `exit_code == None` means the process never ran (or died by a signal):
            // the executor's message ("Executable not found in PATH: …") says it all.
            if let Some(code) = outcome.exit_code {
                outcome.error = Some(failure_message(provider, code, &report, outcome));
            }
        }
        // Timed out or interrupted: keep the engine's error, record what got done.
        _ => {
            outcome.summary = report.text.as_deref().map(bounded_summary);
        }
    }
}

/// The error of an agent that exited non-zero.
fn failure_message(provider: Provider, code: i32, report: &Report, outcome: &RunOutcome) -> String {
    if let Some(message) = &report.error {
        return format!(
            "{message} ({} exited with status {code})",
            provider.executable()
        );
    }
    let exe = provider.executable();
    let hint = output::stderr_hint(&outcome.stderr);
    let rejected = matches!(provider, Provider::Opencode | Provider::Aicopilot)
        && code == 1
        && outcome.stdout.trim().is_empty();
    if rejected {
        // opencode prints its usage (not an error line) when it rejects a flag, so only
        // a line that names an error is worth quoting.
        let detail = hint
            .filter(|h| h.to_ascii_lowercase().contains("error"))
            .map(|h| format!(": {h}"))
            .unwrap_or_default();
        return format!(
            "{exe} exited with status 1 and no output: the CLI rejected its arguments or input{detail}"
        );
    }
    let base = outcome
        .error
        .clone()
        .unwrap_or_else(|| format!("exited with status {code}"));
    match hint {
        Some(hint) => format!("{exe} {base}: {hint}"),
        None => format!("{exe} {base}"),
    }
}

/// The summary of a provider whose output has no structure to parse.
fn plain_text_fallback(provider: Provider, stdout: &str) -> Option<String> {
    let text = output::strip_truncation_marker(stdout).trim();
    (provider == Provider::Cursor && !text.is_empty()).then(|| text.to_owned())
}

/// `text` cut to [`SUMMARY_MAX_BYTES`] on a char boundary, with a marker when cut.
pub fn bounded_summary(text: &str) -> String {
    let text = text.trim();
    if text.len() <= SUMMARY_MAX_BYTES {
        return text.to_owned();
    }
    let mut end = SUMMARY_MAX_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[truncated {} bytes]", &text[..end], text.len() - end)
}

/// A provider CLI found on a PATH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    pub provider: Provider,
    /// Where the executable resolved.
    pub path: PathBuf,
    /// First line of `<cli> --version`, when it answered in time.
    pub version: Option<String>,
}

/// Every provider CLI that resolves on the PATH of `env` (pass the effective child
/// environment, e.g. [`crate::env::build_env`] of the daemon's), with its version.
/// Version probes run in parallel, each bounded by a timeout, so a hung CLI cannot
/// stall `doctor`.
pub fn detect_providers(env: &[(String, String)]) -> Vec<ProviderInfo> {
    let found: Vec<(Provider, PathBuf)> = Provider::ALL
        .iter()
        .filter_map(|p| resolve_executable(p.executable(), env).map(|path| (*p, path)))
        .collect();
    std::thread::scope(|scope| {
        let probes: Vec<_> = found
            .into_iter()
            .map(|(provider, path)| {
                scope.spawn(move || {
                    let version = probe_version(&path, env);
                    ProviderInfo {
                        provider,
                        path,
                        version,
                    }
                })
            })
            .collect();
        probes
            .into_iter()
            .filter_map(|probe| probe.join().ok())
            .collect()
    })
}

fn probe_version(path: &std::path::Path, env: &[(String, String)]) -> Option<String> {
    let mut cmd = Command::new(path);
    cmd.arg("--version")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    let captured = run_with_timeout(cmd, VERSION_TIMEOUT).ok()?;
    if !captured.status.success() {
        return None;
    }
    let first_line = |text: &str| {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    };
    first_line(&captured.stdout).or_else(|| first_line(&captured.stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_bounded_on_a_char_boundary() {
        let long = "é".repeat(SUMMARY_MAX_BYTES);
        let cut = bounded_summary(&long);
        assert!(cut.len() < SUMMARY_MAX_BYTES + 40, "{}", cut.len());
        assert!(cut.ends_with(&format!("[truncated {} bytes]", SUMMARY_MAX_BYTES)));
        assert_eq!(bounded_summary("  short \n"), "short");
    }
}
