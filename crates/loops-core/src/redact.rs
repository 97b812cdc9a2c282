//! Redaction of secrets for listings: prompt bodies, env values, webhook URL paths and
//! captured run output are replaced by markers that keep only their size. Every front
//! end (the CLI's `--json` and tables, the MCP tools) redacts through these functions,
//! so a secret is hidden the same way wherever it is shown, unless the caller asked
//! for it (`--show-output`, an allowed MCP `showOutput`).

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
        Target::Workflow(_) => {}
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

/// Replaces a run's captured output with size markers.
pub fn redact_run(run: &mut Run) {
    redact_streams(&mut run.stdout, &mut run.stderr);
}

/// Replaces a step run's captured output with size markers.
pub fn redact_step(step: &mut StepRun) {
    redact_streams(&mut step.stdout, &mut step.stderr);
}

/// Replaces captured stdout/stderr with size markers (empty streams stay empty).
pub fn redact_streams(stdout: &mut Option<String>, stderr: &mut Option<String>) {
    for text in [stdout, stderr].into_iter().flatten() {
        if !text.is_empty() {
            *text = format!("[redacted {} bytes; use --show-output]", text.len());
        }
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
