//! `loops completions bash|zsh|fish`.

use crate::cli::{Cli, CompletionsArgs};
use crate::Failure;
use clap::CommandFactory;
use std::process::ExitCode;

pub fn run(args: CompletionsArgs) -> Result<ExitCode, Failure> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "loops", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
