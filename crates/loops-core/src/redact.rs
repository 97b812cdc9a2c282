//! Redaction of secrets for listings: prompt bodies, env values, webhook URL paths and
//! captured run output are replaced by markers that keep only their size. Every front
//! end (the CLI's `--json` and tables, the MCP tools, the HTTP API) redacts through
//! these functions, so a secret is hidden the same way wherever it is shown, unless the
//! caller asked for it (`--show-output`, an allowed MCP `showOutput`, `showOutput=true`).
//!
//! **Output is everything derived from what a run printed**: its stdout and stderr, an
//! agent's `summary` (its final text), and `errorOutput` (what a failure quoted from
//! the output: an agent's reported error, its telling stderr line). A run's `error`
//! holds our own words only (`claude exited with status 1`), so it is shown everywhere
//! a run's outline is, the event log included; [`error_line`] adds the quoted part
//! only where output is shown.

use crate::workflow::{StepRun, StepTarget, WorkflowSpec};
use crate::{Loop, Run, Target};
use std::collections::BTreeMap;

/// Replaces a loop's prompt body and env values with markers, and a notification
/// URL's path with its length.
pub fn redact_loop(lp: &mut Loop) {
    match &mut lp.target {
        Target::Command(c) => redact_env(&mut c.env),
        Target::Agent(a) => {
            a.prompt = format!(
                "[redacted {} chars; use --show-output]",
                a.prompt.chars().count()
            );
            redact_env(&mut a.env);
        }
        // A workflow loop's param values are its runs' input, as env values are.
        Target::Workflow(w) => redact_env(&mut w.params),
    }
    if let Some(url) = lp.notify.as_mut().and_then(|n| n.url.as_mut()) {
        *url = redact_url(url);
    }
}

/// A webhook URL's path and query often are its secret (Slack, Discord): only the
/// scheme and host are kept.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "[redacted]".to_owned();
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = rest[..host_end].rsplit('@').next().unwrap_or("");
    let hidden = rest.len() - host_end;
    if hidden == 0 {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}/[redacted {hidden} chars; use --show-output]")
    }
}

/// Replaces every env value with `[redacted]` (names stay).
pub fn redact_env(env: &mut BTreeMap<String, String>) {
    for value in env.values_mut() {
        *value = "[redacted]".into();
    }
}

/// Replaces the values of a workflow run's params with `[redacted]`, as env values are
/// (names stay).
pub fn redact_workflow_run(run: &mut crate::workflow::WorkflowRun) {
    redact_env(&mut run.params);
}

/// Replaces a run's output — captured streams, the agent's summary, what its error
/// quoted from the output — with size markers.
pub fn redact_run(run: &mut Run) {
    redact_output(&mut [
        &mut run.stdout,
        &mut run.stderr,
        &mut run.summary,
        &mut run.error_output,
    ]);
}

/// Replaces a step run's output with size markers, as [`redact_run`] does.
pub fn redact_step(step: &mut StepRun) {
    redact_output(&mut [
        &mut step.stdout,
        &mut step.stderr,
        &mut step.summary,
        &mut step.error_output,
    ]);
}

/// Replaces captured stdout/stderr with size markers (empty streams stay empty).
pub fn redact_streams(stdout: &mut Option<String>, stderr: &mut Option<String>) {
    redact_output(&mut [stdout, stderr]);
}

/// Replaces each text with its size marker (empty texts stay empty).
fn redact_output(texts: &mut [&mut Option<String>]) {
    for text in texts.iter_mut().filter_map(|t| t.as_mut()) {
        if !text.is_empty() {
            *text = format!("[redacted {} bytes; use --show-output]", text.len());
        }
    }
}

/// Most characters of output a run's error line quotes.
pub const ERROR_LINE_QUOTE_CHARS: usize = 100;

/// A run's error as one line of a table or a log-like listing: its `error`, and —
/// only when output is shown (`reveal`) and the run did not succeed — what the failure
/// quoted from the output (`errorOutput`, else the first line of its stderr tail),
/// at most [`ERROR_LINE_QUOTE_CHARS`] characters of it:
/// `exited with status 3: config.toml: no such file`. Take it before [`redact_run`].
pub fn error_line(run: &Run, reveal: bool) -> String {
    let error = run.error.clone().unwrap_or_default();
    if !reveal || run.status == crate::RunStatus::Succeeded {
        return error;
    }
    let quoted = run
        .error_output
        .as_deref()
        .or(run.stderr.as_deref())
        .and_then(|t| crate::notify::first_line(t, ERROR_LINE_QUOTE_CHARS));
    match quoted {
        Some(line) if error.is_empty() => line,
        Some(line) if !error.contains(&line) => format!("{error}: {line}"),
        _ => error,
    }
}

/// Replaces the prompts and env values of a workflow spec's steps with markers.
pub fn redact_spec(spec: &mut WorkflowSpec) {
    for step in &mut spec.steps {
        match &mut step.target {
            StepTarget::Agent(a) => {
                a.prompt = format!("[redacted {} chars]", a.prompt.chars().count());
                redact_env(&mut a.env);
            }
            StepTarget::Command(c) => redact_env(&mut c.env),
        }
    }
}

/// A webhook delivery's URL path is redacted like the loop's (unless `reveal`).
pub fn redact_delivery(d: &mut crate::Delivery, reveal: bool) {
    if !reveal && d.channel == crate::NotifyChannel::Url {
        d.target = redact_url(&d.target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_only_scheme_and_host() {
        assert_eq!(
            redact_url("https://user:pw@hooks.example.com/T0/B0/xyz?x=1"),
            "https://hooks.example.com/[redacted 14 chars; use --show-output]"
        );
        assert_eq!(redact_url("https://example.com"), "https://example.com");
        assert_eq!(redact_url("not a url"), "[redacted]");
    }

    fn failed_run() -> Run {
        let t = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap_or_default();
        Run {
            id: crate::RunId::new("aaaaaaaaaaaa"),
            loop_id: crate::LoopId::new("bbbbbbbbbbbb"),
            loop_name: "l".into(),
            started_at: Some(t),
            finished_at: Some(t),
            exit_code: Some(1),
            duration_ms: Some(1),
            stdout: Some("the answer: TOKEN-1".into()),
            stderr: Some("warning: TOKEN-2\nerror: TOKEN-3".into()),
            error: Some("claude exited with status 1".into()),
            error_output: Some("error: TOKEN-3".into()),
            summary: Some("TOKEN-4".into()),
            ..Run::history(t, 1, crate::RunStatus::Failed, t)
        }
    }

    #[test]
    fn a_run_keeps_no_output_derived_text_once_redacted() {
        let mut run = failed_run();
        assert_eq!(
            error_line(&run, true),
            "claude exited with status 1: error: TOKEN-3"
        );
        assert_eq!(error_line(&run, false), "claude exited with status 1");
        redact_run(&mut run);
        let shown = serde_json::to_string(&run).unwrap_or_default();
        assert!(!shown.contains("TOKEN"), "{shown}");
        assert_eq!(
            run.error_output.as_deref(),
            Some("[redacted 14 bytes; use --show-output]")
        );
        assert_eq!(run.error.as_deref(), Some("claude exited with status 1"));
        // A command's error quotes the first line of its stderr, only when shown.
        let mut command = failed_run();
        command.error = Some("exited with status 1".into());
        command.error_output = None;
        assert_eq!(
            error_line(&command, true),
            "exited with status 1: warning: TOKEN-2"
        );
        assert_eq!(error_line(&command, false), "exited with status 1");
    }

    #[test]
    fn streams_keep_their_size_and_empty_stays_empty() {
        let (mut out, mut err) = (Some("secret\n".to_owned()), Some(String::new()));
        redact_streams(&mut out, &mut err);
        assert_eq!(
            out.as_deref(),
            Some("[redacted 7 bytes; use --show-output]")
        );
        assert_eq!(err.as_deref(), Some(""));
    }
}
