//! The tools' inputs: one struct per tool, named and typed like the CLI's flags
//! (camelCase: `--show-output` is `showOutput`), with each field's doc comment as
//! its description in the JSON Schema. Unknown fields are refused, so a misspelled
//! parameter is an error rather than silently ignored.

use schemars::JsonSchema;
use serde::Deserialize;

/// `loops_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListParams {
    /// Only loops with this status: active, paused, stopped, expired, done or archived.
    /// Without it every loop but archived ones is listed.
    #[serde(default)]
    pub status: Option<String>,
    /// Include archived loops (when no status is given).
    #[serde(default)]
    pub all: bool,
    /// Only loops carrying every one of these labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// At most this many loops (by name); omit or 0 for all.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Reveal prompts and env values (only when the server allows secrets).
    #[serde(default)]
    pub show_output: bool,
}

/// A loop key and whether to reveal its secrets (`loops_show`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShowParams {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    #[serde(rename = "loop")]
    pub key: String,
    /// Reveal the prompt and env values (only when the server allows secrets).
    #[serde(default)]
    pub show_output: bool,
}

/// `loops_runs`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunsParams {
    /// Only runs of this loop (id, name or unambiguous id prefix).
    #[serde(default, rename = "loop")]
    pub key: Option<String>,
    /// Only runs with one of these statuses: running, succeeded, failed, timed_out,
    /// abandoned, skipped.
    #[serde(default)]
    pub status: Vec<String>,
    /// Only runs started at or after this: a duration ago ("1d", "2h") or an instant
    /// (RFC 3339, or local "YYYY-MM-DD HH:MM").
    #[serde(default)]
    pub since: Option<String>,
    /// Only runs started before this: a duration ago or an instant, as `since`.
    #[serde(default)]
    pub until: Option<String>,
    /// Only runs of loops carrying every one of these labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// At most this many runs, newest first (default 20; 0 for all).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Include the runs' stdout and stderr (only when the server allows secrets);
    /// otherwise each stream is replaced by its length.
    #[serde(default)]
    pub show_output: bool,
}

/// A loop key (`loops_pause`, `loops_resume`, `loops_stop`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopParams {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    #[serde(rename = "loop")]
    pub key: String,
}

/// `loops_holds_clear`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HoldsClearParams {
    /// The agent CLI whose hold to release (claude, codex, …).
    pub provider: String,
    /// The account profile ("default" for agents without an account); every account
    /// of the provider when left out.
    #[serde(default)]
    pub account: Option<String>,
}

/// `loops_remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoveParams {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    #[serde(rename = "loop")]
    pub key: String,
    /// Must be true: removing deletes the loop and its whole run history.
    #[serde(default)]
    pub confirm: bool,
    /// Terminate the loop's runs in flight first (SIGTERM, then SIGKILL after the
    /// kill grace), then remove it. Without it a loop with a run in flight is refused.
    #[serde(default)]
    pub force: bool,
}

/// `loops_run_now`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunNowParams {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    #[serde(rename = "loop")]
    pub key: String,
    /// Start the run even while another run of the loop is in flight (a loop with
    /// overlap "skip" refuses a second concurrent run otherwise).
    #[serde(default)]
    pub allow_overlap: bool,
    /// Wait for the run to finish (at most `waitTimeout`) and return it as recorded.
    /// Without it the tool returns at once with the run, status "running".
    #[serde(default)]
    pub wait: bool,
    /// How long `wait` waits, as a duration ("30s", "5m"; default 60s, at most 10m).
    /// When it passes the run is returned as it is then, still running.
    #[serde(default)]
    pub wait_timeout: Option<String>,
    /// Include the run's stdout and stderr (only when the server allows secrets).
    #[serde(default)]
    pub show_output: bool,
}

/// `workflows_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowsListParams {
    /// Only workflows with this status: active or archived (default active).
    #[serde(default)]
    pub status: Option<String>,
    /// Include archived versions too.
    #[serde(default)]
    pub all: bool,
}

/// A workflow key (`workflow_show`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowParams {
    /// The workflow: its exact id, else an active workflow's exact name, else an
    /// unambiguous id prefix.
    pub workflow: String,
}

/// `workflow_validate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidateParams {
    /// Path of a JSON spec file (at most 1 MiB; relative to the server's working
    /// directory). Give this or `spec`.
    #[serde(default)]
    pub file: Option<String>,
    /// The spec itself, as a JSON object (`{"name": …, "steps": [{"id": …, "command":
    /// …}]}`); its relative paths are relative to the server's working directory.
    /// Give this or `file`.
    #[serde(default)]
    pub spec: Option<serde_json::Map<String, serde_json::Value>>,
    /// Override the spec's name.
    #[serde(default)]
    pub name: Option<String>,
    /// Also check that every step's target can start here (executables on PATH).
    #[serde(default)]
    pub preflight: bool,
}

/// `workflow_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowRunParams {
    /// The workflow: its exact id, else an active workflow's exact name, else an
    /// unambiguous id prefix.
    pub workflow: String,
    /// Stop the whole run after this duration ("10m"; omit for no limit).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Values for the workflow's params, by name (checked against its spec). A param
    /// that picks a step's program or sets an env value needs --allow-code.
    #[serde(default)]
    pub params: std::collections::BTreeMap<String, String>,
    /// Wait for the run to finish (at most `waitTimeout`). Without it the tool
    /// returns once the run has started.
    #[serde(default)]
    pub wait: bool,
    /// How long `wait` waits ("30s", "5m"; default 60s, at most 10m).
    #[serde(default)]
    pub wait_timeout: Option<String>,
    /// Include every step's stdout and stderr (only when the server allows secrets).
    #[serde(default)]
    pub show_output: bool,
}

/// `workflow_run_inspect`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InspectParams {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Include step output (only when the server allows secrets).
    #[serde(default)]
    pub show_output: bool,
}

/// `workflow_cancel`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelParams {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Recorded with the cancellation (default "cancelled over MCP").
    #[serde(default)]
    pub reason: Option<String>,
}

/// Declares a parameter struct with the fields of a loop's definition that every
/// target type has (the CLI's shared `create` / `edit` flags) followed by `$extra`,
/// and its [`DefinitionFields`]: the one mapping of those fields to the runtime's
/// flags. (serde's `flatten` cannot be combined with refusing unknown fields.)
macro_rules! definition_params {
    (@declare [$(#[$meta:meta])* pub struct $name:ident { $($extra:tt)* }] $(
        $(#[doc = $doc:tt])* $field:ident: $ty:ty,
    )*) => {
        $(#[$meta])*
        #[derive(Debug, Default, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        pub struct $name {
            $($extra)*
            $($(#[doc = $doc])* #[serde(default)] pub $field: $ty,)*
        }

        impl DefinitionFields for $name {
            fn flags(&self) -> Result<loops_runtime::definition::DefinitionFlags, String> {
                use crate::flags::{duration, opt_duration, pairs, timeout};
                Ok(loops_runtime::definition::DefinitionFlags {
                    at: self.at.clone(),
                    every: opt_duration("--every", self.every.as_deref())?,
                    cron: self.cron.clone(),
                    dynamic: opt_duration("--dynamic", self.dynamic.as_deref())?,
                    tz: self.tz.clone(),
                    anchor: self.anchor.clone(),
                    catch_up: self.catch_up.clone(),
                    catch_up_limit: self.catch_up_limit,
                    overlap: self.overlap.clone(),
                    attempts: self.attempts,
                    retry_delay: opt_duration("--retry-delay", self.retry_delay.as_deref())?,
                    lease: opt_duration("--lease", self.lease.as_deref())?,
                    expires_at: self.expires_at.clone(),
                    description: self.description.clone(),
                    cwd: self.cwd.clone(),
                    timeout: self
                        .timeout
                        .as_deref()
                        .map(|t| timeout("--timeout", t))
                        .transpose()?,
                    idle_timeout: self
                        .idle_timeout
                        .as_deref()
                        .map(|t| timeout("--idle-timeout", t))
                        .transpose()?,
                    env: pairs("--env", &self.env)?,
                    account: self.account.clone(),
                    account_tool: self.account_tool.clone(),
                    preflight: self.preflight,
                    labels: self.labels.clone(),
                    runs_on: self.on.clone(),
                    jitter: self
                        .jitter
                        .as_deref()
                        .map(|j| duration("--jitter", j))
                        .transpose()?,
                    notify_cmd: self.notify_cmd.clone(),
                    notify_url: self.notify_url.clone(),
                    notify_on: self.notify_on.clone(),
                    retry_backoff: self.retry_backoff.clone(),
                    retry_delay_max: opt_duration(
                        "--retry-delay-max",
                        self.retry_delay_max.as_deref(),
                    )?,
                    max_failures: self.max_failures,
                    until_cmd: self.until_cmd.clone(),
                    until_output: self.until_output.clone(),
                    max_runs: self.max_runs,
                    budget_tokens: self.budget_tokens.clone(),
                    budget_usd: self.budget_usd.clone(),
                })
            }
        }
    };
    ($(#[$meta:meta])* pub struct $name:ident { $($extra:tt)* }) => {
        definition_params! { @declare [$(#[$meta])* pub struct $name { $($extra)* }]
            /// Schedule: one run at an instant — RFC 3339 ("2026-12-01T09:00:00Z"),
            /// local "YYYY-MM-DD HH:MM", or "+DURATION" ("+10m"). Give exactly one of
            /// at, every, cron, dynamic.
            at: Option<String>,
            /// Schedule: run every DURATION ("500ms", "30s", "15m", "1.5h", "2d").
            every: Option<String>,
            /// Schedule: a five-field cron expression ("*/15 * * * *", "0 9 * * MON-FRI").
            cron: Option<String>,
            /// Schedule: first run MIN_INTERVAL after creation, then MIN_INTERVAL after
            /// each run finishes, no backfill ("1m").
            dynamic: Option<String>,
            /// IANA time zone for cron ("Europe/Berlin"; default: this host's zone).
            tz: Option<String>,
            /// Interval anchoring for every: fixed_rate (default) or fixed_delay.
            anchor: Option<String>,
            /// Missed slots after downtime: latest (default), all, none.
            catch_up: Option<String>,
            /// Most missed slots replayed with catchUp all (default 10).
            catch_up_limit: Option<u32>,
            /// While a run is active: skip (default, records a skipped run) or allow.
            overlap: Option<String>,
            /// Attempts per slot, including the first (default 1).
            attempts: Option<u32>,
            /// Delay before retrying a failed slot (default "1m").
            retry_delay: Option<String>,
            /// How retries back off: fixed (default: retryDelay each time) or
            /// exponential (doubling per attempt, full jitter, capped at retryDelayMax);
            /// rate limits and overloads wait 4× longer, auth and context-length
            /// failures are not retried.
            retry_backoff: Option<String>,
            /// Longest delay before a retry (default "6h").
            retry_delay_max: Option<String>,
            /// Park the loop (paused, with the reason, one notification) after this many
            /// consecutive failed slots; resuming it starts a fresh streak.
            max_failures: Option<u32>,
            /// Stop condition: after each successful run, run this command by /bin/sh in
            /// the loop's cwd with its env; exit 0 ends the loop (status done, one
            /// notification). It defines what runs: needs --allow-code.
            until_cmd: Option<String>,
            /// Stop condition: a regex; the loop ends when a successful run's summary
            /// (agents) or stdout (commands, workflows) matches it.
            until_output: Option<String>,
            /// Stop condition: the loop ends once this many of its slots have ended,
            /// whatever their outcome; resuming it starts a fresh count.
            max_runs: Option<u32>,
            /// (agent loops) Budget: tokens (input + output) the loop's runs may use per
            /// UTC day or week ("200000/day"); once spent the loop is held until the
            /// window resets. A limit, not what runs: --allow-mutations is enough.
            budget_tokens: Option<String>,
            /// (agent loops) Budget: US dollars (the reported cost) per UTC day or week
            /// ("5/week").
            budget_usd: Option<String>,
            /// Lease of a running row before it is presumed dead (default "30m").
            lease: Option<String>,
            /// Stop scheduling after this instant (the loop becomes expired).
            expires_at: Option<String>,
            /// Free-text description (at most 4 KiB).
            description: Option<String>,
            /// Working directory of the run (stored absolute; relative to the server's
            /// working directory, a leading ~/ is $HOME).
            cwd: Option<String>,
            /// Kill the run after this duration ("10m"; omit for no limit).
            timeout: Option<String>,
            /// Terminate the run once it printed nothing for this long ("5m"; command and
            /// agent loops); it is recorded timed_out, "no output for 5m".
            idle_timeout: Option<String>,
            /// Extra environment variables of the run (values at most 64 KiB).
            env: std::collections::BTreeMap<String, String>,
            /// OpenAccounts profile to run under.
            account: Option<String>,
            /// Tool whose credentials the account provides (default from the provider).
            account_tool: Option<String>,
            /// Check that the target can start (executable on PATH, accounts) before
            /// saving.
            preflight: bool,
            /// Labels to add: lowercase letters, digits, '.', '_', '-' (at most 64 bytes).
            labels: Vec<String>,
            /// Runner labels to require (added): the loop runs only on a runner
            /// advertising every one of them (`daemon run --runner-label`; stores with
            /// runners, PostgreSQL — a SQLite store refuses them). Same form as labels.
            on: Vec<String>,
            /// Start each slot a stable pseudo-random delay in [0, DURATION) after its
            /// time (shorter than the loop's period).
            jitter: Option<String>,
            /// Run this command (by /bin/sh; needs --allow-code) with the run as JSON
            /// on stdin when a slot ends as notifyOn says (by default: when it failed).
            notify_cmd: Option<String>,
            /// POST the run as JSON, output included, to this http(s) URL when a slot
            /// ends as notifyOn says (needs --allow-secrets).
            notify_url: Option<String>,
            /// When notifications fire: failure (default: a slot failed on its last
            /// attempt), recovery (the first success after one), changes (both) or
            /// always (every finished slot).
            notify_on: Option<String>,
        }
    };
}

/// Declares `loops_create_agent`'s or `loops_edit`'s parameters: `$extra`, the agent's
/// options (the CLI's `AgentOptions` flags, declared once here) and the definition
/// fields ([`definition_params!`]), with [`AgentFields`], the one mapping of the
/// agent's options to the runtime's. On `loops_edit` a field's description is
/// "(agent loops) " and its text, or its `[edit …]` text where editing it differs
/// (what it adds rather than sets).
macro_rules! agent_params {
    // `loops_create_agent`: every field with its text.
    (@create $head:tt [] $(
        $(#[doc = $doc:tt])* $([edit $($edit:tt)*])? $field:ident: $ty:ty,
    )*) => {
        agent_params! { @declare $head [$($(#[doc = $doc])* #[serde(default)] pub $field: $ty,)*] }
    };
    // `loops_edit`, one field at a time: a field with an `[edit …]` text takes it for
    // its own …
    (@edit $head:tt $done:tt
        $(#[doc = $_doc:tt])* [edit $(#[doc = $doc:tt])*] $field:ident: $ty:ty,
        $($rest:tt)*
    ) => {
        agent_params! { @edit $head $done $(#[doc = $doc])* $field: $ty, $($rest)* }
    };
    // … then the next field gets "(agent loops)" before its text (a `///` line's text
    // starts with a space: "(agent loops)" needs none of its own) …
    (@edit $head:tt [$($done:tt)*]
        #[doc = $first:tt] $(#[doc = $doc:tt])* $field:ident: $ty:ty,
        $($rest:tt)*
    ) => {
        agent_params! { @edit $head [$($done)*
            #[doc = concat!("(agent loops)", $first)] $(#[doc = $doc])*
            #[serde(default)] pub $field: $ty,
        ] $($rest)* }
    };
    // … until none is left.
    (@edit $head:tt $done:tt) => {
        agent_params! { @declare $head $done }
    };
    (@declare [$(#[$meta:meta])* pub struct $name:ident { $($extra:tt)* }] [$($fields:tt)*]) => {
        definition_params! {
            $(#[$meta])*
            pub struct $name { $($extra)* $($fields)* }
        }

        impl AgentFields for $name {
            fn agent_options(&self) -> Result<loops_runtime::definition::AgentOptions, String> {
                Ok(loops_runtime::definition::AgentOptions {
                    model: self.model.clone(),
                    agent: self.agent.clone(),
                    auth_profile: self.auth_profile.clone(),
                    config_isolation: self.config_isolation.clone(),
                    config_overrides: crate::flags::pairs(
                        "--config-override",
                        &self.config_overrides,
                    )?,
                    session: self.session.clone(),
                    account_pool: self.account_pool.clone(),
                    permission_mode: self.permission_mode.clone(),
                    sandbox: self.sandbox.clone(),
                    effort: self.effort.clone(),
                    variant: self.variant.clone(),
                    add_dirs: self.add_dirs.clone(),
                    max_turns: self.max_turns,
                    allow_tools: self.allow_tools.clone(),
                    deny_tools: self.deny_tools.clone(),
                })
            }
        }
    };
    // The entry: `create:` or `edit:`, then the struct with its own fields.
    ($mode:ident: $(#[$meta:meta])* pub struct $name:ident { $($extra:tt)* }) => {
        agent_params! { @$mode [$(#[$meta])* pub struct $name { $($extra)* }] []
            /// Model name passed to the provider.
            model: Option<String>,
            /// Provider agent/persona name.
            agent: Option<String>,
            /// codewith auth profile.
            auth_profile: Option<String>,
            /// safe (default: ignore user config) or none.
            [edit
                /// safe or none.
            ]
            config_isolation: Option<String>,
            /// Provider config overrides KEY: VALUE (codex and codewith, passed as
            /// `-c KEY=VALUE`, VALUE parsed as TOML).
            [edit
                /// Provider config overrides to add, KEY: VALUE.
            ]
            config_overrides: std::collections::BTreeMap<String, String>,
            /// fresh (default: each run starts a new conversation) or continue (each run
            /// resumes the previous run's conversation; claude, codex and opencode).
            [edit
                /// fresh or continue (resume the previous run's conversation).
            ]
            session: Option<String>,
            /// Account profiles to run under instead of `account`: each run takes the
            /// least-loaded one no usage limit holds (ties in pool order).
            [edit
                /// Account profiles to run under instead of `account` (each
                /// run takes the least-loaded one no usage limit holds).
            ]
            account_pool: Vec<String>,
            /// claude's permission mode: acceptEdits, auto, bypassPermissions, manual,
            /// dontAsk or plan.
            permission_mode: Option<String>,
            /// codex's sandbox: read-only, workspace-write (the default) or
            /// danger-full-access.
            sandbox: Option<String>,
            /// Reasoning effort: claude low, medium, high, xhigh, max; codex low, medium,
            /// high, xhigh, max, ultra.
            effort: Option<String>,
            /// opencode's model variant (provider-specific reasoning effort, e.g. high).
            variant: Option<String>,
            /// More directories the agent may use (claude, codex; absolute, or relative
            /// to the server's directory).
            [edit
                /// More directories (added) the agent may use (claude, codex; absolute, or relative
                /// to the server's directory).
            ]
            add_dirs: Vec<String>,
            /// claude: stop after this many turns.
            max_turns: Option<u32>,
            /// claude: tool rules the agent may use without asking ("Bash(git:*)").
            allow_tools: Vec<String>,
            /// claude: tool rules the agent is denied ("WebFetch").
            deny_tools: Vec<String>,
        }
    };
}

definition_params! {
    /// `loops_create_command`.
    pub struct CreateCommandParams {
        /// Unique loop name (not shaped like an id: 12 lowercase hex characters).
        pub name: String,
        /// The program (with args or noShell) or the shell command line (alone).
        pub cmd: String,
        /// Execute cmd directly, without a shell (argv), even without args. Given
        /// args, cmd runs directly anyway.
        #[serde(default)]
        pub no_shell: bool,
        /// Arguments: cmd then runs directly (argv), not by the shell.
        #[serde(default)]
        pub args: Vec<String>,
    }
}

agent_params! {
    create:
    /// `loops_create_agent`.
    pub struct CreateAgentParams {
        /// Unique loop name (not shaped like an id: 12 lowercase hex characters).
        pub name: String,
        /// claude, cursor, codewith, aicopilot, opencode or codex.
        pub provider: String,
        /// The prompt, written to the agent's stdin (at most 1 MiB). Give this or
        /// promptFile.
        #[serde(default)]
        pub prompt: Option<String>,
        /// Read the prompt from this file (stored as text with its absolute path).
        #[serde(default)]
        pub prompt_file: Option<String>,
    }
}

definition_params! {
    /// `loops_create_workflow`.
    pub struct CreateWorkflowParams {
        /// Unique loop name (not shaped like an id: 12 lowercase hex characters).
        pub name: String,
        /// Name of the stored workflow to run (an active workflow of that name must
        /// exist; see workflows_list).
        pub workflow: String,
        /// Values for the workflow's params, by name, for every run (checked against
        /// its spec; one that picks a step's program or sets an env value needs
        /// --allow-code).
        #[serde(default)]
        pub params: std::collections::BTreeMap<String, String>,
    }
}

agent_params! {
    edit:
    /// `loops_edit`: only what is given changes.
    pub struct EditParams {
        /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
        #[serde(rename = "loop")]
        pub key: String,
        /// Labels to remove (one the loop does not have is ignored).
        #[serde(default)]
        pub unlabel: Vec<String>,
        /// Environment variables to remove.
        #[serde(default)]
        pub unset_env: Vec<String>,
        /// (workflow loops) Values to set for the workflow's params, by name (one that
        /// picks a step's program or sets an env value needs --allow-code).
        #[serde(default)]
        pub params: std::collections::BTreeMap<String, String>,
        /// (workflow loops) Params whose value is removed (the spec's default applies).
        #[serde(default)]
        pub unset_params: Vec<String>,
        /// Settings to clear: description, cwd, timeout, env, account, args, model,
        /// agent, auth-profile, config-overrides, expires-at, jitter, labels, on (the
        /// runner labels), notify, notify-cmd, notify-url, max-failures, idle-timeout,
        /// until-cmd, until-output, max-runs, session (back to fresh), budget-tokens,
        /// budget-usd, account-pool, permission-mode, sandbox, effort, variant, add-dirs,
        /// max-turns, allow-tools, deny-tools.
        #[serde(default)]
        pub clear: Vec<String>,
        /// (command loops) The command line or program.
        #[serde(default)]
        pub cmd: Option<String>,
        /// (command loops) Execute the command directly, without a shell.
        #[serde(default)]
        pub no_shell: bool,
        /// (command loops) Run the command by /bin/sh again.
        #[serde(default)]
        pub shell: bool,
        /// (command loops) Arguments of a noShell command, replacing the stored ones.
        #[serde(default)]
        pub args: Vec<String>,
        /// (agent loops) claude, cursor, codewith, aicopilot, opencode or codex.
        #[serde(default)]
        pub provider: Option<String>,
        /// (agent loops) The prompt.
        #[serde(default)]
        pub prompt: Option<String>,
        /// (agent loops) Read the prompt from this file.
        #[serde(default)]
        pub prompt_file: Option<String>,
        /// (workflow loops) Name of the stored workflow to run.
        #[serde(default)]
        pub workflow: Option<String>,
    }
}

/// The agent's options of a parameter struct as the runtime's.
pub trait AgentFields {
    /// [`loops_runtime::definition::AgentOptions`] from the fields, `configOverrides`
    /// checked as the CLI's `--config-override`.
    fn agent_options(&self) -> Result<loops_runtime::definition::AgentOptions, String>;
}

/// The shared definition fields of a parameter struct as the runtime's flags.
pub trait DefinitionFields {
    /// [`loops_runtime::definition::DefinitionFlags`] from the fields, durations
    /// parsed with the CLI's messages.
    fn flags(&self) -> Result<loops_runtime::definition::DefinitionFlags, String>;
}

/// `loops_health`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthParams {
    /// Only loops carrying every one of these labels.
    #[serde(default)]
    pub labels: Vec<String>,
}

/// `loops_usage`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageParams {
    /// Runs that finished in the last DURATION ("7d" by default, "24h", "30d").
    #[serde(default)]
    pub since: Option<String>,
    /// Group by loop (default), provider or day (UTC).
    #[serde(default)]
    pub by: Option<String>,
}
