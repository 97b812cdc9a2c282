//! The domain records: loops, runs, schedules, targets and workflow specs. Here the
//! status and kind words (`string_enum!`); `target` (schedule, targets), `loops`
//! (policy, the loop record), `run` (runs and their outcome) hold the records.
//!
//! JSON field names follow OpenLoops 0.3 (camelCase) so existing scripts keep working.

use crate::failure::FailureClass;
use crate::{Duration, Instant, LoopId, RunId};
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The stored and printed form.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// In the HTTP API's OpenAPI document: a string, one of the stored forms.
        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
                ObjectBuilder::new()
                    .schema_type(SchemaType::Type(Type::String))
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "invalid {} {other:?}: expected one of {}",
                        stringify!($name),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

mod loops;
mod run;
mod target;

pub use loops::*;
pub use run::*;
pub use target::*;

string_enum!(
    /// Whether the scheduler considers a loop.
    LoopStatus {
        Active = "active",
        Paused = "paused",
        Stopped = "stopped",
        Expired = "expired",
        /// Put away: never scheduled, hidden from `list`, history kept.
        Archived = "archived",
        /// A stop condition ended it (`--until-cmd`, `--until-output`, `--max-runs`;
        /// `statusReason` says which): never scheduled, until `resume` starts it again.
        Done = "done",
    }
);

string_enum!(
    /// When a loop's notifications fire (`--notify-on`).
    NotifyOn {
        /// A slot ended `failed`, `timed_out` or `abandoned` after its last attempt.
        Failure = "failure",
        /// The first success after a failure.
        Recovery = "recovery",
        /// Both: when the outcome changes to failure or back (stored before issue #19
        /// as `always`, which the migrations renamed).
        Changes = "changes",
        /// Every finished slot: each failure on its last attempt, each success (a
        /// success after a failure is a recovery). Skipped slots never notify.
        Always = "always",
    }
);

string_enum!(
    /// What a notification is about.
    NotifyEvent {
        Failure = "failure",
        Recovery = "recovery",
        /// A success that is not a recovery (`--notify-on always`).
        Success = "success",
        /// `loops notify test`.
        Test = "test",
        /// The circuit breaker parked the loop (`maxFailures` consecutive failed slots).
        Parked = "parked",
        /// A run met its account's usage limit: the account's loops are held (one per
        /// provider and account, see [`crate::hold`]).
        Held = "held",
        /// A run on a held account did not meet the limit: the hold is over.
        Resumed = "resumed",
        /// A stop condition ended the loop (status `done`).
        Done = "done",
    }
);

string_enum!(
    /// Where one notification goes.
    NotifyChannel {
        /// A command hook: the run as JSON on stdin, `LOOPS_*` in its environment.
        Cmd = "cmd",
        /// A webhook: the same JSON by HTTP POST.
        Url = "url",
    }
);

string_enum!(
    /// The state of one notification delivery.
    DeliveryStatus {
        Pending = "pending",
        Delivered = "delivered",
        Failed = "failed",
    }
);

string_enum!(
    /// The state of one attempt.
    RunStatus {
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        TimedOut = "timed_out",
        Abandoned = "abandoned",
        Skipped = "skipped",
    }
);

impl RunStatus {
    /// A terminal status that counts as a failed attempt (eligible for retry).
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::TimedOut | Self::Abandoned)
    }
}

string_enum!(
    /// What to do with slots missed while no scheduler ran.
    CatchUp {
        /// Coalesce missed slots into the latest one.
        Latest = "latest",
        /// Run up to `catchUpLimit` missed slots, oldest first.
        All = "all",
        /// Run only the persisted next slot.
        None = "none",
    }
);

string_enum!(
    /// Whether runs of the same loop may overlap.
    Overlap {
        Skip = "skip",
        Allow = "allow",
    }
);

string_enum!(
    /// How interval loops compute the next slot.
    Anchor {
        /// From the scheduled slot, advanced past the finish time.
        FixedRate = "fixed_rate",
        /// From the finish time.
        FixedDelay = "fixed_delay",
    }
);

string_enum!(
    /// Agent CLIs loops can drive.
    Provider {
        Claude = "claude",
        Cursor = "cursor",
        Codewith = "codewith",
        Aicopilot = "aicopilot",
        Opencode = "opencode",
        Codex = "codex",
    }
);

string_enum!(
    /// Whether an agent runs with the user's own configuration or an isolated one.
    ConfigIsolation {
        Safe = "safe",
        None = "none",
    }
);

string_enum!(
    /// Whether each run of an agent loop starts a new conversation (`fresh`) or resumes
    /// the one its previous run reported (`continue`); see [`crate::session`].
    SessionMode {
        Fresh = "fresh",
        Continue = "continue",
    }
);

impl SessionMode {
    /// A loop starts fresh unless told otherwise (`--session` left out).
    pub const DEFAULT: SessionMode = SessionMode::Fresh;

    /// Whether this is the default (left out of a target's JSON).
    pub fn is_default(&self) -> bool {
        *self == Self::DEFAULT
    }
}

impl Default for SessionMode {
    fn default() -> Self {
        Self::DEFAULT
    }
}

string_enum!(
    /// How a run came to be started.
    RunSource {
        /// Claimed by the scheduler for a due slot.
        Scheduled = "scheduled",
        /// `run-now` on the loop's due slot.
        DueSlot = "due_slot",
        /// `run-now` on a pending retry slot.
        RetrySlot = "retry_slot",
        /// `run-now` at an instant that is not a slot of the schedule.
        AdHoc = "ad_hoc",
    }
);

string_enum!(
    /// Whether a workflow spec can be run and scheduled.
    WorkflowStatus {
        Active = "active",
        Archived = "archived",
    }
);

string_enum!(
    /// The state of one step within a workflow run.
    StepStatus {
        Pending = "pending",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        TimedOut = "timed_out",
        Skipped = "skipped",
        Cancelled = "cancelled",
    }
);

impl StepStatus {
    /// Whether the step has ended (for this attempt).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }
}

string_enum!(
    /// The state of a workflow run.
    WorkflowRunStatus {
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        TimedOut = "timed_out",
        Cancelled = "cancelled",
    }
);

string_enum!(
    /// What an entry of a workflow run's append-only event log records. Stored and
    /// printed as its text (the `event_type` column, `eventType` in JSON, as OpenLoops
    /// 0.3 names them).
    WorkflowEventType {
        /// The run was created, for `workflows run` or for a loop's slot.
        Created = "created",
        /// An attempt began: the first, a retry of the slot, or the continuation of an
        /// attempt whose runner died.
        AttemptStarted = "attempt_started",
        StepStarted = "step_started",
        StepSucceeded = "step_succeeded",
        StepFailed = "step_failed",
        StepTimedOut = "step_timed_out",
        StepSkipped = "step_skipped",
        StepCancelled = "step_cancelled",
        /// An agent step waits, pending, for its provider and account: held by a usage
        /// limit (the step's own or another run's) or a spent store-wide budget.
        StepHeld = "step_held",
        /// `workflows recover` reset a step whose process was gone to `pending`.
        Recovered = "recovered",
        /// The attempt ended and the run succeeded.
        Succeeded = "succeeded",
        /// The attempt ended with a step failure that stopped the run.
        Failed = "failed",
        /// A step timed out and stopped the run, or the whole run timed out.
        TimedOut = "timed_out",
        /// `workflows cancel` (or `remove --force` of its loop) stopped the run.
        Cancelled = "cancelled",
        /// The run's owner stopped the attempt (daemon stop, lease lost, Ctrl-C): the
        /// run is recorded `failed`, and the loop run it belongs to `abandoned`.
        Interrupted = "interrupted",
    }
);

impl WorkflowEventType {
    /// The event recording that a step ended with `status`.
    pub fn step_ended(status: StepStatus) -> Self {
        match status {
            StepStatus::Succeeded => Self::StepSucceeded,
            StepStatus::TimedOut => Self::StepTimedOut,
            StepStatus::Skipped => Self::StepSkipped,
            StepStatus::Cancelled => Self::StepCancelled,
            StepStatus::Failed | StepStatus::Pending | StepStatus::Running => Self::StepFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn workflow_event_types_keep_their_stored_names() {
        // The stored and printed names (OpenLoops 0.3's): renaming a variant must not
        // change them.
        let names: Vec<&str> = WorkflowEventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "created",
                "attempt_started",
                "step_started",
                "step_succeeded",
                "step_failed",
                "step_timed_out",
                "step_skipped",
                "step_cancelled",
                "step_held",
                "recovered",
                "succeeded",
                "failed",
                "timed_out",
                "cancelled",
                "interrupted",
            ]
        );
        for t in WorkflowEventType::ALL {
            assert_eq!(t.as_str().parse::<WorkflowEventType>(), Ok(*t));
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::Value::from(t.as_str())
            );
        }
        assert!("step_retried".parse::<WorkflowEventType>().is_err());
    }

    #[test]
    fn run_outcome_constructors() {
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        let o = RunOutcome::interrupted(at, "daemon stopped");
        assert_eq!(o.status, RunStatus::Abandoned);
        assert_eq!(o.error.as_deref(), Some("interrupted: daemon stopped"));
        assert_eq!(o.finished_at, at);
        let o = RunOutcome::failed(at, "no active workflow named \"w\"")
            .with_output("out".into(), "err".into());
        assert_eq!(o.status, RunStatus::Failed);
        assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("out", "err"));
        assert_eq!(o.exit_code, None);
        let o = RunOutcome::new(RunStatus::Succeeded, at);
        assert_eq!((o.error, o.summary, o.usage), (None, None, None));
        assert_eq!(
            RunOutcome::abandoned(at, "runner gone").status,
            RunStatus::Abandoned
        );
    }

    #[test]
    fn a_step_ending_names_its_event() {
        use WorkflowEventType as E;
        for (status, event) in [
            (StepStatus::Succeeded, E::StepSucceeded),
            (StepStatus::Failed, E::StepFailed),
            (StepStatus::TimedOut, E::StepTimedOut),
            (StepStatus::Skipped, E::StepSkipped),
            (StepStatus::Cancelled, E::StepCancelled),
        ] {
            assert_eq!(E::step_ended(status), event, "{status}");
        }
    }

    #[test]
    fn env_and_config_overrides_refuse_duplicate_keys() {
        let dup = r#"{"command": "true", "env": {"A": "1", "A": "2"}}"#;
        let err = serde_json::from_str::<CommandTarget>(dup).unwrap_err();
        assert!(err.to_string().contains("duplicate key \"A\""), "{err}");
        // Through the internally tagged enum (buffered content) too.
        let dup = r#"{"type": "agent", "provider": "codex", "prompt": "p",
            "configOverrides": {"model": "a", "model": "b"}}"#;
        let err = serde_json::from_str::<Target>(dup).unwrap_err();
        assert!(err.to_string().contains("duplicate key \"model\""), "{err}");
        // Struct fields given twice are already an error in serde.
        let dup = r#"{"command": "true", "command": "false"}"#;
        assert!(serde_json::from_str::<CommandTarget>(dup).is_err());
        let ok = r#"{"command": "true", "env": {"A": "1", "B": "2"}}"#;
        let t: CommandTarget = serde_json::from_str(ok).unwrap();
        assert_eq!(t.env.len(), 2);
    }
}
