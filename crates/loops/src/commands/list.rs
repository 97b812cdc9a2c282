//! `list` and `show`.

use super::Context;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json, Cell, Table};
use crate::Failure;
use clap::Args;
use loops_core::provider_options::ProviderOption;
use loops_core::{Instant, Loop, LoopStatus, Target};
use loops_runtime::client::Client;
use loops_runtime::definition::parse_enum;
use loops_store::LoopFilter;
use serde::ser::{SerializeSeq, Serializer as _};
use std::ops::ControlFlow;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only loops with this status (active, paused, stopped, expired, done, archived).
    #[arg(long, conflicts_with = "all")]
    pub status: Option<String>,
    /// Include archived loops.
    #[arg(long)]
    pub all: bool,
    /// Only loops with this label (repeatable: loops with all of them).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Reveal prompts and env values in the output.
    #[arg(long)]
    pub show_output: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The loop: its exact id, else its exact name, else an unambiguous id prefix.
    pub r#loop: String,
    /// Reveal the prompt and env values.
    #[arg(long)]
    pub show_output: bool,
}

pub fn list(ctx: &Context, args: ListArgs) -> Result<Exit, Failure> {
    let status = args
        .status
        .as_deref()
        .map(|s| parse_enum::<LoopStatus>("--status", s).map_err(Failure::usage))
        .transpose()?;
    let filter = LoopFilter {
        status,
        include_archived: args.all,
        labels: args.labels.clone(),
        ..LoopFilter::default()
    };
    let client = ctx.reader()?;
    let now = output::now();
    if ctx.json {
        print_json_list(&client, &filter, now, args.show_output)?;
        return Ok(Exit::Success);
    }
    // Each loop becomes its row as it is read, on the second thread; none is kept (the
    // table needs every row for its widths, not the loops).
    let table = on_second_thread(&client, &filter, now, args.show_output, |batches| {
        let mut table = Table::new(vec![
            "ID", "NAME", "STATUS", "SCHEDULE", "TARGET", "NEXT RUN", "LABELS",
        ]);
        for lp in batches.into_iter().flatten() {
            table.row(table_row(&lp, now));
        }
        table
    })?;
    if table.is_empty() {
        outln!("no loops; create one with `loops create command NAME --every 5m --cmd '…'`")?;
        return Ok(Exit::Success);
    }
    table.print()?;
    Ok(Exit::Success)
}

/// A loop's row of `loops list`.
fn table_row(lp: &Loop, now: Instant) -> Vec<Cell> {
    vec![
        lp.id.as_str().into(),
        lp.name.as_str().into(),
        match lp.held_until {
            // A usage limit holds its account (`loops holds`).
            Some(until) => format!(
                "held {}",
                until.with_timezone(&chrono::Local).format("%H:%M")
            )
            .into(),
            None => output::status_cell(lp.status.as_str()),
        },
        output::schedule_summary(&lp.schedule).into(),
        output::target_summary(&lp.target).into(),
        output::when(lp.next_run_at, now).into(),
        lp.labels.join(",").into(),
    ]
}

/// `loops --json list`: the loops as one pretty JSON array, byte for byte what
/// `print_json` of them all prints, without holding them all: each loop's JSON is
/// written as it comes, into memory; stdout gets the document only once every row was
/// read, so a row that cannot be read fails the command with nothing printed, as
/// before.
fn print_json_list(
    client: &Client,
    filter: &LoopFilter,
    now: Instant,
    show_output: bool,
) -> Result<(), Failure> {
    let text = on_second_thread(client, filter, now, show_output, |batches| {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::pretty(&mut out);
        let mut seq = ser.serialize_seq(None)?;
        for lp in batches.into_iter().flatten() {
            seq.serialize_element(&lp)?;
        }
        seq.end()?;
        out.push(b'\n');
        Ok::<_, serde_json::Error>(out)
    })?;
    let text = text.map_err(|e| Failure::failed(format!("cannot encode JSON: {e}")))?;
    output::write_stdout_bytes(&text)
}

/// The loops `filter` lists, redacted unless `show_output`, handed in batches to
/// `work` on a second thread while this one reads and decodes the rows: the two cores
/// share a listing of 100,000 loops (BENCHMARKS.md §25). `work` sees every loop, in
/// order, unless the read fails (its error is returned, whatever `work` made).
fn on_second_thread<T: Send>(
    client: &Client,
    filter: &LoopFilter,
    now: Instant,
    show_output: bool,
    work: impl FnOnce(std::sync::mpsc::Receiver<Vec<Loop>>) -> T + Send,
) -> Result<T, Failure> {
    /// Loops handed over at a time.
    const BATCH: usize = 256;
    let (read, done) = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Loop>>(8);
        let worker = scope.spawn(move || work(rx));
        let mut batch = Vec::with_capacity(BATCH);
        let read = client.each_matching(filter, now, |mut lp| {
            if !show_output {
                output::redact_loop(&mut lp);
            }
            batch.push(lp);
            if batch.len() < BATCH {
                return ControlFlow::Continue(());
            }
            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            match tx.send(full) {
                Ok(()) => ControlFlow::Continue(()),
                // The worker stopped (its JSON could not be written): what it made says why.
                Err(_) => ControlFlow::Break(()),
            }
        });
        if read.is_ok() && !batch.is_empty() {
            // A closed channel: the worker stopped, and what it made says why.
            let _ = tx.send(batch);
        }
        drop(tx);
        let done = worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (read, done)
    });
    read?;
    Ok(done)
}

pub fn show(ctx: &Context, args: ShowArgs) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let mut lp = client.get(&args.r#loop)?;
    if !args.show_output {
        output::redact_loop(&mut lp);
    }
    if ctx.json {
        print_json(&lp)?;
        return Ok(Exit::Success);
    }
    let now = output::now();
    let mut lines: Vec<(&str, String)> = vec![
        ("id", lp.id.to_string()),
        ("name", lp.name.clone()),
        ("status", lp.status.to_string()),
        ("schedule", output::schedule_summary(&lp.schedule)),
        ("next run", output::when(lp.next_run_at, now)),
    ];
    if lp.jitter_ms > 0 {
        lines.push((
            "jitter",
            format!(
                "up to {} (next slot starts {})",
                output::duration_text(lp.jitter_ms),
                output::when(lp.due_at, now)
            ),
        ));
    }
    if !lp.labels.is_empty() {
        lines.push(("labels", lp.labels.join(", ")));
    }
    if !lp.runs_on.is_empty() {
        lines.push(("on", lp.runs_on.join(", ")));
        if let Some(why) = client.runner_wait(&lp)? {
            lines.push(("waiting", why));
        }
    }
    if let Some(n) = &lp.notify {
        let mut to = Vec::new();
        if let Some(cmd) = &n.cmd {
            to.push(format!("command {cmd:?}"));
        }
        if let Some(url) = &n.url {
            to.push(format!("POST {url}"));
        }
        lines.push(("notify", format!("on {}: {}", n.on, to.join(", "))));
    }
    if let Some(d) = &lp.description {
        lines.insert(2, ("description", d.clone()));
    }
    if let Some(r) = lp.retry_scheduled_for {
        lines.push(("retrying slot", output::when(Some(r), now)));
    }
    if let Some(until) = lp.held_until {
        let why = lp.held_reason.as_deref().unwrap_or("usage limit");
        lines.push((
            "held until",
            // The reason says what holds it: a usage limit or a spent budget.
            format!("{}: {why}", output::when(Some(until), now)),
        ));
    }
    if let Some(why) = &lp.waiting_for {
        lines.push(("waiting", why.clone()));
    }
    if let Some(reason) = &lp.state.status_reason {
        let by = match lp.status {
            LoopStatus::Done => "done because",
            _ => "paused by",
        };
        lines.push((by, reason.clone()));
    }
    // Budgets: the loop's own and the store-wide ones covering it, with the spend.
    for status in client.budget_status(std::slice::from_ref(&lp), false, now)? {
        let whose = match &status.scope {
            loops_core::budget::BudgetScope::Loop(_) => String::new(),
            key => format!(" ({key})"),
        };
        lines.push((
            "budget",
            format!(
                "{} {}/{}{whose}: {}",
                status.metric,
                status.limit,
                status.window,
                status.line()
            ),
        ));
    }
    for (key, value) in stop_lines(&lp) {
        lines.push((key, value));
    }
    if let Some(n) = lp.ops.max_failures {
        lines.push((
            "circuit breaker",
            format!(
                "parks after {n} failed {} in a row ({} so far)",
                if n == 1 { "slot" } else { "slots" },
                lp.state.failure_streak
            ),
        ));
    }
    lines.push(("target", lp.target.kind().to_owned()));
    match &lp.target {
        Target::Command(c) => {
            lines.push(("command", c.command.clone()));
            if !c.args.is_empty() {
                lines.push(("args", format!("{:?}", c.args)));
            }
            lines.push(("shell", c.shell.to_string()));
            push_opt(&mut lines, "cwd", c.cwd.clone());
            push_env(&mut lines, &c.env);
        }
        Target::Agent(a) => {
            lines.push(("provider", a.provider.to_string()));
            lines.push(("prompt", a.prompt.clone()));
            push_opt(&mut lines, "prompt file", a.prompt_file.clone());
            push_opt(&mut lines, "model", a.model.clone());
            push_opt(&mut lines, "agent", a.agent.clone());
            push_opt(&mut lines, "auth profile", a.auth_profile.clone());
            lines.push(("config isolation", a.config_isolation.to_string()));
            lines.push(("session", a.session.to_string()));
            if !a.account_pool.is_empty() {
                lines.push(("account pool", a.account_pool.join(", ")));
            }
            for (option, values) in ProviderOption::set_on(a) {
                lines.push((option.label(), values.join(", ")));
            }
            push_opt(&mut lines, "cwd", a.cwd.clone());
            push_env(&mut lines, &a.env);
        }
        Target::Workflow(w) => lines.push(("workflow", w.workflow.clone())),
    }
    if let Some(t) = lp.target.timeout() {
        lines.push(("timeout", output::duration_text(t.as_millis())));
    }
    if let Some(t) = lp.target.idle_timeout() {
        lines.push(("idle timeout", output::duration_text(t.as_millis())));
    }
    lines.extend([
        (
            "catch-up",
            format!("{} (limit {})", lp.catch_up, lp.catch_up_limit),
        ),
        ("overlap", lp.overlap.to_string()),
        ("attempts", lp.max_attempts.to_string()),
        ("retry delay", retry_text(&lp)),
        ("lease", output::duration_text(lp.lease_ms)),
        ("expires", output::when(lp.expires_at, now)),
        ("created", output::instant_text(Some(lp.created_at))),
        ("updated", output::instant_text(Some(lp.updated_at))),
    ]);
    let last = client
        .runs(Some(lp.id.as_str()), Some(1))
        .ok()
        .and_then(|mut r| r.pop());
    if let Some(mut run) = last {
        let error = output::error_line(&run, args.show_output);
        if !args.show_output {
            output::redact_run(&mut run);
        }
        let status = match output::failure_text(&run, now) {
            Some(class) => format!("{} ({class})", run.status),
            None => run.status.to_string(),
        };
        lines.push((
            "last run",
            format!(
                "{status} {} (attempt {}{}){}",
                output::when(run.started_at.or(Some(run.created_at)), now),
                run.attempt,
                run.account
                    .as_deref()
                    .map(|a| format!(" on account {a}"))
                    .unwrap_or_default(),
                Some(error)
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        ));
        if let Some(summary) = run.summary.as_deref().filter(|s| !s.is_empty()) {
            lines.push((
                "last summary",
                summary.lines().next().unwrap_or("").to_owned(),
            ));
        }
        if let Some(usage) = &run.usage {
            lines.push(("last usage", output::usage_text(usage)));
        }
    }
    for line in super::notify::last_deliveries(&client, &lp, args.show_output) {
        lines.push(("notified", line));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    // A value of several lines (a description, a shell script) keeps its later lines
    // under its first, so none can pass for a line of its own.
    let indent = format!("\n{}", " ".repeat(width + 2));
    for (key, value) in lines {
        outln!("{key:>width$}  {}", value.trim_end().replace('\n', &indent))?;
    }
    Ok(Exit::Success)
}

/// The loop's stop conditions, as `show` prints them (`loops_core::stop`).
fn stop_lines(lp: &loops_core::Loop) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(cmd) = &lp.ops.until_cmd {
        lines.push(("until cmd", cmd.clone()));
    }
    if let Some(pattern) = &lp.ops.until_output {
        let field = loops_core::stop::output_field(lp);
        lines.push(("until output", format!("{field} matches /{pattern}/")));
    }
    if let Some(n) = lp.ops.max_runs {
        lines.push((
            "max runs",
            format!("{n} ({} ended so far)", lp.state.run_count),
        ));
    }
    lines
}

/// `1m`, or `1m, exponential up to 6h`.
fn retry_text(lp: &loops_core::Loop) -> String {
    let base = output::duration_text(lp.retry_delay_ms);
    match lp.ops.retry_backoff {
        loops_core::RetryBackoff::Fixed => base,
        loops_core::RetryBackoff::Exponential => format!(
            "{base}, exponential up to {}",
            output::duration_text(lp.ops.retry_delay_max_ms)
        ),
    }
}

fn push_opt(lines: &mut Vec<(&str, String)>, key: &'static str, value: Option<String>) {
    if let Some(v) = value {
        lines.push((key, v));
    }
}

fn push_env(lines: &mut Vec<(&str, String)>, env: &std::collections::BTreeMap<String, String>) {
    for (k, v) in env {
        lines.push(("env", format!("{k}={v}")));
    }
}
