//! A loop: its policy and agent-operations settings, what the engine keeps between
//! runs, where its notifications go, and the loop record itself.

use super::*;

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

/// Everything needed to create a loop: a [`NewLoop`] before its labels are checked and
/// its first slot is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDefinition {
    pub name: String,
    pub description: Option<String>,
    pub schedule: Schedule,
    pub target: Target,
    pub policy: Policy,
    /// Labels (`[a-z0-9][a-z0-9._-]*`); stored sorted, each once.
    pub labels: Vec<String>,
    /// Where the loop's failure (or recovery) notifications go, if anywhere besides the
    /// store-wide default.
    pub notify: Option<Notify>,
}

impl LoopDefinition {
    /// The loop a store writes for this definition, with its labels as checked and
    /// its next slot: what `create`, `edit` and `import` write.
    pub fn into_new_loop(self, labels: Vec<String>, next_run_at: Option<Instant>) -> NewLoop {
        NewLoop {
            name: self.name,
            description: self.description,
            schedule: self.schedule,
            target: self.target,
            policy: self.policy,
            labels,
            notify: self.notify,
            next_run_at,
        }
    }
}

impl From<&Loop> for LoopDefinition {
    /// A stored loop's definition, the starting point of an edit.
    fn from(lp: &Loop) -> Self {
        Self {
            name: lp.name.clone(),
            description: lp.description.clone(),
            schedule: lp.schedule.clone(),
            target: lp.target.clone(),
            policy: lp.policy(),
            labels: lp.labels.clone(),
            notify: lp.notify.clone(),
        }
    }
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
