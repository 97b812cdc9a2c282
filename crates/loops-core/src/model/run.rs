//! A run: one attempt at one slot, its usage and how it ended.

use super::*;

/// Token usage an agent reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One attempt at one slot of one loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Run {
    pub id: RunId,
    pub loop_id: LoopId,
    pub loop_name: String,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub scheduled_for: Instant,
    pub attempt: u32,
    pub status: RunStatus,
    pub source: RunSource,
    /// When the attempt became due: its slot (or retry time) plus the loop's jitter for
    /// the slot; dispatch lag counts from here. `None` for ad-hoc runs.
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub due_at: Option<Instant>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub started_at: Option<Instant>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub finished_at: Option<Instant>,
    pub exit_code: Option<i32>,
    pub duration_ms: Option<u64>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// Why the attempt did not succeed, in our own words only (`exited with status 1`,
    /// `claude exited with status 1`, `timed out after 5s`): never text of the run's
    /// output, so it may go wherever a run's outline goes (the event log, tables,
    /// `LOOPS_RUN_ERROR`). On a succeeded run it is a note about what followed the run
    /// (`note: --until-cmd could not start: …`, [`crate::stop`]).
    pub error: Option<String>,
    /// What the failure quoted from the run's own output — an agent's reported error,
    /// its most telling stderr line. Output like `stdout`/`stderr`: redacted wherever
    /// they are, never in the event log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_output: Option<String>,
    pub pid: Option<u32>,
    /// Start time of `pid` (clock ticks since boot on Linux), so a reused PID is never
    /// mistaken for the run's process.
    pub pid_start_time: Option<u64>,
    pub claimed_by: Option<String>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub lease_expires_at: Option<Instant>,
    /// An agent's final text (bounded), from its stdout: output, redacted where stdout
    /// is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What kind of failure a failed run was ([`crate::failure::classify`]); `None`
    /// for a run that did not fail (or was recorded before classes existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureClass>,
    /// When its provider said to come back (a usage limit's reset, a `retry-after`).
    #[serde(
        default,
        with = "crate::timefmt::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub retry_at: Option<Instant>,
    /// The conversation an agent run reported (claude's `session_id`, codex's
    /// `thread_id`, opencode's `sessionID`), kept only when it is a well-formed id
    /// ([`crate::session::is_valid_id`]): an identifier, not output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What became of `--session continue` on this run, in our own words: `resumed
    /// session <id>`, or `session <id> could not be resumed; started fresh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_note: Option<String>,
    /// The account profile an agent run ran on: the one its loop's pool chose at
    /// claim, or its target's `account`; `None` without either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

impl Run {
    /// A finished attempt at a scheduled slot, to import as a loop's history
    /// (`ImportLoop::history`): its ids and loop name are placeholders the store
    /// replaces, `updatedAt` is `created_at`, and nothing else is recorded — the caller
    /// sets what its history knows.
    pub fn history(
        scheduled_for: Instant,
        attempt: u32,
        status: RunStatus,
        created_at: Instant,
    ) -> Self {
        Self {
            id: RunId::new(String::new()),
            loop_id: LoopId::new(String::new()),
            loop_name: String::new(),
            scheduled_for,
            attempt,
            status,
            source: RunSource::Scheduled,
            due_at: None,
            started_at: None,
            finished_at: None,
            exit_code: None,
            duration_ms: None,
            stdout: None,
            stderr: None,
            error: None,
            error_output: None,
            pid: None,
            pid_start_time: None,
            claimed_by: None,
            lease_expires_at: None,
            summary: None,
            usage: None,
            failure_class: None,
            retry_at: None,
            session_id: None,
            session_note: None,
            account: None,
            created_at,
            updated_at: created_at,
        }
    }
}

/// How a finished attempt ended, as recorded by `finalize`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub finished_at: Instant,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Our own words only ([`Run::error`]).
    pub error: Option<String>,
    /// What the failure quoted from the output ([`Run::error_output`]).
    pub error_output: Option<String>,
    pub summary: Option<String>,
    pub usage: Option<Usage>,
    /// See [`Run::failure_class`].
    pub failure_class: Option<FailureClass>,
    /// See [`Run::retry_at`].
    pub retry_at: Option<Instant>,
    /// A stop condition the runner found met after this (successful) run, before
    /// recording it: its finalization ends the loop ([`crate::transitions::on_finish`]).
    /// Not stored on the run; the loop's `statusReason` says it.
    pub stop: Option<crate::stop::StopMet>,
    /// See [`Run::session_id`].
    pub session_id: Option<String>,
    /// See [`Run::session_note`].
    pub session_note: Option<String>,
}

impl RunOutcome {
    /// An attempt that ended with `status` at `finished_at`: no exit code, no output,
    /// no error yet.
    pub fn new(status: RunStatus, finished_at: Instant) -> Self {
        Self {
            status,
            finished_at,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            error: None,
            error_output: None,
            summary: None,
            usage: None,
            failure_class: None,
            retry_at: None,
            stop: None,
            session_id: None,
            session_note: None,
        }
    }

    /// A failed attempt with no process to show for it (its target could not be
    /// resolved, its workflow is missing): `error` says why.
    pub fn failed(finished_at: Instant, error: impl Into<String>) -> Self {
        Self {
            error: Some(error.into()),
            failure_class: Some(FailureClass::Other),
            ..Self::new(RunStatus::Failed, finished_at)
        }
    }

    /// An attempt its runner could not see to its end (the runner died, or the process
    /// outlived it and its exit status is unknown); it counts as a failed attempt.
    pub fn abandoned(finished_at: Instant, error: impl Into<String>) -> Self {
        Self {
            error: Some(error.into()),
            ..Self::new(RunStatus::Abandoned, finished_at)
        }
    }

    /// An attempt its runner's owner stopped (daemon stop, lease lost): abandoned, with
    /// the error `interrupted: {reason}`.
    pub fn interrupted(finished_at: Instant, reason: &str) -> Self {
        Self::abandoned(finished_at, format!("interrupted: {reason}"))
    }

    /// The same outcome with the captured output tails.
    pub fn with_output(self, stdout: String, stderr: String) -> Self {
        Self {
            stdout,
            stderr,
            ..self
        }
    }
}

impl Provider {
    /// The CLI executable the provider is driven through.
    pub fn executable(self) -> &'static str {
        match self {
            Provider::Claude => "claude",
            // Cursor's standalone CLI is called `agent` (not `cursor-agent`).
            Provider::Cursor => "agent",
            Provider::Codewith => "codewith",
            Provider::Aicopilot => "aicopilot",
            Provider::Opencode => "opencode",
            Provider::Codex => "codex",
        }
    }
}
