//! The `loops` binary: parses the command line, dispatches to one module per verb, and
//! maps every error to one line on stderr and an [`Exit`] code (`exit.rs` gives each
//! error kind its code, in one place; the codes are the README's "Exit codes").

mod cli;
mod commands;
mod exit;
mod output;

use loops::timeparse;

use clap::Parser as _;
use exit::Exit;
use std::io::Write as _;
use std::process::ExitCode;

/// Why a command did not succeed, already classified for the exit code.
#[derive(Debug)]
pub enum Failure {
    /// One line for stderr (without the `error: ` prefix) and the exit code.
    Error { code: Exit, message: String },
    /// The reader of stdout went away (`loops list | head -1`): not an error worth
    /// reporting; stop writing and exit 0 silently.
    BrokenPipe,
}

impl Failure {
    fn with(code: Exit, message: impl Into<String>) -> Self {
        Self::Error {
            code,
            message: message.into(),
        }
    }
    /// Invalid input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::with(Exit::Usage, message)
    }
    /// An operation that did not succeed (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::with(Exit::Failed, message)
    }
    /// The store cannot be used (exit 3): corrupt, read-only, not ours, unreachable.
    pub fn store(message: impl Into<String>) -> Self {
        Self::with(Exit::Store, message)
    }
    /// A failed write to stdout: a closed pipe is [`Failure::BrokenPipe`].
    pub fn stdout(err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            Self::BrokenPipe
        } else {
            Self::failed(format!("cannot write to stdout: {err}"))
        }
    }
    /// The exit code this failure ends the process with.
    pub fn code(&self) -> Exit {
        match self {
            Self::Error { code, .. } => *code,
            Self::BrokenPipe => Exit::Success,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Error { message, .. } => f.write_str(message),
            Self::BrokenPipe => f.write_str("stdout closed"),
        }
    }
}

impl std::error::Error for Failure {}

impl From<loops_store::StoreError> for Failure {
    fn from(err: loops_store::StoreError) -> Self {
        Self::with(Exit::of_store(&err), err.to_string())
    }
}

impl From<loops_runtime::client::ClientError> for Failure {
    fn from(err: loops_runtime::client::ClientError) -> Self {
        Self::with(Exit::of_client(&err), err.to_string())
    }
}

impl From<loops_runtime::engine::EngineError> for Failure {
    fn from(err: loops_runtime::engine::EngineError) -> Self {
        Self::with(Exit::of_engine(&err), err.to_string())
    }
}

impl From<loops_runtime::daemon::DaemonError> for Failure {
    fn from(err: loops_runtime::daemon::DaemonError) -> Self {
        Self::with(Exit::of_daemon(&err), err.to_string())
    }
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        let err = match err.downcast::<Failure>() {
            Ok(failure) => return failure,
            Err(err) => err,
        };
        let broken_pipe = err.chain().any(|cause| {
            cause
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind)
                .or_else(|| {
                    cause
                        .downcast_ref::<serde_json::Error>()
                        .and_then(serde_json::Error::io_error_kind)
                })
                == Some(std::io::ErrorKind::BrokenPipe)
        });
        if broken_pipe {
            return Self::BrokenPipe;
        }
        Self::failed(format!("{err:#}"))
    }
}

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => match cli::value_error(&err) {
            // One line, like every other error of ours; nothing has run yet.
            Some(message) => {
                let _ = writeln!(std::io::stderr(), "error: {}", output::human(&message));
                return Exit::Usage.into();
            }
            None => err.exit(),
        },
    };
    // Read by clap (above); from here on no process this one starts — a run, a hook,
    // a helper, the daemon `daemon start` spawns (it gets the URL on stdin) — may
    // inherit it: the store URL can hold a password. Sound: still one thread here.
    std::env::remove_var(loops_runtime::client::STORE_ENV);
    // This binary runs the supervisors of this process's runs (`loops supervise`).
    if let Some(me) = loops_runtime::supervisor::this_executable() {
        loops_runtime::supervisor::set_program(me);
    }
    match commands::run(cli) {
        Ok(exit) => exit.into(),
        Err(Failure::BrokenPipe) => Exit::Success.into(),
        Err(Failure::Error { code, message }) => {
            // Not eprintln!: it panics when stderr is closed too. A message may quote
            // what the user gave or a run printed: its control characters escaped.
            let _ = writeln!(std::io::stderr(), "error: {}", output::human(&message));
            code.into()
        }
    }
}
