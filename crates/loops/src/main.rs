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
use std::process::ExitCode;

/// An error already classified for the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<loops_runtime::client::ClientError> for Failure {
    fn from(err: loops_runtime::client::ClientError) -> Self {
        use loops_runtime::client::ClientError;
        let code = match &err {
            ClientError::Store(_) if !err.is_user_error() => 3,
            _ if err.is_user_error() => 2,
            _ => 1,
        };
        Self {
            code,
            message: err.to_string(),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Self {
            code: 1,
            message: format!("{err:#}"),
        }
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(failure) => {
            // A closed pipe (e.g. `loops list | head`) is not an error worth reporting.
            if failure.message.contains("Broken pipe") {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
