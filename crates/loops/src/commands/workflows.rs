//! `workflows validate|create|list|show|run|runs|inspect|events|cancel|recover|archive`.

use super::{runtime, Context};
use crate::cli::timeout;
use crate::exit::Exit;
use crate::output::outln;
use crate::output::{self, print_json, Table};
use crate::Failure;
use clap::{Args, Subcommand};
use loops_core::workflow::{Dag, StepRun, StepTarget, Workflow, WorkflowRun, WorkflowSpec};
use loops_core::Duration;
use loops_core::{StepStatus, WorkflowRunStatus, WorkflowStatus};
use loops_runtime::definition::parse_enum;
use loops_runtime::workflow_file::{load_spec_file, workflow_json};
use loops_runtime::Client;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    /// Check a workflow spec file (at most 1 MiB) without storing it.
    Validate(WorkflowFileArgs),
    /// Store a workflow spec from a JSON file (at most 1 MiB).
    Create(WorkflowCreateArgs),
    /// List active workflows (--all or --status archived for archived versions).
    List(WorkflowListArgs),
    /// Show one workflow spec.
    Show(WorkflowArg),
    /// Run a workflow now, in this process; exits non-zero unless it succeeds.
    Run(WorkflowRunArgs),
    /// List workflow runs, newest first.
    Runs(WorkflowRunsArgs),
    /// Show a workflow run: its DAG with each step's state, and its events.
    Inspect(WorkflowRunArg),
    /// Print a workflow run's event log.
    Events(WorkflowEventsArgs),
    /// Stop a running workflow run (from any process).
    Cancel(WorkflowReasonArgs),
    /// Reset steps whose processes are gone to pending, for the next attempt.
    Recover(WorkflowReasonArgs),
    /// Archive a workflow (loops naming it stop finding it).
    Archive(WorkflowArg),
}

#[derive(Debug, Args)]
pub struct WorkflowFileArgs {
    /// Path of the JSON spec.
    pub file: PathBuf,
    /// Override the spec's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Also check that every step's target can start here.
    #[arg(long)]
    pub preflight: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowCreateArgs {
    #[command(flatten)]
    pub file: WorkflowFileArgs,
    /// Archive the active spec of the same name and store this one as a new version.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowListArgs {
    /// Only workflows with this status (active, archived; default active).
    #[arg(long, conflicts_with = "all")]
    pub status: Option<String>,
    /// Include archived versions.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowArg {
    /// The workflow: its exact id, else an active workflow's exact name, else an
    /// unambiguous id prefix.
    pub workflow: String,
}

#[derive(Debug, Args)]
pub struct WorkflowRunArgs {
    /// The workflow: its exact id, else an active workflow's exact name, else an
    /// unambiguous id prefix.
    pub workflow: String,
    /// Print every step's stdout and stderr.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
    /// Stop the whole run after DURATION (omit for no limit).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = timeout)]
    pub timeout: Option<Duration>,
    /// A value for one of the workflow's params (repeatable; checked against the spec:
    /// an unknown name or a missing required param is refused).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
}

#[derive(Debug, Args)]
pub struct WorkflowRunsArgs {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// At most N runs (default 20; 0 = all).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct WorkflowRunArg {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Include step output.
    #[arg(long)]
    pub show_output: bool,
    /// With the output, every byte as captured: to a terminal, a run's output
    /// otherwise passes only its colours (other control characters shown escaped).
    #[arg(long, requires = "show_output")]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct WorkflowEventsArgs {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Only the last N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct WorkflowReasonArgs {
    /// The workflow run: its exact id, else an unambiguous id prefix.
    pub run: String,
    /// Recorded with the event.
    #[arg(long)]
    pub reason: Option<String>,
}

pub fn run(ctx: &Context, cmd: WorkflowsCommand) -> Result<Exit, Failure> {
    match cmd {
        WorkflowsCommand::Validate(args) => validate_cmd(ctx, args),
        WorkflowsCommand::Create(args) => create(ctx, args),
        WorkflowsCommand::List(args) => list(ctx, args),
        WorkflowsCommand::Show(args) => show(ctx, args),
        WorkflowsCommand::Run(args) => run_now(ctx, args),
        WorkflowsCommand::Runs(args) => runs(ctx, args),
        WorkflowsCommand::Inspect(args) => inspect(ctx, args),
        WorkflowsCommand::Events(args) => events(ctx, args),
        WorkflowsCommand::Cancel(args) => cancel(ctx, args),
        WorkflowsCommand::Recover(args) => recover(ctx, args),
        WorkflowsCommand::Archive(args) => archive(ctx, args),
    }
}

/// Reads, parses and validates a spec file (see
/// [`loops_runtime::workflow_file::load_spec_file`]).
fn load_spec(args: &WorkflowFileArgs) -> Result<WorkflowSpec, Failure> {
    load_spec_file(&args.file, args.name.as_deref(), args.preflight).map_err(Failure::usage)
}

fn record_json(record: &Workflow) -> serde_json::Value {
    workflow_json(record)
}

fn validate_cmd(ctx: &Context, args: WorkflowFileArgs) -> Result<Exit, Failure> {
    let spec = load_spec(&args)?;
    if ctx.json {
        print_json(&loops_runtime::workflow_file::validated_json(&spec))?;
    } else {
        outln!(
            "{}: valid workflow {:?} with {} step(s)",
            args.file.display(),
            spec.name,
            spec.steps.len()
        )?;
        print_declared(&spec)?;
    }
    Ok(Exit::Success)
}

/// The params a spec declares, one line each: `param branch (required): the branch`.
fn print_declared(spec: &WorkflowSpec) -> Result<(), Failure> {
    for p in &spec.params {
        let how = match (&p.default, p.required) {
            (_, true) => " (required)".to_owned(),
            (Some(d), false) => format!(" (default {:?})", d),
            (None, false) => " (default empty)".to_owned(),
        };
        let what = p
            .description
            .as_deref()
            .map(|d| format!(": {}", output::one_line(d)))
            .unwrap_or_default();
        outln!("param {}{how}{what}", p.name)?;
    }
    Ok(())
}

fn create(ctx: &Context, args: WorkflowCreateArgs) -> Result<Exit, Failure> {
    let spec = load_spec(&args.file)?;
    let record = ctx
        .client()?
        .create_workflow(&spec, args.replace, output::now())?;
    output::report(
        ctx.json,
        &record_json(&record),
        format_args!(
            "created workflow {} v{} ({}) with {} step(s)",
            record.name,
            record.version,
            record.id,
            spec.steps.len()
        ),
    )
}

/// Active specs only, unless `--all` or `--status archived` (as OpenLoops 0.3 lists).
fn list(ctx: &Context, args: WorkflowListArgs) -> Result<Exit, Failure> {
    let status = match args.status.as_deref() {
        Some(s) => Some(parse_enum::<WorkflowStatus>("--status", s).map_err(Failure::usage)?),
        None if args.all => None,
        None => Some(WorkflowStatus::Active),
    };
    let list = ctx.reader()?.list_workflows(status)?;
    let document = || list.iter().map(record_json).collect::<Vec<_>>();
    let empty = "no workflows; store one with `loops workflows create FILE`";
    if output::print_json_or_empty(ctx.json, document, list.is_empty(), empty)? {
        return Ok(Exit::Success);
    }
    let mut table = Table::new(vec!["ID", "NAME", "VERSION", "STATUS", "STEPS", "CREATED"]);
    for w in &list {
        table.row(vec![
            w.id.as_str().into(),
            w.name.as_str().into(),
            w.version.to_string().into(),
            output::status_cell(w.status.as_str()),
            w.spec.steps.len().to_string().into(),
            output::when(Some(w.created_at), output::now()).into(),
        ]);
    }
    table.print()?;
    Ok(Exit::Success)
}

fn show(ctx: &Context, args: WorkflowArg) -> Result<Exit, Failure> {
    let record = ctx.reader()?.get_workflow(&args.workflow)?;
    if ctx.json {
        print_json(&record_json(&record))?;
        return Ok(Exit::Success);
    }
    outln!(
        "workflow {} v{} ({}) {}",
        record.name,
        record.version,
        record.id,
        record.status
    )?;
    if let Some(d) = &record.spec.description {
        outln!("{d}")?;
    }
    outln!("max parallel: {}", record.spec.max_parallel())?;
    print_declared(&record.spec)?;
    let dag = Dag::new(&record.spec);
    let levels = dag.levels();
    for (i, step) in record.spec.steps.iter().enumerate() {
        let what = match &step.target {
            StepTarget::Command(c) => format!(
                "command {}{}",
                c.command,
                if c.args.is_empty() {
                    String::new()
                } else {
                    format!(" {}", c.args.join(" "))
                }
            ),
            StepTarget::Agent(a) => match &a.prompt_file {
                Some(f) => format!("agent {} (prompt from {f})", a.provider),
                None => format!("agent {}", a.provider),
            },
        };
        let deps = if step.depends_on.is_empty() {
            String::new()
        } else {
            let deps: Vec<&str> = step.depends_on.iter().map(|d| d.as_str()).collect();
            format!(" ← {}", deps.join(", "))
        };
        outln!("{}{}: {what}{deps}", "  ".repeat(levels[i] + 1), step.id)?;
    }
    Ok(Exit::Success)
}

fn run_now(ctx: &Context, args: WorkflowRunArgs) -> Result<Exit, Failure> {
    let client = ctx.client()?;
    let workflow = client.runnable_workflow(&args.workflow)?;
    let params =
        loops_core::workflow_params::parse_assignments(&args.params).map_err(Failure::usage)?;
    let timeout = args.timeout.map(loops_core::Duration::to_std);
    let live = !ctx.json && std::io::stdout().is_terminal();
    let rt = runtime()?;
    let result = rt.block_on(async {
        let (interrupt_tx, interrupt_rx) = tokio::sync::watch::channel(None::<String>);
        let signals = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = interrupt_tx.send(Some("interrupted by the user".into()));
            }
        });
        let progress = live.then(|| spawn_progress(client.clone(), workflow.name.clone()));
        let result = client
            .run_workflow(&workflow, timeout, &params, interrupt_rx)
            .await;
        signals.abort();
        if let Some(p) = progress {
            p.abort();
            let _ = p.await;
        }
        result
    });
    let run = redact_run(result?.into_run(), args.show_output);
    let steps: Vec<StepRun> = client
        .step_runs(&run.id)?
        .into_iter()
        .map(|s| redact_step(s, args.show_output))
        .collect();
    if ctx.json {
        print_json(&serde_json::json!({ "workflowRun": run, "steps": steps }))?;
    } else {
        if live {
            draw_steps(&steps, steps.len())?;
        }
        outln!(
            "workflow run {} {}: {}{}",
            run.id,
            run.workflow_name,
            run.status,
            run.duration_ms
                .map(|d| format!(" in {}", output::elapsed_text(d)))
                .unwrap_or_default()
        )?;
        if let Some(e) = &run.error {
            outln!("error: {e}")?;
        }
        print_params(&run)?;
        if !live {
            step_table(&steps)?;
        }
        print_step_results(&steps)?;
        if args.show_output {
            print_step_output(&steps, args.raw)?;
        }
    }
    Ok(if run.status == WorkflowRunStatus::Succeeded {
        Exit::Success
    } else {
        Exit::Failed
    })
}

/// Redraws one line per step (state and elapsed time) while a run executes on a TTY.
fn spawn_progress(client: Client, name: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut drawn = 0usize;
        let mut run_id = None;
        loop {
            if run_id.is_none() {
                run_id = client
                    .workflow_runs(Some(&name), Some(1))
                    .ok()
                    .and_then(|mut r| r.pop())
                    .map(|r| r.id);
            }
            if let Some(id) = &run_id {
                if let Ok(steps) = client.step_runs(id) {
                    let _ = draw_steps(&steps, drawn);
                    drawn = steps.len();
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
}

/// Draws one line per step, first moving up over the `drawn` lines of the last frame.
fn draw_steps(steps: &[StepRun], drawn: usize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if drawn > 0 {
        write!(out, "\x1b[{drawn}A")?;
    }
    for s in steps {
        writeln!(out, "\x1b[2K{}", output::one_line(&step_line(s)))?;
    }
    out.flush()?;
    Ok(())
}

fn step_line(s: &StepRun) -> String {
    let elapsed = match (s.status, s.started_at, s.duration_ms) {
        (_, _, Some(ms)) => output::elapsed_text(ms),
        (StepStatus::Running, Some(start), _) => output::elapsed_text(
            u64::try_from((output::now() - start).num_milliseconds()).unwrap_or(0),
        ),
        _ => String::new(),
    };
    let mark = match s.status {
        StepStatus::Succeeded => "✓",
        StepStatus::Failed | StepStatus::TimedOut => "✗",
        StepStatus::Running => "…",
        StepStatus::Skipped | StepStatus::Cancelled => "-",
        StepStatus::Pending => " ",
    };
    format!(
        "{mark} {:<20} {:<10} {elapsed}",
        s.step_id,
        s.status.as_str()
    )
}

fn step_table(steps: &[StepRun]) -> anyhow::Result<()> {
    let mut table = Table::new(vec!["STEP", "STATUS", "DURATION", "EXIT", "ERROR"]);
    for s in steps {
        let mut row = vec![s.step_id.as_str().into()];
        row.extend(step_cells(s));
        table.row(row);
    }
    Ok(table.print()?)
}

/// A step run's status, duration, exit code and error, as table cells.
fn step_cells(s: &StepRun) -> [output::Cell; 4] {
    [
        output::status_cell(s.status.as_str()),
        output::duration_cell(s.duration_ms),
        output::exit_cell(s.exit_code),
        s.error.clone().unwrap_or_default().into(),
    ]
}

/// Agent steps' final text and usage, one block per step: the text is output, so
/// without `--show-output` only its size shows (the steps come redacted).
fn print_step_results(steps: &[StepRun]) -> Result<(), Failure> {
    for s in steps {
        let summary = s.summary.as_deref().filter(|t| !t.is_empty());
        if summary.is_none() && s.usage.is_none() {
            continue;
        }
        outln!("\n--- step {} result ---", s.step_id)?;
        if let Some(summary) = summary {
            outln!("[summary]\n{}", summary.trim_end())?;
        }
        if let Some(usage) = &s.usage {
            outln!("[usage] {}", output::usage_text(usage))?;
        }
    }
    Ok(())
}

fn print_step_output(steps: &[StepRun], raw: bool) -> Result<(), Failure> {
    for s in steps {
        let out = s.stdout.as_deref().unwrap_or("");
        let err = s.stderr.as_deref().unwrap_or("");
        let quoted = s.error_output.as_deref().unwrap_or("");
        if out.is_empty() && err.is_empty() && quoted.is_empty() {
            continue;
        }
        outln!("\n--- step {} ---", s.step_id)?;
        if !quoted.is_empty() {
            outln!("[error output]\n{}", quoted.trim_end())?;
        }
        output::print_streams(Some(out), Some(err), raw)?;
    }
    Ok(())
}

fn redact_step(mut s: StepRun, reveal: bool) -> StepRun {
    if !reveal {
        output::redact_step(&mut s);
    }
    s
}

/// A workflow run with its params' values redacted unless `reveal` (as env values are).
fn redact_run(mut run: WorkflowRun, reveal: bool) -> WorkflowRun {
    if !reveal {
        loops_core::redact::redact_workflow_run(&mut run);
    }
    run
}

/// `params: branch=main, tests=[redacted]`, when the run has any.
fn print_params(run: &WorkflowRun) -> Result<(), Failure> {
    if run.params.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = run
        .params
        .iter()
        .map(|(name, value)| format!("{name}={}", output::one_line(value)))
        .collect();
    outln!("params: {}", shown.join(", "))?;
    Ok(())
}

fn runs(ctx: &Context, args: WorkflowRunsArgs) -> Result<Exit, Failure> {
    let limit = loops_core::limits::runs_listed(args.limit);
    let runs: Vec<WorkflowRun> = ctx
        .reader()?
        .workflow_runs(args.workflow.as_deref(), limit)?
        .into_iter()
        .map(|r| redact_run(r, false))
        .collect();
    if output::print_json_or_empty(ctx.json, || &runs, runs.is_empty(), "no workflow runs yet")? {
        return Ok(Exit::Success);
    }
    let now = output::now();
    let mut table = Table::new(vec![
        "RUN", "WORKFLOW", "STATUS", "ATTEMPT", "STARTED", "DURATION", "LOOP", "ERROR",
    ]);
    for r in &runs {
        table.row(vec![
            r.id.as_str().into(),
            r.workflow_name.as_str().into(),
            output::status_cell(r.status.as_str()),
            r.attempt.to_string().into(),
            output::when(r.started_at, now).into(),
            output::duration_cell(r.duration_ms),
            r.loop_id.as_ref().map_or("-", |id| id.as_str()).into(),
            r.error.clone().unwrap_or_default().into(),
        ]);
    }
    table.print()?;
    Ok(Exit::Success)
}

fn inspect(ctx: &Context, args: WorkflowRunArg) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let run = redact_run(client.get_workflow_run(&args.run)?, args.show_output);
    let steps: Vec<StepRun> = client
        .step_runs(&run.id)?
        .into_iter()
        .map(|s| redact_step(s, args.show_output))
        .collect();
    let events = client.workflow_events(&run.id, None)?;
    if ctx.json {
        print_json(&serde_json::json!({ "workflowRun": run, "steps": steps, "events": events }))?;
        return Ok(Exit::Success);
    }
    outln!(
        "workflow run {} of {} — {} (attempt {}){}",
        run.id,
        run.workflow_name,
        run.status,
        run.attempt,
        run.duration_ms
            .map(|d| format!(", {}", output::elapsed_text(d)))
            .unwrap_or_default()
    )?;
    if let Some(e) = &run.error {
        outln!("error: {e}")?;
    }
    if let Some(k) = &run.idempotency_key {
        outln!("slot: {k}")?;
    }
    print_params(&run)?;
    let workflow = client.workflow_by_id(&run.workflow_id)?;
    let levels = workflow.as_ref().map(|w| Dag::new(&w.spec).levels());
    let mut rows: Vec<(usize, &StepRun)> = steps
        .iter()
        .map(|s| {
            let level = workflow
                .as_ref()
                .and_then(|w| w.spec.steps.iter().position(|st| st.id == s.step_id))
                .and_then(|i| levels.as_ref().map(|l| l[i]))
                .unwrap_or(0);
            (level, s)
        })
        .collect();
    rows.sort_by_key(|(level, s)| (*level, s.sequence));
    let mut table = Table::new(vec!["LEVEL", "STEP", "STATUS", "DURATION", "EXIT", "ERROR"]);
    for (level, s) in rows {
        let mut row = vec![
            level.to_string().into(),
            format!("{}{}", "  ".repeat(level), s.step_id).into(),
        ];
        row.extend(step_cells(s));
        table.row(row);
    }
    table.print()?;
    print_step_results(&steps)?;
    outln!("\nevents:")?;
    for e in &events {
        outln!(
            "  {:>3} {} {:<16} {}",
            e.sequence,
            e.created_at
                .with_timezone(&chrono::Local)
                .format("%H:%M:%S%.3f"),
            e.event_type.as_str(),
            e.step_id.as_ref().map_or("", |id| id.as_str())
        )?;
    }
    if args.show_output {
        print_step_output(&steps, args.raw)?;
    }
    Ok(Exit::Success)
}

fn events(ctx: &Context, args: WorkflowEventsArgs) -> Result<Exit, Failure> {
    let client = ctx.reader()?;
    let run = client.get_workflow_run(&args.run)?;
    let events = client.workflow_events(&run.id, args.limit)?;
    if ctx.json {
        print_json(&events)?;
        return Ok(Exit::Success);
    }
    let mut table = Table::new(vec!["SEQ", "TIME", "EVENT", "STEP", "PAYLOAD"]);
    for e in &events {
        table.row(vec![
            e.sequence.to_string().into(),
            loops_core::format_instant(&e.created_at).into(),
            e.event_type.as_str().into(),
            e.step_id.as_ref().map_or("", |id| id.as_str()).into(),
            e.payload.to_string().into(),
        ]);
    }
    table.print()?;
    Ok(Exit::Success)
}

fn cancel(ctx: &Context, args: WorkflowReasonArgs) -> Result<Exit, Failure> {
    let reason = args
        .reason
        .unwrap_or_else(|| "cancelled from the CLI".into());
    let run = ctx
        .client()?
        .cancel_workflow_run(&args.run, &reason, output::now())?;
    if ctx.json {
        print_json(&run)?;
    } else {
        outln!("cancel requested for workflow run {} ({reason})", run.id)?;
    }
    Ok(Exit::Success)
}

fn recover(ctx: &Context, args: WorkflowReasonArgs) -> Result<Exit, Failure> {
    let reason = args
        .reason
        .unwrap_or_else(|| "workflow run recovered for retry".into());
    let (run, steps) = ctx
        .client()?
        .recover_workflow_run(&args.run, &reason, output::now())?;
    if ctx.json {
        print_json(&serde_json::json!({ "workflowRun": run, "recoveredSteps": steps }))?;
    } else if steps.is_empty() {
        outln!("workflow run {}: no running steps to recover", run.id)?;
    } else {
        let ids: Vec<&str> = steps.iter().map(|s| s.step_id.as_str()).collect();
        outln!(
            "workflow run {}: reset {} to pending",
            run.id,
            ids.join(", ")
        )?;
    }
    Ok(Exit::Success)
}

fn archive(ctx: &Context, args: WorkflowArg) -> Result<Exit, Failure> {
    let record = ctx
        .client()?
        .archive_workflow(&args.workflow, output::now())?;
    output::report(
        ctx.json,
        &record_json(&record),
        format_args!(
            "archived workflow {} v{} ({})",
            record.name, record.version, record.id
        ),
    )
}
