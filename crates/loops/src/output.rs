//! Human and JSON rendering: aligned tables, local + relative times, colour only on a
//! TTY without `NO_COLOR`, and redaction of prompts, env values and run output.
//!
//! Every write to stdout goes through this module (`outln!`, `print_json`,
//! `Table::print`, `write_stdout`, [`RunOutput`]): `println!` panics when stdout
//! is a closed pipe (`loops list | head -1`), while these return
//! `Failure::BrokenPipe`, which `main` turns into a silent exit 0.
//!
//! Terminal escapes (issue #19): human text (`outln!`, tables, error lines) shows every
//! control character of what it prints escaped (`\x1b`; tab and newline kept outside
//! table cells), whatever the store holds, so a description or a run's stderr cannot
//! drive the terminal. A run's own output ([`RunOutput`]: `logs`, `--show-output`)
//! reaches a terminal with only its SGR colours, unless `--raw`, and a pipe or file
//! byte for byte. JSON escapes control characters itself.

use crate::exit::Exit;
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

/// Writes formatted human text to stdout, control characters but tab and newline
/// escaped; a closed pipe is [`Failure::BrokenPipe`].
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    let text = args.to_string();
    std::io::stdout()
        .lock()
        .write_all(human(&text).as_bytes())
        .map_err(Failure::stdout)
}

/// Human text as printed: control characters but tab and newline escaped.
pub fn human(text: &str) -> std::borrow::Cow<'_, str> {
    loops_core::text::escape_controls(text, loops_core::text::Lines::Many)
}

/// One line of human text as printed: every control character escaped.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    loops_core::text::escape_controls(text, loops_core::text::Lines::One)
}

/// A run's output on its way to stdout: to a terminal, its SGR colours pass and every
/// other control character is shown escaped ([`loops_core::text::TerminalFilter`]),
/// unless `raw`; to a pipe or a file, the bytes as they are.
pub struct RunOutput {
    filter: Option<loops_core::text::TerminalFilter>,
}

impl RunOutput {
    /// For stdout as it is now (a terminal or not); `raw` passes every byte.
    pub fn stdout(raw: bool) -> Self {
        let filter = (!raw && std::io::stdout().is_terminal())
            .then(loops_core::text::TerminalFilter::default);
        Self { filter }
    }

    /// Writes a piece of output (a sequence cut at its end waits for the next).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        match &mut self.filter {
            None => write_stdout_bytes(bytes),
            Some(f) => {
                let mut out = Vec::with_capacity(bytes.len());
                f.push(bytes, &mut out);
                write_stdout_bytes(&out)
            }
        }
    }

    /// The output ended: writes what was held back.
    pub fn finish(&mut self) -> Result<(), Failure> {
        match &mut self.filter {
            None => Ok(()),
            Some(f) => {
                let mut out = Vec::new();
                f.finish(&mut out);
                write_stdout_bytes(&out)
            }
        }
    }

    /// Writes a whole output.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.write(bytes)?;
        self.finish()
    }
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

/// What a command that made or changed something answers: its `document` with
/// `--json` (`as_json`), else its one `line`. Every such verb reports alike.
pub fn report<T: Serialize>(
    as_json: bool,
    document: &T,
    line: std::fmt::Arguments<'_>,
) -> Result<Exit, Failure> {
    if as_json {
        print_json(document)?;
    } else {
        outln!("{line}")?;
    }
    Ok(Exit::Success)
}

/// [`report`] of a loop a command made or changed: its document redacted.
pub fn report_loop(
    as_json: bool,
    lp: &loops_core::Loop,
    line: std::fmt::Arguments<'_>,
) -> Result<Exit, Failure> {
    let mut shown = lp.clone();
    redact_loop(&mut shown);
    report(as_json, &shown, line)
}

/// What a listing prints before its table: with `--json` (`as_json`) the `document`,
/// else `empty` when there is nothing to list. `true` when it printed one of them
/// (the command is done), so every listing answers these cases alike.
pub fn print_json_or_empty<T: Serialize>(
    as_json: bool,
    document: impl FnOnce() -> T,
    is_empty: bool,
    empty: &str,
) -> Result<bool, Failure> {
    if as_json {
        print_json(&document())?;
    } else if is_empty {
        outln!("{empty}")?;
    } else {
        return Ok(false);
    }
    Ok(true)
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

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn print(&self) -> Result<(), Failure> {
        self.write().map_err(Failure::stdout)
    }

    fn write(&self) -> std::io::Result<()> {
        let colour = colour_enabled();
        // A cell is one line: every control character of its text shown escaped.
        let rows: Vec<Vec<(std::borrow::Cow<'_, str>, Option<&str>)>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(|c| (one_line(&c.text), c.colour)).collect())
            .collect();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (i, (text, _)) in row.iter().enumerate() {
                widths[i] = widths[i].max(text.chars().count());
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
        for row in &rows {
            line.clear();
            for (i, (text, cell_colour)) in row.iter().enumerate() {
                let start = line.len();
                pad(&mut line, text, widths[i], i == last);
                if let (true, Some(code)) = (colour, cell_colour) {
                    let end = start + text.len();
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
pub use loops_core::duration::elapsed_text;

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

// Redaction is the domain's, shared with every front end (the MCP tools too), and so
// is a run's error line: what it quotes of the output only with --show-output.
pub use loops_core::redact::{error_line, redact_loop, redact_run, redact_step, redact_url};

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

/// A run's or step's duration, for tables: `-` until it ended.
pub fn duration_cell(ms: Option<u64>) -> Cell {
    ms.map_or_else(|| "-".into(), elapsed_text).into()
}

/// A run's or step's exit code, for tables: `-` without one.
pub fn exit_cell(code: Option<i32>) -> Cell {
    code.map_or_else(|| "-".into(), |c| c.to_string()).into()
}

/// Current instant (the CLI's clock).
pub fn now() -> Instant {
    Utc::now()
}

/// RFC 3339 for human detail views.
pub fn instant_text(t: Option<Instant>) -> String {
    t.map_or_else(|| "-".into(), |t| format_instant(&t))
}

/// Prints a run's (or a step's) captured streams under headers, as run output
/// ([`RunOutput`]; `raw`: the bytes as they are, also to a terminal).
pub fn print_streams(stdout: Option<&str>, stderr: Option<&str>, raw: bool) -> Result<(), Failure> {
    for (header, text) in [("[stdout]", stdout), ("[stderr]", stderr)] {
        if let Some(text) = text.filter(|s| !s.is_empty()) {
            outln!("{header}")?;
            let mut out = RunOutput::stdout(raw);
            out.write_all(text.trim_end().as_bytes())?;
            outln!()?;
        }
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
    // An identifier and our own words, not output: shown without --show-output too.
    match (&run.session_id, &run.session_note) {
        (Some(id), Some(note)) => outln!("[session] {id} ({note})")?,
        (Some(id), None) => outln!("[session] {id}")?,
        (None, Some(note)) => outln!("[session] {note}")?,
        (None, None) => {}
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
