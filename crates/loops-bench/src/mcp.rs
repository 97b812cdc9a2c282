//! The MCP server: `tools/call loops_list` round trips over one `loops mcp` session.

use crate::harness::{flush, ms, populate_every, Bencher, Exec, Stats};
use anyhow::{ensure, Context as _, Result};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant as Mono;

impl Bencher {
    /// MCP `tools/call loops_list` round trips against a `loops mcp` child, per store
    /// size: the session is initialized once; each call is the time from writing the
    /// request line to reading its response line (the server's parse, the store read,
    /// the JSON encoding and both pipes).
    pub(super) fn mcp_list(&self, sizes: &[usize], calls: usize) -> Result<()> {
        use std::io::{BufRead, BufReader};
        println!(
            "| loops stored | calls | median ms | p90 ms | p99 ms | max ms | response bytes |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for &n in sizes {
            let dir = self.fresh_dir()?;
            let data = dir.data();
            populate_every(&data, n, "mcp", Exec::True, 3_600_000)?;
            let mut child = Command::new(&self.bin)
                .arg("mcp")
                .env("LOOPS_DATA_DIR", &data)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("cannot run {} mcp", self.bin.display()))?;
            let mut stdin = child.stdin.take().context("no stdin")?;
            let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
            let mut line = String::new();
            let mut exchange =
                |request: &serde_json::Value, line: &mut String, answered: bool| -> Result<()> {
                    writeln!(stdin, "{request}")?;
                    stdin.flush()?;
                    if answered {
                        line.clear();
                        ensure!(stdout.read_line(line)? > 0, "loops mcp closed its stdout");
                    }
                    Ok(())
                };
            exchange(
                &serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "loops-bench", "version": "1"}}}),
                &mut line,
                true,
            )?;
            exchange(
                &serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                &mut line,
                false,
            )?;
            let mut samples = Vec::with_capacity(calls);
            let mut bytes = 0;
            for id in 1..=calls {
                let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "loops_list", "arguments": {}}});
                let start = Mono::now();
                exchange(&request, &mut line, true)?;
                samples.push(ms(start.elapsed()));
                let response: serde_json::Value = serde_json::from_str(&line)?;
                ensure!(
                    response["id"] == id && response["result"]["isError"] == false,
                    "unexpected response: {}",
                    line.chars().take(300).collect::<String>()
                );
                bytes = line.len();
            }
            drop(stdin);
            let status = child.wait()?;
            ensure!(status.success(), "loops mcp exited with {status}");
            let st = Stats::of(samples);
            println!(
                "| {n} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {bytes} |",
                st.n, st.p50, st.p90, st.p99, st.max
            );
            flush();
        }
        Ok(())
    }
}
