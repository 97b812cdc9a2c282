//! `--session continue`: an agent loop whose runs resume one conversation (#20 item 9).
//!
//! Each agent run records the session id its CLI reported (`Run::session_id`: claude's
//! `session_id`, codex's `thread_id`, opencode's `sessionID`). A loop with
//! [`SessionMode::Continue`] starts each run with the provider's resume option and the
//! id of its previous run that [`resumable`] accepts; the runtime falls back to a fresh
//! run in the same attempt when the CLI says the session does not exist, and notes it
//! on the run ([`not_resumed_note`]).
//!
//! A session id is an identifier, not output: the CLI generates it (a UUID for claude
//! and codex, `ses_` and base62 for opencode), it names a conversation stored in the
//! runner's own home directory and grants nothing by itself. Only an id that passes
//! [`is_valid_id`] (ASCII letters, digits, `-` and `_`, at most [`MAX_ID_BYTES`]) is
//! stored or put in argv, so no text of the output can ride along as an "id", none can
//! pass for a flag, and it needs no redaction where the run's outline goes.

use crate::failure::FailureClass;
use crate::{Provider, Run, RunStatus, SessionMode};

/// The longest session id kept (the CLIs' ids are 36 bytes or less).
pub const MAX_ID_BYTES: usize = 128;

/// Whether `id` is a well-formed session id: 1 to [`MAX_ID_BYTES`] ASCII letters,
/// digits, `-` and `_`, starting with a letter or digit (so it cannot read as a flag).
pub fn is_valid_id(id: &str) -> bool {
    id.len() <= MAX_ID_BYTES
        && id.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `provider`'s CLI has a resume option we checked against its `--help`:
/// claude `--resume <id>`, codex `exec resume <id>`, opencode `run --session <id>`.
/// cursor, codewith and aicopilot are refused `--session continue`.
pub fn can_resume(provider: Provider) -> bool {
    matches!(
        provider,
        Provider::Claude | Provider::Codex | Provider::Opencode
    )
}

/// The providers [`can_resume`] accepts, for messages.
pub const RESUMING_PROVIDERS: &str = "claude, codex and opencode";

/// The session id of `last` that the next run of a `continue` loop resumes: the most
/// recent finished run that reported one (the store's `last_session_run`) — one that
/// succeeded, failed or timed out (the CLIs keep a conversation's turns as they go), but
/// not one that was abandoned (its process was cut off or lost mid-write), and not one
/// that failed because its conversation outgrew the model's context (resuming it again
/// would fail the same way): then the next run starts fresh.
pub fn resumable(last: &Run) -> Option<&str> {
    let finished = matches!(
        last.status,
        RunStatus::Succeeded | RunStatus::Failed | RunStatus::TimedOut
    );
    let outgrown = last.failure_class == Some(FailureClass::ContextLength);
    last.session_id
        .as_deref()
        .filter(|id| finished && !outgrown && is_valid_id(id))
}

/// Whether a loop of this mode resumes at all.
pub fn continues(mode: SessionMode) -> bool {
    mode == SessionMode::Continue
}

/// The run's note when it resumed `id`.
pub fn resumed_note(id: &str) -> String {
    format!("resumed session {id}")
}

/// The run's note when the CLI said `id` does not exist and the run started fresh.
pub fn not_resumed_note(id: &str) -> String {
    format!("session {id} could not be resumed; started fresh")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_a_conservative_charset_of_bounded_length() {
        for ok in [
            "4650a78d-c9d1-4006-8d2c-6c5f22d811ff",
            "ses_dd6dfff06ffe8b1Hs0VleCu8RP",
            "a",
        ] {
            assert!(is_valid_id(ok), "{ok}");
        }
        let long = "a".repeat(MAX_ID_BYTES + 1);
        for bad in [
            "",
            "-rf",
            "_x",
            "a b",
            "a;b",
            "a\nb",
            "é",
            "id/../x",
            long.as_str(),
        ] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
        assert!(is_valid_id(&"a".repeat(MAX_ID_BYTES)));
    }

    fn run(status: RunStatus, class: Option<FailureClass>, id: Option<&str>) -> Run {
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap_or_default();
        Run {
            id: crate::RunId::new("r1"),
            loop_id: crate::LoopId::new("l1"),
            loop_name: "agent".into(),
            source: crate::RunSource::Scheduled,
            started_at: Some(at),
            finished_at: Some(at),
            failure_class: class,
            session_id: id.map(str::to_owned),
            ..Run::history(at, 1, status, at)
        }
    }

    #[test]
    fn the_last_finished_conversation_is_resumed_unless_it_outgrew_its_context() {
        let id = Some("sess-1");
        for status in [RunStatus::Succeeded, RunStatus::Failed, RunStatus::TimedOut] {
            assert_eq!(resumable(&run(status, None, id)), id, "{status}");
        }
        let failed = |class| run(RunStatus::Failed, Some(class), id);
        assert_eq!(resumable(&failed(FailureClass::RateLimit)), id);
        assert_eq!(resumable(&failed(FailureClass::ContextLength)), None);
        assert_eq!(resumable(&run(RunStatus::Abandoned, None, id)), None);
        assert_eq!(resumable(&run(RunStatus::Succeeded, None, None)), None);
        assert_eq!(
            resumable(&run(RunStatus::Succeeded, None, Some("--resume"))),
            None
        );
        assert_eq!(resumed_note("s"), "resumed session s");
        assert_eq!(
            not_resumed_note("s"),
            "session s could not be resumed; started fresh"
        );
    }

    #[test]
    fn only_checked_providers_resume() {
        let resuming: Vec<Provider> = Provider::ALL
            .iter()
            .copied()
            .filter(|p| can_resume(*p))
            .collect();
        assert_eq!(
            resuming,
            [Provider::Claude, Provider::Opencode, Provider::Codex]
        );
    }
}
