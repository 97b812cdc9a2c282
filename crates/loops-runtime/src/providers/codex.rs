//! OpenAI Codex CLI (`codex`), and the codex-shaped argv and JSONL shared with
//! codewith.
//!
//! argv: `codex --ask-for-approval never exec --json --ephemeral [--sandbox
//! workspace-write] --skip-git-repo-check [--ignore-rules] [-c KEY=VALUE]… [--cd DIR]
//! [--model M] [OPTIONS] [resume ID -]`, OPTIONS the provider options
//! ([`loops_core::provider_options`]: `--sandbox MODE` instead of the default,
//! `-c model_reasoning_effort=E`, `--add-dir DIR`…). `--ask-for-approval` is a top-level option: after `exec`
//! codex rejects it. With `session: continue` the session is kept on disk (no
//! `--ephemeral`), and a run that resumes one ends its argv with `resume ID -`: `exec
//! resume [SESSION_ID] [PROMPT]`, the prompt read from stdin for `-`, exec's options
//! before the subcommand applying to the resumed session (the resumed thread keeps its
//! id). An unknown id ends codex with status 1, nothing on stdout and
//! [`RESUME_REFUSED`] on stderr. `exec` reads the prompt from stdin when none is given on argv. There is
//! no `--agent` (validation rejects the field). `configOverrides` become `-c` pairs;
//! this is how a loop points codex at a custom provider (`model_provider`,
//! `model_providers.NAME={…}`), since codex ignores `OPENAI_BASE_URL`.
//!
//! Output: JSON lines. The final text is the last `item.completed` whose item is an
//! `agent_message`; usage comes from `turn.completed`; failure is `turn.failed` (or a
//! non-zero exit). An `item.completed` of type `error` is a warning codex recovered
//! from and does not fail the run; a top-level `error` event is fatal only when no
//! turn completed. `thread.started` names the session (`thread_id`). Codex reports no
//! HTTP status: its messages say it ("unexpected status 401 Unauthorized: …",
//! "exceeded retry limit, last status: 429 Too Many Requests", "You’ve hit your usage
//! limit. … try again at 6:18 AM.", in the CLI's local zone).

use loops_core::{provider_options, session, AgentTarget, ConfigIsolation};

use super::output::{add_usage, json_lines, readable_error, str_at, u64_at};
use super::Report;

/// What codex 0.171 prints on stderr for `exec resume` of an unknown id ("Error:
/// thread/resume: thread/resume failed: no rollout found for thread id <id>").
pub(super) const RESUME_REFUSED: &str = "no rollout found for thread id";

/// The sandbox of a loop that names none (`--sandbox`, [`loops_core::provider_options`]).
const DEFAULT_SANDBOX: &str = "workspace-write";

pub(super) fn args(t: &AgentTarget, resume: Option<&str>) -> Vec<String> {
    let mut args = codex_shaped(t, &[]);
    if let Some(id) = resume {
        args.extend(["resume".to_owned(), id.to_owned(), "-".to_owned()]);
    }
    args
}

/// The codex argv with `global` options inserted before `exec` (codewith's
/// `--auth-profile`).
pub(super) fn codex_shaped(t: &AgentTarget, global: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["--ask-for-approval", "never"].map(String::from).into();
    args.extend(global.iter().cloned());
    args.extend(["exec", "--json"].map(String::from));
    if !session::continues(t.session) {
        // No session files left behind by an unattended run.
        args.push("--ephemeral".to_owned());
    }
    if t.sandbox.is_none() {
        // codex refuses `--sandbox` twice: a loop's own mode replaces this default.
        args.extend(["--sandbox", DEFAULT_SANDBOX].map(String::from));
    }
    args.push("--skip-git-repo-check".to_owned());
    if t.config_isolation == ConfigIsolation::Safe {
        args.push("--ignore-rules".to_owned());
    }
    for (key, value) in &t.config_overrides {
        // One argv word per pair: the value cannot become a flag of its own.
        args.extend(["-c".to_owned(), format!("{key}={value}")]);
    }
    if let Some(dir) = &t.cwd {
        args.extend(["--cd".to_owned(), dir.clone()]);
    }
    if let Some(model) = &t.model {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    args.extend(provider_options::argv(t));
    args
}

pub(super) fn parse(stdout: &str) -> Report {
    let mut text = None;
    let mut usage = None;
    let mut turn_failed: Option<String> = None;
    let mut fatal: Option<String> = None;
    let mut turn_completed = false;
    let mut session_id = None;
    for event in json_lines(stdout) {
        match str_at(&event, &["type"]) {
            Some("thread.started") => {
                session_id = str_at(&event, &["thread_id"]).map(str::to_owned);
            }
            Some("item.completed")
                if str_at(&event, &["item", "type"]) == Some("agent_message") =>
            {
                if let Some(t) = str_at(&event, &["item", "text"]) {
                    text = Some(t.to_owned());
                }
            }
            Some("turn.completed") => {
                turn_completed = true;
                // `input_tokens` already includes `cached_input_tokens`, and
                // `output_tokens` the reasoning tokens.
                add_usage(
                    &mut usage,
                    u64_at(&event, &["usage", "input_tokens"]),
                    u64_at(&event, &["usage", "output_tokens"]),
                    None,
                );
            }
            Some("turn.failed") => {
                let message = str_at(&event, &["error", "message"])
                    .map_or_else(|| "codex turn failed".to_owned(), readable_error);
                turn_failed = Some(message);
            }
            Some("error") => {
                if let Some(m) = str_at(&event, &["message"]) {
                    fatal = Some(readable_error(m));
                }
            }
            _ => {}
        }
    }
    let error = turn_failed.or(if turn_completed { None } else { fatal });
    Report {
        text: if error.is_some() { None } else { text },
        usage,
        error,
        session_id,
        ..Report::default()
    }
}
