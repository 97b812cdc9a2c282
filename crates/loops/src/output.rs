//! Human and JSON rendering: aligned tables, local + relative times, colour only on a
//! TTY without `NO_COLOR`, and redaction of prompts, env values and run output.
//!
//! Every write to stdout goes through this module (`outln!`, `print_json`,
//! `Table::print`, `write_stdout`): `println!` panics when stdout
//! is a closed pipe (`loops list | head -1`), while these return
//! `Failure::BrokenPipe`, which `main` turns into a silent exit 0.

use crate::Failure;
use chrono::{Local, Utc};
use loops_core::{format_instant, Instant, Run, RunStatus, Schedule, Target};
use serde::Serialize;
use std::io::{IsTerminal, Write};

/// Whether stdout gets ANSI colour.
pub fn colour_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// `println!` that returns a [`Failure`] instead of panicking on a closed stdout.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// Writes formatted text to stdout; a closed pipe is [`Failure::BrokenPipe`].
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(Failure::stdout)
}

/// Writes raw bytes to stdout and flushes; a closed pipe is [`Failure::BrokenPipe`].
pub fn write_stdout_bytes(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(Failure::stdout)
}

/// Prints `value` as pretty JSON followed by a newline.
pub fn print_json<T: Serialize>(value: &T) -> Result<(), Failure> {
    // Stdout is line-buffered: without this buffer every line of the pretty JSON would
    // be its own write(2) (26,000 of them for 1,000 loops).
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| match e.io_error_kind() {
        Some(kind) => Failure::stdout(kind.into()),
        None => Failure::failed(format!("cannot encode JSON: {e}")),
    })?;
    writeln!(out)
        .and_then(|()| out.flush())
        .map_err(Failure::stdout)
}

/// A table with a header row; columns padded to their widest cell.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

/// A cell's text and optional colour (ANSI code).
pub struct Cell {
    text: String,
    colour: Option<&'static str>,
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell { text, colour: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell {
            text: text.to_owned(),
            colour: None,
        }
    }
}

impl Cell {
    /// The same colour with other text.
    pub fn with_text(self, text: &str) -> Self {
        Cell {
            text: text.to_owned(),
            ..self
        }
    }
}

impl Table {
    pub fn new(header: Vec<&'static str>) -> Self {
        Self {
            header,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    pub fn print(&self) -> Result<(), Failure> {
        self.write().map_err(Failure::stdout)
    }

    fn write(&self) -> std::io::Result<()> {
        let colour = colour_enabled();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.text.chars().count());
            }
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let last = widths.len().saturating_sub(1);
        let mut line = String::new();
        for (i, h) in self.header.iter().enumerate() {
            pad(&mut line, h, widths[i], i == last);
        }
        if colour {
            writeln!(out, "\x1b[1m{}\x1b[0m", line.trim_end())?;
        } else {
            writeln!(out, "{}", line.trim_end())?;
        }
        for row in &self.rows {
            line.clear();
            for (i, cell) in row.iter().enumerate() {
                let start = line.len();
                pad(&mut line, &cell.text, widths[i], i == last);
                if let (true, Some(code)) = (colour, cell.colour) {
                    let end = start + cell.text.len();
                    line.insert_str(end, "\x1b[0m");
                    line.insert_str(start, &format!("\x1b[{code}m"));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        out.flush()?;
        Ok(())
    }
}

fn pad(line: &mut String, text: &str, width: usize, last: bool) {
    line.push_str(text);
    if !last {
        let fill = width - text.chars().count() + 2;
        line.extend(std::iter::repeat_n(' ', fill));
    }
}

/// A cell coloured by status word.
pub fn status_cell(status: &str) -> Cell {
    let colour = match status {
        "succeeded" | "active" => Some("32"),
        "failed" | "timed_out" | "abandoned" | "expired" => Some("31"),
        "skipped" | "paused" => Some("33"),
        "running" => Some("36"),
        _ => None,
    };
    Cell {
        text: status.to_owned(),
        colour,
    }
}

/// `2026-12-01 09:00 (in 4m)` in the local zone; `-` when absent.
pub fn when(t: Option<Instant>, now: Instant) -> String {
    match t {
        None => "-".into(),
        Some(t) => format!(
            "{} ({})",
            t.with_timezone(&Local).format("%Y-%m-%d %H:%M:%S"),
            relative(t, now)
        ),
    }
}

/// `in 4m`, `3h ago`, `now`.
pub fn relative(t: Instant, now: Instant) -> String {
    loops_core::format_relative(t, now)
}

/// `every 5m`, `cron 0 9 * * * (Europe/Berlin)`, `once 2026-…`, `dynamic ≥1m`.
pub fn schedule_summary(s: &Schedule) -> String {
    match s {
        Schedule::Once { at } => {
            format!("once {}", at.with_timezone(&Local).format("%Y-%m-%d %H:%M"))
        }
        Schedule::Interval { every_ms, anchor } => {
            let every = duration_text(*every_ms);
            match anchor {
                loops_core::Anchor::FixedRate => format!("every {every}"),
                loops_core::Anchor::FixedDelay => format!("every {every} after finish"),
            }
        }
        Schedule::Cron {
            expression,
            timezone,
        } => format!("cron {expression} ({timezone})"),
        Schedule::Dynamic { min_interval_ms } => {
            format!("dynamic ≥{}", duration_text(*min_interval_ms))
        }
    }
}

/// Milliseconds in the shortest exact duration form.
pub fn duration_text(ms: u64) -> String {
    loops_core::Duration::from_millis(ms).map_or_else(|| "0s".into(), |d| d.to_string())
}

/// `1.2s`, `340ms`, `2m05s`.
pub fn elapsed_text(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1_000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000)
    }
}

/// One-line description of what a loop runs (prompts never shown here).
pub fn target_summary(t: &Target) -> String {
    match t {
        Target::Command(c) => {
            let mut text = c.command.clone();
            for a in &c.args {
                text.push(' ');
                text.push_str(a);
            }
            truncate(&text, 48)
        }
        Target::Agent(a) => match &a.model {
            Some(m) => format!("agent {} ({m})", a.provider),
            None => format!("agent {}", a.provider),
        },
        Target::Workflow(w) => format!("workflow {}", w.workflow),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

// Redaction is the domain's, shared with every front end (the MCP tools too).
pub use loops_core::redact::{redact_loop, redact_run, redact_step, redact_url};

/// A run's error as its table line shows it: for a run that did not succeed, the
/// error followed by the first line of its stderr tail (`exited with status 3: boom`),
/// at most 100 characters of it. Take it before [`redact_run`].
pub fn run_error_line(run: &Run) -> String {
    let error = run.error.clone().unwrap_or_default();
    if run.status == RunStatus::Succeeded {
        return error;
    }
    let hint = run
        .stderr
        .as_deref()
        .and_then(|e| loops_core::notify::first_line(e, 100));
    match hint {
        Some(line) if error.is_empty() => line,
        Some(line) if !error.contains(&line) => format!("{error}: {line}"),
        _ => error,
    }
}

/// A failed run's class, with when its provider said to come back:
/// `usage_limit (retry in 4h)`; `None` for a run without a class.
pub fn failure_text(run: &Run, now: Instant) -> Option<String> {
    let class = run.failure_class?;
    Some(match run.retry_at {
        Some(at) => format!("{class} (retry {})", loops_core::format_relative(at, now)),
        None => class.to_string(),
    })
}

// A run as `runs --json` prints it, with its notifications: the runtime's, shared with
// the MCP tool `loops_runs`.
pub use loops_core::redact::redact_delivery;
pub use loops_runtime::client_notify::runs_with_notifications;

/// A run's status word, for tables.
pub fn run_status(status: RunStatus) -> Cell {
    status_cell(status.as_str())
}

/// Current instant (the CLI's clock).
pub fn now() -> Instant {
    Utc::now()
}

/// RFC 3339 for human detail views.
pub fn instant_text(t: Option<Instant>) -> String {
    t.map_or_else(|| "-".into(), |t| format_instant(&t))
}

/// Prints a run's captured streams under headers.
pub fn print_streams(run: &Run) -> Result<(), Failure> {
    if let Some(out) = run.stdout.as_deref().filter(|s| !s.is_empty()) {
        outln!("[stdout]\n{}", out.trim_end())?;
    }
    if let Some(err) = run.stderr.as_deref().filter(|s| !s.is_empty()) {
        outln!("[stderr]\n{}", err.trim_end())?;
    }
    Ok(())
}

/// Prints an agent run's final text and token usage, when the provider reported them.
pub fn print_agent_result(run: &Run) -> Result<(), Failure> {
    if let Some(summary) = run.summary.as_deref().filter(|s| !s.is_empty()) {
        outln!("[summary]\n{}", summary.trim_end())?;
    }
    if let Some(usage) = &run.usage {
        outln!("[usage] {}", usage_text(usage))?;
    }
    Ok(())
}

/// `in 1200 / out 340 tokens, $0.0123`.
pub fn usage_text(u: &loops_core::Usage) -> String {
    let mut parts = Vec::new();
    if u.input_tokens.is_some() || u.output_tokens.is_some() {
        parts.push(format!(
            "in {} / out {} tokens",
            u.input_tokens.map_or_else(|| "?".into(), |v| v.to_string()),
            u.output_tokens
                .map_or_else(|| "?".into(), |v| v.to_string())
        ));
    }
    if let Some(cost) = u.cost_usd {
        parts.push(format!("${cost:.4}"));
    }
    if parts.is_empty() {
        "not reported".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// `println!`/`print!` panic on a closed stdout and `eprintln!` on a closed stderr:
    /// the binary writes through `outln!` and friends instead. This keeps it so.
    #[test]
    fn no_panicking_print_macros_in_the_binary() {
        fn visit(dir: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    visit(&path, found);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or("");
                    for name in ["println", "print", "eprintln", "eprint"] {
                        if code.contains(&format!("{name}!(")) {
                            found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        visit(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(
            found.is_empty(),
            "use output::outln! (stdout) or a non-panicking write to stderr:\n{}",
            found.join("\n")
        );
    }
}
