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
    /// Only loops with this status: active, paused, stopped or expired.
    #[serde(default)]
    pub status: Option<String>,
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
