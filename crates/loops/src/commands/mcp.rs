//! `mcp`: the MCP server on stdio (`loops_mcp`), until the client goes away. Stdout
//! carries the protocol; logs go to stderr (`LOOPS_LOG`, default `warn`).

use super::Context;
use crate::exit::Exit;
use crate::Failure;
use clap::Args;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Allow the tools that run, pause, resume, stop, remove or reschedule what is
    /// defined, and run or cancel workflows (without it they are listed but refuse).
    #[arg(long, env = "LOOPS_MCP_ALLOW_MUTATIONS", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_mutations: bool,
    /// Also allow defining or changing what runs: commands (argv or shell), agents,
    /// a target's env, cwd or account, notification commands. This is code execution
    /// as you. Includes --allow-mutations.
    #[arg(long, env = "LOOPS_MCP_ALLOW_CODE", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_code: bool,
    /// Removed: refused with what to use instead (--allow-code).
    #[arg(long, env = "LOOPS_MCP_ALLOW_SHELL", value_parser = clap::builder::FalseyValueParser::new(), hide = true)]
    pub allow_shell: bool,
    /// Allow showOutput to reveal prompts, env values and run output, and notifyUrl
    /// to send runs to a webhook (without it they stay redacted, as in the CLI
    /// without --show-output).
    #[arg(long, env = "LOOPS_MCP_ALLOW_SECRETS", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_secrets: bool,
}

pub fn run(ctx: &Context, args: McpArgs) -> Result<Exit, Failure> {
    if args.allow_shell {
        // Its meaning ("no shell, so argv targets are safe") was the hole: an argv
        // program can be a shell, and env, agents and notifications run code too.
        return Err(Failure::usage(
            "--allow-shell (LOOPS_MCP_ALLOW_SHELL) is gone: argv commands, agents, env and notification commands run code as surely as a shell; use --allow-code to allow defining what runs (code execution as you), or --allow-mutations alone to only run, pause and reschedule what is defined",
        ));
    }
    super::log_to_stderr("warn");
    let options = loops_mcp::Options {
        data_dir: ctx.data_dir()?,
        store: ctx.store_url().map(str::to_owned),
        allow_mutations: args.allow_mutations,
        allow_code: args.allow_code,
        allow_secrets: args.allow_secrets,
        base_dir: std::env::current_dir()
            .map_err(|e| Failure::failed(format!("cannot read the current directory: {e}")))?,
    };
    let rt = crate::commands::server_runtime()?;
    let served = rt.block_on(loops_mcp::serve_stdio(options));
    // Stdin is read by a blocking thread that cannot be cancelled: do not wait for it.
    rt.shutdown_background();
    served.map_err(Failure::failed)?;
    Ok(Exit::Success)
}
