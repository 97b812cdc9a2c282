//! `loops completions bash|zsh|fish`.

use crate::cli::Cli;
use crate::exit::Exit;
use crate::Failure;
use clap::Args;
use clap::CommandFactory;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh or fish.
    pub shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> Result<Exit, Failure> {
    let mut cmd = Cli::command();
    // clap_complete panics when its writer fails (a closed pipe): render into memory,
    // then write through the one stdout path that maps a closed pipe.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "loops", &mut script);
    crate::output::write_stdout_bytes(&script)?;
    Ok(Exit::Success)
}
