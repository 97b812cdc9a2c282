//! `logs RUN [--follow] [--stderr]`: a running run's output from its spool files as it
//! is written, a finished run's as stored (README, "Watching runs"): to a terminal with
//! only its colours unless `--raw`, to a pipe byte for byte ([`RunOutput`]).

use super::Context;
use crate::exit::Exit;
use crate::output::{print_json, write_stdout_bytes, RunOutput};
use crate::Failure;
use clap::Args;
use loops_runtime::live::{OutputPiece, Stream, OUTPUT_POLL};

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Keep printing output as it is written until the run ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Print stderr instead of stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Every byte as captured: to a terminal, the output otherwise passes only its
    /// colours (other control characters shown escaped); to a pipe it is exact anyway.
    #[arg(long)]
    pub raw: bool,
}

pub fn run(ctx: &Context, args: LogsArgs) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let run = client.get_run(&args.run)?;
    let stream = if args.stderr {
        Stream::Stderr
    } else {
        Stream::Stdout
    };
    let mut follow = client.follow_output(&run, stream);
    if !args.follow {
        let step = follow.poll()?;
        let bytes = pieces_bytes(&step.pieces);
        if ctx.json {
            let text = String::from_utf8_lossy(&bytes);
            let status = step.ended.as_ref().map_or(run.status, |r| r.status);
            print_json(&serde_json::json!({
                "runId": run.id,
                "loopName": run.loop_name,
                "status": status,
                "running": step.ended.is_none(),
                "stream": stream,
                "text": text,
            }))?;
        } else {
            RunOutput::stdout(args.raw).write_all(&bytes)?;
        }
        return Ok(Exit::Success);
    }
    let mut shown = RunOutput::stdout(args.raw);
    loop {
        let step = follow.poll()?;
        if !step.pieces.is_empty() {
            let bytes = pieces_bytes(&step.pieces);
            if ctx.json {
                let text = String::from_utf8_lossy(&bytes);
                let line = serde_json::json!({ "runId": run.id, "stream": stream, "text": text });
                write_stdout_bytes(format!("{line}\n").as_bytes())?;
            } else {
                shown.write(&bytes)?;
            }
        }
        if let Some(ended) = step.ended {
            shown.finish()?;
            if ctx.json {
                let line = serde_json::json!({
                    "runId": ended.id,
                    "status": ended.status,
                    "exitCode": ended.exit_code,
                    "error": ended.error,
                    "ended": true,
                });
                write_stdout_bytes(format!("{line}\n").as_bytes())?;
            }
            return Ok(Exit::Success);
        }
        std::thread::sleep(OUTPUT_POLL);
    }
}

/// The pieces as written, a gap as the capture's own marker.
fn pieces_bytes(pieces: &[OutputPiece]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            OutputPiece::Gap(n) => out.extend(format!("[truncated {n} bytes]\n").into_bytes()),
            OutputPiece::Bytes(b) => out.extend_from_slice(b),
        }
    }
    out
}
