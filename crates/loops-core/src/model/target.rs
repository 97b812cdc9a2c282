//! What a loop runs and when: its schedule and its target (a command, an agent, a
//! workflow), with the account a target runs under.

use super::*;

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
