//! Seeding the store under test: the loops the benchmarks run (`Exec`), created
//! through the library, and finished runs written through the store.

use super::{file_len, millis, BenchDir};
use anyhow::{bail, ensure, Context as _, Result};
use chrono::Utc;
use loops_core::{
    Anchor, CommandTarget, Instant, Policy, RunOutcome, RunSource, RunStatus, Schedule, Target,
};
use loops_runtime::client::{Client, LoopDefinition};
use loops_sqlite::SqliteStore;
use loops_store::{ClaimRequest, RunWrite, Store};
use std::collections::HashMap;
use std::time::{Duration, Instant as Mono};

/// `loops` loops (daily, `true`) and `runs` finished runs spread over them, each with
/// `output_bytes` of stdout, written through the store (for `quick-check` and
/// `backup`).
pub(crate) fn seed_history(
    dir: &BenchDir,
    loops: usize,
    runs: usize,
    output_bytes: usize,
) -> Result<()> {
    let client = Client::open(&dir.data())?;
    let now = Utc::now();
    let (_, setup) = populate(&client, loops, "qc", Exec::True, |_| {
        (every(86_400_000), now)
    })?;
    drop(client);
    eprintln!("{loops} loops created in {:.1} s", setup.as_secs_f64());
    let store = SqliteStore::open(&dir.db())?;
    let targets = store.list_loops(None)?;
    ensure!(!targets.is_empty(), "no loops to attach runs to");
    let origin = chrono::DateTime::from_timestamp_millis(1_577_836_800_000).unwrap_or_default();
    let output = "x".repeat(output_bytes);
    let start = Mono::now();
    for i in 0..runs {
        let lp = &targets[i % targets.len()];
        let now = Utc::now();
        let req = ClaimRequest {
            loop_id: lp.id.clone(),
            scheduled_for: origin + millis(i),
            runner_id: "loops-bench".into(),
            source: RunSource::AdHoc,
            now,
            require_no_running: false,
        };
        let run = match store.claim_run(&req, None, None)? {
            Ok(run) => run,
            Err(refused) => bail!("history claim refused: {refused:?}"),
        };
        let mut outcome =
            RunOutcome::new(RunStatus::Succeeded, now).with_output(output.clone(), String::new());
        outcome.exit_code = Some(0);
        let finish = RunWrite::Finished {
            run: run.id,
            outcome,
        };
        store.record_run_writes(&[finish], now, None)?.remove(0)?;
    }
    drop(store);
    eprintln!(
        "{runs} finished runs added in {:.1} s, db {:.1} MB",
        start.elapsed().as_secs_f64(),
        file_len(&dir.db()) as f64 / 1e6
    );
    Ok(())
}

/// What the benchmark loops run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exec {
    /// `true`, exec'd directly.
    True,
    /// `sh -c true` (the CLI's default shell mode).
    ShTrue,
    /// `date +%s%N`, exec'd directly: the run's stdout is the instant the process ran.
    Stamp,
}

impl Exec {
    pub(crate) fn pick(shell: bool) -> Self {
        if shell {
            Exec::ShTrue
        } else {
            Exec::True
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Exec::True => "exec true",
            Exec::ShTrue => "sh -c true",
            Exec::Stamp => "exec date +%s%N",
        }
    }

    pub(crate) fn target(self) -> CommandTarget {
        let (command, args, shell) = match self {
            Exec::True => ("true", vec![], false),
            Exec::ShTrue => ("true", vec![], true),
            Exec::Stamp => ("date", vec!["+%s%N".to_owned()], false),
        };
        CommandTarget {
            command: command.into(),
            args,
            cwd: None,
            shell,
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }
    }
}

pub(crate) fn command_def(name: String, schedule: Schedule, exec: Exec) -> LoopDefinition {
    LoopDefinition {
        name,
        description: None,
        schedule,
        target: Target::Command(exec.target()),
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
    }
}

pub(crate) fn every(ms: u64) -> Schedule {
    Schedule::Interval {
        every_ms: ms,
        anchor: Anchor::FixedRate,
    }
}

/// Creates `n` command loops named `{prefix}-{i}` through the library, one transaction
/// each (as the CLI does). `plan(i)` gives the schedule and the creation instant.
/// Returns the loops' first slots by id and the time taken.
pub(crate) fn populate(
    client: &Client,
    n: usize,
    prefix: &str,
    exec: Exec,
    mut plan: impl FnMut(usize) -> (Schedule, Instant),
) -> Result<(HashMap<String, Option<Instant>>, Duration)> {
    let start = Mono::now();
    let mut first = HashMap::with_capacity(n);
    for i in 0..n {
        let (schedule, now) = plan(i);
        let created = client
            .create(command_def(format!("{prefix}-{i}"), schedule, exec), now)
            .with_context(|| format!("cannot create loop {prefix}-{i}"))?;
        first.insert(created.id.to_string(), created.next_run_at);
    }
    Ok((first, start.elapsed()))
}
