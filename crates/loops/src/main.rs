//! The `loops` binary: parses the command line, dispatches to one module per verb, and
//! maps every error to one line on stderr and an exit code.
//!
//! Exit codes: 0 success; 1 a run failed or an operation did not succeed; 2 invalid
//! input (usage, validation, unknown or ambiguous loop, duplicate name); 3 the store
//! could not be used (corrupt database, read-only data dir).

mod cli;
mod commands;
mod output;

use loops::timeparse;

use clap::Parser;
use std::io::Write as _;
use std::process::ExitCode;

/// Why a command did not succeed, already classified for the exit code.
#[derive(Debug)]
pub enum Failure {
    /// One line for stderr (without the `error: ` prefix) and the exit code.
    Error { code: u8, message: String },
    /// The reader of stdout went away (`loops list | head -1`): not an error worth
    /// reporting; stop writing and exit 0 silently.
    BrokenPipe,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self::Error {
            code: 2,
            message: message.into(),
        }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Error {
            code: 1,
            message: message.into(),
        }
    }
    /// The store cannot be used (exit 3): corrupt, read-only, not ours, unreachable.
    pub fn store(message: impl Into<String>) -> Self {
        Self::Error {
            code: 3,
            message: message.into(),
        }
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
    pub fn code(&self) -> u8 {
        match self {
            Self::Error { code, .. } => *code,
            Self::BrokenPipe => 0,
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

/// The exit code of a store error: the caller's mistake (2), a state that did not
/// allow the operation (1), or a store that cannot be used at all (3).
pub fn store_error_code(err: &loops_store::StoreError) -> u8 {
    use loops_store::StoreError as E;
    match err {
        E::DuplicateName(_)
        | E::DuplicateWorkflow(_)
        | E::LoopNotFound(_)
        | E::WorkflowNotFound(_)
        | E::RunNotFound(_)
        | E::WorkflowRunNotFound(_)
        | E::InvalidArgument(_) => 2,
        E::NotRunning(_) | E::LeaseLost => 1,
        _ => 3,
    }
}

impl From<loops_store::StoreError> for Failure {
    fn from(err: loops_store::StoreError) -> Self {
        Self::Error {
            code: store_error_code(&err),
            message: err.to_string(),
        }
    }
}

impl From<loops_runtime::client::ClientError> for Failure {
    fn from(err: loops_runtime::client::ClientError) -> Self {
        use loops_runtime::client::ClientError;
        let code = match &err {
            ClientError::Store(e) => store_error_code(e),
            ClientError::Recover(loops_runtime::workflow::RecoverError::Store(e)) => {
                store_error_code(e)
            }
            _ if err.is_user_error() => 2,
            _ => 1,
        };
        Self::Error {
            code,
            message: err.to_string(),
        }
    }
}

impl From<loops_runtime::engine::EngineError> for Failure {
    fn from(err: loops_runtime::engine::EngineError) -> Self {
        match err {
            loops_runtime::engine::EngineError::Store(e) => e.into(),
            other => Self::failed(other.to_string()),
        }
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
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::Error { code, message }) => {
            // Not eprintln!: it panics when stderr is closed too.
            let _ = writeln!(std::io::stderr(), "error: {message}");
            ExitCode::from(code)
        }
    }
}
