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
//! Entry points: [`agent_args`] (used when a run's process is built), [`judge`] (the
//! [`Verdict`] on every finished agent attempt, loop run or workflow step alike),
//! [`account_tool`] (the default `accounts --tool` of a provider) and
//! [`detect_providers`] (for `doctor`).

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

use loops_core::failure::{self, Failure, FailureClass, ProcessEnding, Signals};
use loops_core::{session, AgentTarget, Provider, RunOutcome, RunStatus, StepStatus, Usage};

use crate::executor::{ExecResult, ExecStatus};

use crate::accounts::run_with_timeout;
use crate::env::resolve_executable;

/// Most bytes of an agent's final text kept as a run's `summary`.
pub const SUMMARY_MAX_BYTES: usize = 4 * 1024;

/// Most bytes of an agent's own words kept as a run's `errorOutput`.
pub const ERROR_OUTPUT_MAX_BYTES: usize = 4 * 1024;

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
    /// The model API's HTTP status behind `error`, when the CLI reports it.
    pub http_status: Option<u16>,
    /// The API's error type or name (`rate_limit_error`, `APIError`).
    pub error_type: Option<String>,
    /// A structured reason the CLI stopped (claude's `terminal_reason`).
    pub stop_reason: Option<String>,
    /// Tools the agent was denied (claude's `permission_denials`).
    pub tool_denials: usize,
    /// A `retry-after` the API answered with, in seconds.
    pub retry_after_secs: Option<u64>,
    /// The conversation's id, for resuming it (claude's `session_id`, codex's
    /// `thread_id`, opencode's `sessionID`).
    pub session_id: Option<String>,
}

impl Report {
    /// What a failure classifier needs of this report, with the CLI's stderr.
    pub fn signals<'a>(&'a self, stderr: &'a str) -> loops_core::failure::Signals<'a> {
        loops_core::failure::Signals {
            http_status: self.http_status,
            error_type: self.error_type.as_deref(),
            message: self.error.as_deref(),
            stop_reason: self.stop_reason.as_deref(),
            tool_denials: self.tool_denials,
            retry_after_secs: self.retry_after_secs,
            stderr,
        }
    }
}

/// `--model M` and `--agent A`, as the CLIs that take both spell them (claude, cursor,
/// opencode).
fn model_and_agent(t: &AgentTarget) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(model) = &t.model {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    if let Some(agent) = &t.agent {
        args.extend(["--agent".to_owned(), agent.clone()]);
    }
    args
}

/// The argv's end for a CLI that resumes with `resume_flag ID` (claude, opencode):
/// `--model`/`--agent`, the provider options, then the resume option. The options go
/// before it: `--add-dir` and the tool lists take several values, so a positional word
/// right after them would be read as one more.
fn options_then_resume(t: &AgentTarget, resume_flag: &str, resume: Option<&str>) -> Vec<String> {
    let mut args = model_and_agent(t);
    args.extend(loops_core::provider_options::argv(t));
    if let Some(id) = resume {
        args.extend([resume_flag.to_owned(), id.to_owned()]);
    }
    args
}

/// The argv (after the executable) for `target`; with `resume`, the provider's option
/// that resumes that conversation (an id [`session::is_valid_id`] accepted; an id that
/// is not is left out, and the run starts fresh). Providers without a resume option
/// ([`session::can_resume`]) ignore it: validation refuses `--session continue` there.
pub fn agent_args(target: &AgentTarget, resume: Option<&str>) -> Vec<String> {
    let resume = resume.filter(|id| session::is_valid_id(id));
    match target.provider {
        Provider::Claude => claude::args(target, resume),
        Provider::Cursor => cursor::args(target),
        Provider::Codewith => codewith::args(target),
        Provider::Aicopilot => aicopilot::args(target),
        Provider::Opencode => opencode::args(target, resume),
        Provider::Codex => codex::args(target, resume),
    }
}

/// Whether an attempt that resumed a session ended because the CLI does not know that
/// session: it exited non-zero before printing any structured output, saying so on
/// stderr (each CLI's message, found by running it with a made-up id). The runtime
/// then runs the attempt again, fresh.
pub fn resume_refused(provider: Provider, result: &ExecResult) -> bool {
    let marker = match provider {
        Provider::Claude => claude::RESUME_REFUSED,
        Provider::Codex => codex::RESUME_REFUSED,
        Provider::Opencode => opencode::RESUME_REFUSED,
        Provider::Cursor | Provider::Codewith | Provider::Aicopilot => return false,
    };
    result.status == ExecStatus::Failed
        && result.exit_code.is_some_and(|code| code != 0)
        && output::strip_truncation_marker(&result.stdout)
            .trim()
            .is_empty()
        && result.stderr.contains(marker)
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

/// What an attempt came to: how its process ended, read through its provider's
/// output when it is an agent. The one verdict that a loop run
/// ([`Verdict::run_status`]) and a workflow step ([`Verdict::step_status`]) both map
/// from.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The process's own ending, except that an agent that exited 0 but reported an
    /// error (claude's `is_error`, codex's `turn.failed`, opencode's `error` event) is
    /// [`ExecStatus::Failed`].
    pub status: ExecStatus,
    /// Why it did not succeed, in our own words: `claude exited with status 1`,
    /// `claude reported an error`, or the executor's (spawn failure, timeout, cancel).
    pub error: Option<String>,
    /// What explains it in the provider's own output: its reported error message, or
    /// the most telling line of its stderr. Output: redacted where stdout is.
    pub error_output: Option<String>,
    /// The agent's final text, bounded ([`SUMMARY_MAX_BYTES`]): on success, and for an
    /// attempt that timed out or was stopped (what got done).
    pub summary: Option<String>,
    /// Tokens and cost, when the provider reported them.
    pub usage: Option<Usage>,
    /// What kind of failure it was, for an attempt that failed or timed out
    /// ([`loops_core::failure::classify`]).
    pub failure: Option<Failure>,
    /// The conversation the agent reported, for `--session continue`.
    pub session_id: Option<String>,
}

impl Verdict {
    /// A command's verdict: its process's ending, as the executor reported it (a
    /// failure is classified by how the process ended alone).
    pub fn of_process(result: &ExecResult) -> Self {
        let failure = process_ending(result.status, result.exit_code, result.signal).map(|e| {
            let signals = Signals {
                stderr: &result.stderr,
                ..Signals::default()
            };
            // A command has no provider words: only a timeout, a signal or a crash
            // trace tell its failures apart.
            let mut failure = failure::classify(e, &signals, result.finished_at, local_zone());
            if !matches!(
                failure.class,
                FailureClass::Timeout | FailureClass::Crash | FailureClass::Other
            ) {
                failure.class = FailureClass::Other;
                failure.retry_at = None;
            }
            failure
        });
        Self {
            status: result.status,
            error: result.error.clone(),
            error_output: None,
            summary: None,
            usage: None,
            failure,
            session_id: None,
        }
    }

    /// The status of a loop run that ended so: a stopped attempt did not complete, so
    /// it is `abandoned` (a failed attempt, retried if attempts remain).
    pub fn run_status(&self) -> RunStatus {
        match self.status {
            ExecStatus::Succeeded => RunStatus::Succeeded,
            ExecStatus::Failed => RunStatus::Failed,
            ExecStatus::TimedOut => RunStatus::TimedOut,
            ExecStatus::Terminated => RunStatus::Abandoned,
        }
    }

    /// The status of a workflow step that ended so.
    pub fn step_status(&self) -> StepStatus {
        match self.status {
            ExecStatus::Succeeded => StepStatus::Succeeded,
            ExecStatus::Failed => StepStatus::Failed,
            ExecStatus::TimedOut => StepStatus::TimedOut,
            ExecStatus::Terminated => StepStatus::Cancelled,
        }
    }
}

/// Judges an agent's finished attempt by its provider's structured output: fills
/// `summary` and `usage`, turns a reported error (exit 0 with claude's `is_error`,
/// codex's `turn.failed`, opencode's `error` event) into a failure carrying the
/// provider's message, and explains a non-zero exit with what the CLI said.
pub fn judge(target: &AgentTarget, result: &ExecResult) -> Verdict {
    judge_ending(
        target.provider,
        Ending {
            status: result.status,
            exit_code: result.exit_code,
            signal: result.signal,
            stdout: &result.stdout,
            stderr: &result.stderr,
            error: result.error.as_deref(),
            at: result.finished_at,
        },
    )
}

/// [`judge`] for a loop run's outcome that was already built from its process: the
/// outcome's status, error, summary and usage become the verdict's. For callers that
/// hold a [`RunOutcome`] rather than the process's [`ExecResult`].
pub fn interpret(target: &AgentTarget, outcome: &mut RunOutcome) {
    let status = match outcome.status {
        RunStatus::Succeeded => ExecStatus::Succeeded,
        RunStatus::Failed => ExecStatus::Failed,
        RunStatus::TimedOut => ExecStatus::TimedOut,
        // Ended without completing: only the output's progress is read.
        RunStatus::Abandoned | RunStatus::Skipped | RunStatus::Running => ExecStatus::Terminated,
    };
    let verdict = judge_ending(
        target.provider,
        Ending {
            status,
            exit_code: outcome.exit_code,
            signal: None,
            stdout: &outcome.stdout,
            stderr: &outcome.stderr,
            error: outcome.error.as_deref(),
            at: outcome.finished_at,
        },
    );
    if verdict.status != status {
        outcome.status = verdict.run_status();
    }
    outcome.error = verdict.error;
    outcome.error_output = verdict.error_output;
    outcome.failure_class = verdict.failure.map(|f| f.class);
    outcome.retry_at = verdict.failure.and_then(|f| f.retry_at);
    if verdict.summary.is_some() {
        outcome.summary = verdict.summary;
    }
    if verdict.usage.is_some() {
        outcome.usage = verdict.usage;
    }
    if verdict.session_id.is_some() {
        outcome.session_id = verdict.session_id;
    }
}

/// How a provider's process ended, before its output was read.
struct Ending<'a> {
    status: ExecStatus,
    exit_code: Option<i32>,
    signal: Option<i32>,
    stdout: &'a str,
    stderr: &'a str,
    error: Option<&'a str>,
    /// When it ended: a reset time of day is read relative to it.
    at: loops_core::Instant,
}

fn judge_ending(provider: Provider, ending: Ending<'_>) -> Verdict {
    let report = parse_output(provider, ending.stdout);
    let mut verdict = Verdict {
        status: ending.status,
        error: ending.error.map(str::to_owned),
        error_output: None,
        summary: None,
        usage: report.usage.clone(),
        failure: None,
        // An identifier, not output: only a well-formed one is kept.
        session_id: report
            .session_id
            .clone()
            .filter(|id| session::is_valid_id(id)),
    };
    match ending.status {
        ExecStatus::Succeeded => match &report.error {
            Some(message) => {
                verdict.status = ExecStatus::Failed;
                verdict.error = Some(format!("{} reported an error", provider.executable()));
                verdict.error_output = Some(bounded_quote(message));
            }
            None => {
                // Text-mode output (cursor) has no structure: the output is the answer.
                let text = report
                    .text
                    .clone()
                    .or_else(|| plain_text_fallback(provider, ending.stdout));
                verdict.summary = text.as_deref().map(bounded_summary);
            }
        },
        ExecStatus::Failed => {
            // `exit_code == None` means the process never ran (or died by a signal):
            // the executor's message ("Executable not found in PATH: …") says it all.
            if let Some(code) = ending.exit_code {
                let (error, quoted) = failure_message(provider, code, &report, &ending);
                verdict.error = Some(error);
                verdict.error_output = quoted.as_deref().map(bounded_quote);
            }
        }
        // Timed out or stopped: keep the executor's error, record what got done.
        ExecStatus::TimedOut | ExecStatus::Terminated => {
            verdict.summary = report.text.as_deref().map(bounded_summary);
        }
    }
    let process = match (verdict.status, ending.status) {
        // Exit 0 with a reported error.
        (ExecStatus::Failed, ExecStatus::Succeeded) => Some(ProcessEnding::Exited(0)),
        _ => process_ending(verdict.status, ending.exit_code, ending.signal),
    };
    verdict.failure = process
        .map(|e| failure::classify(e, &report.signals(ending.stderr), ending.at, local_zone()));
    verdict
}

/// How a process that did not succeed ended, for [`failure::classify`]; `None` for a
/// success and for an attempt we stopped (it did not fail: it was interrupted).
fn process_ending(
    status: ExecStatus,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> Option<ProcessEnding> {
    match status {
        ExecStatus::Succeeded | ExecStatus::Terminated => None,
        ExecStatus::TimedOut => Some(ProcessEnding::TimedOut),
        ExecStatus::Failed => Some(match (exit_code, signal) {
            (Some(code), _) => ProcessEnding::Exited(code),
            (None, Some(_)) => ProcessEnding::Signalled,
            (None, None) => ProcessEnding::NotStarted,
        }),
    }
}

/// The zone a CLI prints local times in: the runner's own (its children inherit it).
fn local_zone() -> loops_core::failure::Tz {
    static ZONE: std::sync::OnceLock<loops_core::failure::Tz> = std::sync::OnceLock::new();
    *ZONE.get_or_init(|| {
        loops_core::cron::parse_timezone(&crate::definition::local_zone())
            .unwrap_or(loops_core::failure::Tz::UTC)
    })
}

/// The error of an agent that exited non-zero, in our words, and what explains it in
/// the agent's own output (its reported error, else its telling stderr line), if
/// anything does.
fn failure_message(
    provider: Provider,
    code: i32,
    report: &Report,
    ending: &Ending<'_>,
) -> (String, Option<String>) {
    let exe = provider.executable();
    if let Some(message) = &report.error {
        return (
            format!("{exe} exited with status {code}"),
            Some(message.clone()),
        );
    }
    let hint = output::stderr_hint(ending.stderr);
    let rejected = matches!(provider, Provider::Opencode | Provider::Aicopilot)
        && code == 1
        && ending.stdout.trim().is_empty();
    if rejected {
        // opencode prints its usage (not an error line) when it rejects a flag, so only
        // a line that names an error is worth quoting.
        return (
            format!(
                "{exe} exited with status 1 and no output: the CLI rejected its arguments or input"
            ),
            hint.filter(|h| h.to_ascii_lowercase().contains("error")),
        );
    }
    let base = ending
        .error
        .map_or_else(|| format!("exited with status {code}"), str::to_owned);
    (format!("{exe} {base}"), hint)
}

/// A quote from an agent's output, cut to [`ERROR_OUTPUT_MAX_BYTES`] on a character
/// boundary, with a marker when cut.
fn bounded_quote(text: &str) -> String {
    bounded(text, ERROR_OUTPUT_MAX_BYTES)
}

/// The summary of a provider whose output has no structure to parse.
fn plain_text_fallback(provider: Provider, stdout: &str) -> Option<String> {
    let text = output::strip_truncation_marker(stdout).trim();
    (provider == Provider::Cursor && !text.is_empty()).then(|| text.to_owned())
}

/// `text` cut to [`SUMMARY_MAX_BYTES`] on a char boundary, with a marker when cut.
pub fn bounded_summary(text: &str) -> String {
    bounded(text, SUMMARY_MAX_BYTES)
}

/// `text`, trimmed, cut to `max` bytes on a char boundary with a marker when cut: the
/// one rule of a run's summary and of its quoted error.
fn bounded(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
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
