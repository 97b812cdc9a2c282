//! The MCP server of `loops` (`loops mcp`): the library [`Client`]'s operations as
//! tools for agents, over stdio, on the official Rust SDK (`rmcp`).
//!
//! A thin layer, like the CLI: each tool is one CLI verb — its flags as the tool's
//! input (with a JSON Schema), one client call, the JSON document `loops --json`
//! prints as the tool's output, and the CLI's one-line message as a tool error
//! (`isError`) when the call does not succeed. Protocol errors are only for calls
//! that are malformed (an unknown tool, parameters that do not fit the schema).
//!
//! Safety (see [`Options`] and [`gate`]): read-only unless the server was started with
//! `--allow-mutations` (run, pause, resume, stop, remove and reschedule what is
//! defined); defining or changing what runs — commands of any kind, agents, a
//! target's env, cwd or account, notification commands — only with `--allow-code`,
//! because it is code execution; secrets (prompts, env values, run output) redacted as
//! in the CLI, revealed (`showOutput`) or sent to a webhook (`notifyUrl`) only with
//! `--allow-secrets`; `loops_remove` needs `confirm: true`. Logs go to stderr, never
//! to stdout, which carries the protocol.
//!
//! ```no_run
//! # async fn serve() -> Result<(), String> {
//! let options = loops_mcp::Options {
//!     data_dir: "/tmp/loops-data".into(),
//!     store: None,
//!     allow_mutations: false,
//!     allow_code: false,
//!     allow_secrets: false,
//!     base_dir: std::env::current_dir().map_err(|e| e.to_string())?,
//! };
//! loops_mcp::serve_stdio(options).await
//! # }
//! ```
//!
//! [`Client`]: loops_runtime::Client

mod define_tools;
mod flags;
pub mod gate;
mod loop_tools;
mod params;
mod server;
mod started;
mod status_tools;
mod tools;
mod workflow_tools;

pub use server::{LoopsMcp, Options};
pub use started::StartedRuns;

use rmcp::ServiceExt as _;

/// The tool list as the golden file of the tests holds it: every tool (name,
/// description, input schema, annotations) in name order, as pretty JSON with a final
/// newline.
pub fn tools_document(tools: &[rmcp::model::Tool]) -> String {
    let mut tools = tools.to_vec();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut text = serde_json::to_string_pretty(&tools).unwrap_or_default();
    text.push('\n');
    text
}

/// Serves MCP on stdin/stdout until the client closes the connection (stdin ends) or
/// the process is told to stop (SIGTERM, SIGINT).
///
/// Runs that the tools started and that are still going on are then seen through:
/// after the client went away the server waits for them to finish (a SIGTERM or
/// SIGINT meanwhile interrupts them); told to stop, it interrupts them at once
/// (their process groups terminated, recorded as interrupted) and waits until they
/// are recorded.
pub async fn serve_stdio(options: Options) -> Result<(), String> {
    let server = LoopsMcp::new(options);
    let started = std::sync::Arc::clone(&server.shared.started);
    let service = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("MCP initialization failed: {e}"))?;
    let cancel = service.cancellation_token();
    let mut stop = Box::pin(stop_signal());
    let stopped = tokio::select! {
        quit = service.waiting() => {
            if let Err(e) = quit {
                tracing::warn!(error = %e, "the MCP session ended abnormally");
            }
            false
        }
        () = &mut stop => {
            cancel.cancel();
            true
        }
    };
    const REASON: &str = "the MCP server was stopped";
    if stopped {
        started.interrupt_all(REASON);
    } else if started.in_flight() > 0 {
        tracing::info!(
            runs = started.in_flight(),
            "the MCP client went away; waiting for the runs it started to finish (SIGTERM interrupts them)"
        );
        tokio::select! {
            () = started.finish_all() => return Ok(()),
            () = &mut stop => started.interrupt_all(REASON),
        }
    }
    started.finish_all().await;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (never, if neither can be watched).
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
