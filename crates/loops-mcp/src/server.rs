//! The server: its options (what it allows), the store it opens, the gates every tool
//! passes (mutations, code, secrets; [`crate::gate`] says which an input needs), and how a tool's outcome becomes an MCP
//! result — a JSON document as text, or a tool error (`isError`) carrying the one-line
//! message the CLI prints.

use crate::started::StartedRuns;
use loops_runtime::Client;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool_handler, ServerHandler};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What a server allows, and where its store is.
#[derive(Clone)]
pub struct Options {
    /// The data dir holding `loops.db` (`--data-dir` / `$LOOPS_DATA_DIR`).
    pub data_dir: PathBuf,
    /// The store when it is not that file: `--store` / `$LOOPS_STORE`, a
    /// `postgres://` URL (which may hold a password: `Debug` redacts it).
    pub store: Option<String>,
    /// Tools that change loops, workflow runs or start processes run only with this
    /// (`--allow-mutations`, `LOOPS_MCP_ALLOW_MUTATIONS=1`); without it they are
    /// listed but refuse.
    pub allow_mutations: bool,
    /// Defining or changing *what runs* — a command (argv or shell, any program), an
    /// agent (its prompt is what it acts on), a target's env, cwd or account, a
    /// notification command — only with this (`--allow-code`,
    /// `LOOPS_MCP_ALLOW_CODE=1`): it is code execution as the server's user. It
    /// includes `allow_mutations`.
    pub allow_code: bool,
    /// `showOutput: true` reveals prompts, env values and run output only with this
    /// (`--allow-secrets`); without it such a call is refused.
    pub allow_secrets: bool,
    /// Relative paths in tool inputs (`cwd`, spec files) are relative to this.
    pub base_dir: PathBuf,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("data_dir", &self.data_dir)
            .field(
                "store",
                &self
                    .store
                    .as_deref()
                    .map(loops_runtime::client::redact_store),
            )
            .field("allow_mutations", &self.allow_mutations)
            .field("allow_code", &self.allow_code)
            .field("allow_secrets", &self.allow_secrets)
            .field("base_dir", &self.base_dir)
            .finish()
    }
}

/// The MCP server of one store.
#[derive(Clone)]
pub struct LoopsMcp {
    pub(crate) shared: Arc<Shared>,
    tool_router: ToolRouter<Self>,
}

pub(crate) struct Shared {
    pub(crate) options: Options,
    reader: Mutex<Option<Client>>,
    writer: Mutex<Option<Client>>,
    pub(crate) started: Arc<StartedRuns>,
}

/// A tool's outcome before it becomes an MCP result: a JSON document (as compact
/// text), or the one-line message of a tool error.
pub(crate) type Outcome = Result<String, String>;

impl LoopsMcp {
    /// A server over the store in `options.data_dir` (opened at the first call).
    /// `allow_code` includes `allow_mutations`.
    pub fn new(mut options: Options) -> Self {
        options.allow_mutations |= options.allow_code;
        Self {
            shared: Arc::new(Shared {
                options,
                reader: Mutex::new(None),
                writer: Mutex::new(None),
                started: Arc::default(),
            }),
            tool_router: Self::tool_router(),
        }
    }

    /// Every tool this server lists, in name order: names, descriptions, input
    /// schemas and annotations (the golden file of the tests is this list).
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        let mut tools = self.tool_router.list_all();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The runs this server started (`loops_run_now`, `workflow_run`) that are still
    /// going on in this process.
    pub fn started_runs(&self) -> &StartedRuns {
        &self.shared.started
    }

    pub(crate) fn options(&self) -> &Options {
        &self.shared.options
    }

    /// The client for reading: the store opened read-only when it exists and is
    /// current (as the CLI's read commands open it), kept for the next call.
    pub(crate) fn reader(&self) -> Result<Client, String> {
        cached(&self.shared.reader, || {
            Client::open_for_reading(
                &self.shared.options.data_dir,
                self.shared.options.store.as_deref(),
            )
        })
    }

    /// What a read-only tool answers: `call` on the reading client, on a blocking
    /// thread, its value as JSON (a client error as its message). Every reading tool
    /// goes this way.
    pub(crate) async fn read<T: Serialize>(
        &self,
        call: impl FnOnce(&Client) -> loops_runtime::client::Result<T> + Send + 'static,
    ) -> Outcome {
        answer(self.reader()?, call).await
    }

    /// What a tool that changes something answers once its own checks passed
    /// ([`LoopsMcp::mutation`] first): `call` on the writing client, as [`LoopsMcp::read`].
    pub(crate) async fn write<T: Serialize>(
        &self,
        call: impl FnOnce(&Client) -> loops_runtime::client::Result<T> + Send + 'static,
    ) -> Outcome {
        answer(self.writer()?, call).await
    }

    /// The client for writing (creating the store on first use), kept for the next
    /// call.
    pub(crate) fn writer(&self) -> Result<Client, String> {
        cached(&self.shared.writer, || {
            Client::open_store(
                &self.shared.options.data_dir,
                self.shared.options.store.as_deref(),
            )
        })
    }

    /// Refuses a tool that changes something unless the server allows mutations.
    pub(crate) fn mutation(&self, tool: &str) -> Result<(), String> {
        if self.options().allow_mutations {
            return Ok(());
        }
        Err(format!(
            "{tool} changes loops or runs, and this MCP server is read-only; restart it with `loops mcp --allow-mutations` (or LOOPS_MCP_ALLOW_MUTATIONS=1) to allow it"
        ))
    }

    /// Refuses values for params of the active workflow `workflow` that define what
    /// runs (`loops_core::workflow_params::defining_code`: a step's program, an env
    /// value) unless the server allows code; other params are data.
    pub(crate) async fn params_gate<'a>(
        &self,
        workflow: &str,
        names: impl Iterator<Item = &'a String>,
    ) -> Result<(), String> {
        let names: Vec<String> = names.cloned().collect();
        if self.options().allow_code || names.is_empty() {
            return Ok(());
        }
        let client = self.reader().map_err(|e| e.to_string())?;
        let key = workflow.to_owned();
        let spec = blocking(move || Ok(client.runnable_workflow(&key).ok()))
            .await?
            .map(|w| w.spec);
        let Some(spec) = spec else {
            // No such workflow: the tool refuses it by name.
            return Ok(());
        };
        let code = loops_core::workflow_params::defining_code(&spec);
        match names.iter().find(|n| code.contains(n)) {
            Some(name) => self.code(&format!(
                "params.{name} (it sets a step's program or an env value)"
            )),
            None => Ok(()),
        }
    }

    /// Refuses what defines or changes what runs (`what`: the tool or the input that
    /// would) unless the server allows code.
    pub(crate) fn code(&self, what: &str) -> Result<(), String> {
        if self.options().allow_code {
            return Ok(());
        }
        Err(format!(
            "{what} defines what runs, which is code execution as you, and this MCP server may only run, pause, resume, stop, remove and reschedule what is already defined; restart it with `loops mcp --allow-code` (or LOOPS_MCP_ALLOW_CODE=1) to allow it"
        ))
    }

    /// Refuses a notification URL (`what`: the input that sets one) unless the server
    /// allows secrets: a webhook gets each notified run, its output included.
    pub(crate) fn webhook(&self, what: &str) -> Result<(), String> {
        if self.options().allow_secrets {
            return Ok(());
        }
        Err(format!(
            "{what} sends each notified run, its output included, to that URL, and this MCP server keeps output redacted; restart it with `loops mcp --allow-secrets` to allow it"
        ))
    }

    /// Whether to reveal secrets: `asked` (`showOutput`), refused unless the server
    /// allows secrets.
    pub(crate) fn reveal(&self, asked: bool) -> Result<bool, String> {
        if asked && !self.options().allow_secrets {
            return Err(
                "showOutput reveals prompts, env values and run output, and this MCP server keeps them redacted; restart it with `loops mcp --allow-secrets` to allow it, or call without showOutput".to_owned(),
            );
        }
        Ok(asked)
    }
}

fn cached(
    slot: &Mutex<Option<Client>>,
    open: impl FnOnce() -> loops_runtime::client::Result<Client>,
) -> Result<Client, String> {
    let mut slot = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(client) = slot.as_ref() {
        return Ok(client.clone());
    }
    let client = open().map_err(|e| e.to_string())?;
    *slot = Some(client.clone());
    Ok(client)
}

/// Runs a blocking store call (SQLite, or `remove --force` waiting for processes to
/// end) off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("the tool's task ended abnormally: {e}")))
}

/// `call` on `client`, on a blocking thread, its value as JSON (a client error as its
/// message): [`LoopsMcp::read`] and [`LoopsMcp::write`].
async fn answer<T: Serialize>(
    client: Client,
    call: impl FnOnce(&Client) -> loops_runtime::client::Result<T> + Send + 'static,
) -> Outcome {
    blocking(move || json(&call(&client).map_err(|e| e.to_string())?)).await
}

/// `value` as JSON, for an [`Outcome`] (encoded straight from the typed value: a
/// listing of 1,000 loops is ≈ 600 kB).
pub(crate) fn json<T: Serialize>(value: &T) -> Outcome {
    serde_json::to_string(value).map_err(|e| format!("cannot encode JSON: {e}"))
}

/// The MCP result of an outcome: the JSON document as compact text, or a tool error.
pub(crate) fn result(outcome: Outcome) -> CallToolResult {
    match outcome {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
    }
}

/// What the server tells the model when it connects.
pub(crate) const INSTRUCTIONS: &str = "loops is a durable local scheduler: a loop is a named schedule (once, every N, cron, dynamic) plus a target (a command, a headless coding agent with a prompt, or a stored workflow); each attempt at a slot is a run. Use loops_list and loops_show to see loops, loops_runs for their history, loops_daemon_status to check that the daemon that runs them is up, workflows_list / workflow_show for workflows. Tools that change, run or remove things refuse unless the server was started with --allow-mutations; defining what runs (a command or agent loop, an edit of a target, its env, cwd or account, a notifyCmd) needs --allow-code, since it is code execution; showOutput and notifyUrl need --allow-secrets. Outputs are the JSON documents `loops --json` prints.";

#[tool_handler(router = self.tool_router)]
impl ServerHandler for LoopsMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("loops", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_owned())
    }
}
