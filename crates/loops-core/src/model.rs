//! The domain records: loops, runs, schedules, targets and workflow specs.
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

/// When a loop's slots fall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Schedule {
    /// One slot at an absolute instant.
    #[serde(rename_all = "camelCase")]
    Once {
        #[serde(with = "crate::timefmt")]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
        at: Instant,
    },
    /// A slot every `every_ms`.
    #[serde(rename_all = "camelCase")]
    Interval { every_ms: u64, anchor: Anchor },
    /// Five-field cron in an IANA zone.
    #[serde(rename_all = "camelCase")]
    Cron {
        expression: String,
        timezone: String,
    },
    /// `min_interval_ms` after the previous finish, no backfill.
    #[serde(rename_all = "camelCase")]
    Dynamic { min_interval_ms: u64 },
}

/// An OpenAccounts profile a target runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Account {
    pub profile: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// A shell command or executable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CommandTarget {
    pub command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default)]
    pub shell: bool,
    #[serde(
        default,
        deserialize_with = "unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub env: BTreeMap<String, String>,
    /// Kills the run after this long; `None` for no limit. JSON: `timeoutMs`.
    #[serde(default, rename = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Terminates the run once it printed nothing (on stdout or stderr) for this long;
    /// `None` for no limit. JSON: `idleTimeoutMs`.
    #[serde(
        default,
        rename = "idleTimeoutMs",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<Account>,
}

/// A headless AI coding agent run with a prompt on stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentTarget {
    pub provider: Provider,
    /// The prompt text (from `--prompt`, or the contents of `promptFile`, filled in by
    /// the front end that reads the file).
    #[serde(default)]
    pub prompt: String,
    /// Where the prompt was read from, when it came from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile: Option<String>,
    /// Default `safe` (as `create agent` without `--config-isolation`).
    #[serde(default = "default_isolation")]
    pub config_isolation: ConfigIsolation,
    /// Provider configuration overrides, dotted key → value (codex and codewith, where
    /// each becomes `-c key=value`). A typed field rather than free-form argv, so a loop
    /// can configure its provider (e.g. a custom model endpoint) without being able to
    /// inject arbitrary flags.
    #[serde(
        default,
        deserialize_with = "unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub config_overrides: BTreeMap<String, String>,
    #[serde(
        default,
        deserialize_with = "unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub env: BTreeMap<String, String>,
    /// Kills the run after this long; `None` for no limit. JSON: `timeoutMs`.
    #[serde(default, rename = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Terminates the run once it printed nothing (on stdout or stderr) for this long;
    /// `None` for no limit. JSON: `idleTimeoutMs`.
    #[serde(
        default,
        rename = "idleTimeoutMs",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<Account>,
    /// Account profiles a run may take instead of one `account` (`--account-pool`): at
    /// claim, the least loaded one no usage limit holds and no cap stops
    /// ([`crate::caps::choose_account`]); the run records which (`Run::account`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub account_pool: Vec<String>,
    /// `continue`: each run resumes the conversation the loop's previous run reported
    /// (loop targets only; a workflow step always starts fresh). Left out when `fresh`.
    #[serde(default, skip_serializing_if = "SessionMode::is_default")]
    pub session: SessionMode,
    // Provider options (`crate::provider_options`: which provider has which, with
    // which values). They change what the agent may do, so they are "what runs".
    /// claude's `--permission-mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// codex's `--sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// claude's `--effort`, codex's `model_reasoning_effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// opencode's `--variant`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// More directories the agent may use (`--add-dir`, absolute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_dirs: Vec<String>,
    /// claude's `--max-turns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Tool rules the agent may use without asking (claude's `--allowed-tools`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_tools: Vec<String>,
    /// Tool rules the agent is denied (claude's `--disallowed-tools`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_tools: Vec<String>,
}

fn default_isolation() -> ConfigIsolation {
    ConfigIsolation::DEFAULT
}

// The defaults of what a loop definition leaves out, written once: the CLI's flags
// (`loops_runtime::definition`), the HTTP API's bodies, the MCP tools and the OpenLoops
// import all take them from here (and the policy's from `Policy::default`; a cron
// schedule's zone is the host's, `definition::local_zone`).

impl Anchor {
    /// An interval without an anchor is `fixed_rate`.
    pub const DEFAULT: Anchor = Anchor::FixedRate;
}

impl ConfigIsolation {
    /// An agent runs with an isolated configuration unless told otherwise.
    pub const DEFAULT: ConfigIsolation = ConfigIsolation::Safe;
}

impl CommandTarget {
    /// Whether a loop's command runs through `/bin/sh` when its definition does not
    /// say: a command given as one string does (`--cmd "git status"`); one given as a
    /// program and its arguments runs directly (`--cmd git -- status`). (A workflow
    /// step's command runs directly unless `shell: true`.)
    pub fn default_shell(args: &[String]) -> bool {
        args.is_empty()
    }
}

/// Deserializes a string map, refusing a key given twice: serde_json would silently
/// keep the last one, so `{"A": "1", "A": "2"}` in a spec would lose a value unseen.
/// For `#[serde(deserialize_with)]` on every env-like map of a definition.
pub fn unique_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct Unique;
    impl<'de> Visitor<'de> for Unique {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of string values")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, String>()? {
                if out.contains_key(&key) {
                    return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                }
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Unique)
}

/// A stored workflow spec, referenced by name (resolved at run time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowTarget {
    pub workflow: String,
    /// Kills the run after this long; `None` for no limit. JSON: `timeoutMs`.
    #[serde(default, rename = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Values for the workflow's params (`--param K=V`), checked against its spec when
    /// a run starts; redacted in listings as env values are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

/// What a loop runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// An agent target is the largest (its provider options); targets live one per loop or
// step, never in bulk, so boxing it would cost every match and constructor for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Target {
    Command(CommandTarget),
    Agent(AgentTarget),
    Workflow(WorkflowTarget),
}

impl Target {
    /// `command`, `agent` or `workflow`.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Command(_) => "command",
            Target::Agent(_) => "agent",
            Target::Workflow(_) => "workflow",
        }
    }
    /// The target's own idle timeout, if any (workflows have none of their own).
    pub fn idle_timeout(&self) -> Option<Duration> {
        match self {
            Target::Command(t) => t.idle_timeout,
            Target::Agent(t) => t.idle_timeout,
            Target::Workflow(_) => None,
        }
    }
    /// The target's own timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        match self {
            Target::Command(t) => t.timeout,
            Target::Agent(t) => t.timeout,
            Target::Workflow(t) => t.timeout,
        }
    }
}

/// Scheduling policy shared by every loop, with the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Policy {
    pub catch_up: CatchUp,
    pub catch_up_limit: u32,
    pub overlap: Overlap,
    pub max_attempts: u32,
    pub retry_delay_ms: u64,
    pub lease_ms: u64,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<Instant>,
    /// Each slot starts a stable pseudo-random delay in `[0, jitterMs)` after its
    /// scheduled time (0 = none; see [`crate::schedule::jitter_delay`]).
    #[serde(default)]
    pub jitter_ms: u64,
    /// Runner labels a runner must advertise, every one of them, to claim the loop's
    /// scheduled slots (`create --on`; the runners of a PostgreSQL store). Sorted,
    /// each once; empty: any runner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_on: Vec<String>,
    /// Agent-operations settings (issue #20): retry back-off, circuit breaker.
    #[serde(flatten)]
    pub ops: LoopOps,
}

string_enum!(
    /// How the delay before a retry grows (`--retry-backoff`).
    RetryBackoff {
        /// `retryDelay` every time (4× for transient failures).
        Fixed = "fixed",
        /// `retryDelay` doubled per attempt, with full jitter, capped at `retryDelayMax`.
        Exponential = "exponential",
    }
);

/// Default cap on a retry's delay (`--retry-delay-max`): 6 h.
pub const DEFAULT_RETRY_DELAY_MAX_MS: u64 = 6 * 3_600_000;

/// A loop's agent-operations settings (issue #20, README "Agent operations"); part of
/// its definition, flattened into the loop's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoopOps {
    /// `fixed` (the default) or `exponential`.
    #[serde(default = "LoopOps::default_backoff")]
    pub retry_backoff: RetryBackoff,
    /// The longest delay before a retry.
    #[serde(default = "LoopOps::default_delay_max")]
    pub retry_delay_max_ms: u64,
    /// After this many consecutive failed slots the loop is parked (paused, with the
    /// reason); `None`: never.
    #[serde(default)]
    pub max_failures: Option<u32>,
    /// Stop conditions (README, "Agent operations"; [`crate::stop`]): after each
    /// successful slot run, a shell command run in the loop's cwd; exit 0 ends the loop
    /// (`done`). It defines what runs, like the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_cmd: Option<String>,
    /// A regex matched against a successful run's summary (agents) or stdout
    /// (commands, workflows); a match ends the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_output: Option<String>,
    /// The loop ends once this many of its slots have ended (whatever their outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// Budgets (agent loops; [`crate::budget`]): the tokens (`"200000/day"`) and the
    /// dollars (`"5/week"`) the loop's runs may use per UTC day or week before it is
    /// held until the window resets.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::budget::serde_tokens"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "200000/day"))]
    pub budget_tokens: Option<crate::budget::Budget>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::budget::serde_usd"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "5/week"))]
    pub budget_usd: Option<crate::budget::Budget>,
}

impl LoopOps {
    fn default_backoff() -> RetryBackoff {
        RetryBackoff::Fixed
    }
    fn default_delay_max() -> u64 {
        DEFAULT_RETRY_DELAY_MAX_MS
    }
}

impl Default for LoopOps {
    fn default() -> Self {
        Self {
            retry_backoff: RetryBackoff::Fixed,
            retry_delay_max_ms: DEFAULT_RETRY_DELAY_MAX_MS,
            max_failures: None,
            until_cmd: None,
            until_output: None,
            max_runs: None,
            budget_tokens: None,
            budget_usd: None,
        }
    }
}

/// What the engine keeps about a loop between its runs (issue #20): state on one store,
/// not definition (a bundle leaves it out), flattened into the loop's JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoopState {
    /// Consecutive slots whose last attempt failed (what `maxFailures` counts); a
    /// success, and `resume`, start it over.
    #[serde(default)]
    pub failure_streak: u32,
    /// Why the engine paused the loop (the circuit breaker) or ended it (a stop
    /// condition, status `done`), until `resume`.
    #[serde(default)]
    pub status_reason: Option<String>,
    /// The slot whose attempts met a usage limit (they hold the account instead of
    /// counting against `maxAttempts`; see [`crate::transitions::attempts_allowed`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::option"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub held_slot: Option<Instant>,
    /// How many attempts of `heldSlot` met the usage limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_attempts: u32,
    /// The loop's slots that ended (whatever their outcome) since it was created or
    /// last resumed, counted while it has a stop condition ([`LoopOps::has_stop`]):
    /// what `maxRuns` counts. JSON `runCount`, left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub run_count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl LoopOps {
    /// Whether the loop has a stop condition (`--until-cmd`, `--until-output`,
    /// `--max-runs`).
    pub fn has_stop(&self) -> bool {
        self.until_cmd.is_some() || self.until_output.is_some() || self.max_runs.is_some()
    }
}

impl LoopState {
    /// Whether this is the state of a loop that never failed, was never held or parked.
    pub fn is_fresh(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            catch_up: CatchUp::Latest,
            catch_up_limit: DEFAULT_CATCH_UP_LIMIT,
            overlap: Overlap::Skip,
            max_attempts: 1,
            retry_delay_ms: 60_000,
            lease_ms: 30 * 60_000,
            expires_at: None,
            jitter_ms: 0,
            runs_on: Vec::new(),
            ops: LoopOps::default(),
        }
    }
}

/// Default cap on slots replayed by `catchUp: all`.
pub const DEFAULT_CATCH_UP_LIMIT: u32 = 10;

/// Where a loop's notifications go and when (`--notify-cmd`, `--notify-url`,
/// `--notify-on`); also the store-wide default (`loops notify set`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Notify {
    /// A command run by `/bin/sh -c` with the run as JSON on stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    /// An `http://` or `https://` URL the run is POSTed to as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When it fires (default `failure`).
    #[serde(default = "NotifyOn::default_on")]
    pub on: NotifyOn,
}

impl NotifyOn {
    /// Notifications fire on failures unless told otherwise.
    pub const DEFAULT: NotifyOn = NotifyOn::Failure;

    fn default_on() -> Self {
        Self::DEFAULT
    }
}

/// One notification about one run, to one channel, and how its delivery went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delivery {
    pub id: String,
    pub run_id: RunId,
    pub loop_id: LoopId,
    pub event: NotifyEvent,
    pub channel: NotifyChannel,
    /// The command or URL, as configured when the notification was queued (listings
    /// redact a URL's path like the loop's, unless `--show-output`).
    pub target: String,
    pub status: DeliveryStatus,
    /// Tries made so far (a webhook retries; a command hook is tried once).
    pub attempts: u32,
    pub last_error: Option<String>,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
    /// The runner delivering it (`host/pid/start-time`) while it is pending; a runner
    /// that dies leaves it to be taken over.
    #[serde(skip)]
    pub claimed_by: Option<String>,
    /// Until when that claim holds.
    #[serde(skip)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub claim_expires_at: Option<Instant>,
}

/// A loop as requested by a user, before the store gives it an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLoop {
    pub name: String,
    pub description: Option<String>,
    pub schedule: Schedule,
    pub target: Target,
    pub policy: Policy,
    /// Sorted, without duplicates ([`crate::validate::labels`]).
    pub labels: Vec<String>,
    pub notify: Option<Notify>,
    /// First slot, computed by [`crate::schedule::initial_next_run`].
    pub next_run_at: Option<Instant>,
}

/// A named schedule plus target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Loop {
    pub id: LoopId,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub status: LoopStatus,
    pub schedule: Schedule,
    pub target: Target,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub next_run_at: Option<Instant>,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub retry_scheduled_for: Option<Instant>,
    pub catch_up: CatchUp,
    pub catch_up_limit: u32,
    pub overlap: Overlap,
    pub max_attempts: u32,
    pub retry_delay_ms: u64,
    pub lease_ms: u64,
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<Instant>,
    /// See [`Policy::jitter_ms`].
    #[serde(default)]
    pub jitter_ms: u64,
    /// When the next slot (or pending retry) becomes due: `nextRunAt` plus the slot's
    /// jitter ([`crate::schedule::due_at`]).
    #[serde(default, with = "crate::timefmt::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub due_at: Option<Instant>,
    /// Sorted, without duplicates.
    #[serde(default)]
    pub labels: Vec<String>,
    /// See [`Policy::runs_on`] (JSON `runsOn`, left out when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
    /// See [`Policy::ops`].
    #[serde(flatten)]
    pub ops: LoopOps,
    /// The engine's state of the loop (failure streak, why it was paused).
    #[serde(flatten)]
    pub state: LoopState,
    /// Until when the loop's provider and account are held by a usage limit (not
    /// stored with the loop: the store keeps holds per account, [`crate::hold`], and
    /// the runtime's client fills this in).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::option"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub held_until: Option<Instant>,
    /// Why (with `heldUntil`): the reset instant or the probe, and the run that met it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_reason: Option<String>,
    /// Why a due loop has not started: "waiting for a free claude slot (cap 2)" (not
    /// stored: the runtime's client judges it from the daemons' caps and the runs in
    /// flight, [`crate::caps::mark_waiting`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Instant,
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Instant,
}

impl Loop {
    /// The scheduling policy fields as one value.
    pub fn policy(&self) -> Policy {
        Policy {
            catch_up: self.catch_up,
            catch_up_limit: self.catch_up_limit,
            overlap: self.overlap,
            max_attempts: self.max_attempts,
            retry_delay_ms: self.retry_delay_ms,
            lease_ms: self.lease_ms,
            expires_at: self.expires_at,
            jitter_ms: self.jitter_ms,
            runs_on: self.runs_on.clone(),
            ops: self.ops.clone(),
        }
    }
}

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
