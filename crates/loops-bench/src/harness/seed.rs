//! Seeding the store under test: the loops the benchmarks run (`Exec`), created
//! through the library, and finished runs written through the store.

use super::{file_len, millis, whole_ms, BenchDir};
use crate::{HistoryArgs, StoreArgs};
use anyhow::{bail, ensure, Context as _, Result};
use chrono::{TimeDelta, Utc};
use loops_core::{
    Anchor, CommandTarget, Instant, LoopId, LoopStatus, NewLoop, Policy, Run, RunOutcome,
    RunSource, RunStatus, Schedule, Target,
};
use loops_runtime::client::{Client, LoopDefinition};
use loops_sqlite::SqliteStore;
use loops_store::{ClaimRequest, ImportBatch, ImportLoop, Imported, LoopAdvance, RunWrite, Store};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant as Mono};

/// `args.loops` loops (daily, `true`) and `args.runs` finished runs spread over them,
/// each with `args.output_bytes` of stdout, written through the store (for
/// `quick-check` and `backup`).
pub(crate) fn seed_history(dir: &BenchDir, args: &StoreArgs) -> Result<()> {
    let (loops, runs) = (args.loops, args.runs);
    let (_, setup) = populate_every(&dir.data(), loops, "qc", Exec::True, 86_400_000)?;
    eprintln!("{loops} loops created in {:.1} s", setup.as_secs_f64());
    let store = SqliteStore::open(&dir.db())?;
    let targets: Vec<LoopId> = store.list_loops(None)?.into_iter().map(|l| l.id).collect();
    let output = "x".repeat(args.output_bytes);
    let start = Mono::now();
    finish_runs(&store, &targets, runs, Some(&output))?;
    drop(store);
    eprintln!(
        "{runs} finished runs added in {:.1} s, db {:.1} MB",
        start.elapsed().as_secs_f64(),
        file_len(&dir.db()) as f64 / 1e6
    );
    Ok(())
}

/// Claims and finalizes `count` succeeded ad-hoc runs spread over `targets` in turn,
/// one at a time through the store's own claim and finalize calls; each run's stdout
/// is `output` when given.
pub(crate) fn finish_runs(
    store: &SqliteStore,
    targets: &[LoopId],
    count: usize,
    output: Option<&str>,
) -> Result<()> {
    ensure!(!targets.is_empty(), "no loops to attach runs to");
    let origin = chrono::DateTime::from_timestamp_millis(1_577_836_800_000).unwrap_or_default();
    for i in 0..count {
        let now = Utc::now();
        let req = ClaimRequest {
            loop_id: targets[i % targets.len()].clone(),
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
        let mut outcome = RunOutcome::new(RunStatus::Succeeded, now);
        if let Some(output) = output {
            outcome = outcome.with_output(output.to_owned(), String::new());
        }
        outcome.exit_code = Some(0);
        let finish = RunWrite::Finished {
            run: run.id,
            outcome,
        };
        store.record_run_writes(&[finish], now, None)?.remove(0)?;
    }
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

/// `populate` into the store at `data`, opened for it: `n` loops every `every_ms`, all
/// created now.
pub(crate) fn populate_every(
    data: &Path,
    n: usize,
    prefix: &str,
    exec: Exec,
    every_ms: u64,
) -> Result<(HashMap<String, Option<Instant>>, Duration)> {
    let client = Client::open(data)?;
    let now = Utc::now();
    populate(&client, n, prefix, exec, |_| (every(every_ms), now))
}

/// A store at `dir` made by `loops` (the store created as the CLI does), then
/// `history_batch` of `args` imported into it in one go (for
/// `health`, `top` and `dashboard`).
pub(crate) fn import_history(dir: &BenchDir, args: &HistoryArgs) -> Result<Imported> {
    let now = whole_ms(Utc::now());
    let batch = history_batch(args.loops, args.runs, args.every_ms, now)?;
    drop(Client::open(&dir.data())?);
    let store = SqliteStore::open(&dir.db())?;
    Ok(store.import(&batch, now)?)
}

/// `loops` hourly-ish loops, phases spread over the period, each with its share of
/// `runs` on its last slots before `now`.
pub(crate) fn history_batch(
    loops: usize,
    runs: usize,
    every_ms: u64,
    now: Instant,
) -> Result<ImportBatch> {
    history_batch_of(0..loops, loops, runs / loops.max(1), every_ms, now)
}

/// The loops `indices` of [`history_batch`]'s `loops`, each with `per_loop` runs: a
/// large history imported a part at a time.
pub(crate) fn history_batch_of(
    indices: std::ops::Range<usize>,
    loops: usize,
    per_loop: usize,
    every_ms: u64,
    now: Instant,
) -> Result<ImportBatch> {
    let every = TimeDelta::milliseconds(i64::try_from(every_ms)?);
    let mut batch = ImportBatch::default();
    for i in indices {
        let phase = TimeDelta::milliseconds(i64::try_from(every_ms * i as u64 / loops as u64)?);
        // The loop's newest slot at or before now, on its phase.
        let epoch = chrono::DateTime::<Utc>::UNIX_EPOCH + phase;
        let k = (now - epoch).num_milliseconds() / every.num_milliseconds();
        let newest = epoch + every * i32::try_from(k)?;
        let mut history = Vec::with_capacity(per_loop);
        for back in (0..per_loop).rev() {
            if i % 10 == 0 && back == 5 {
                continue; // a missed slot
            }
            let slot = newest - every * i32::try_from(back)?;
            let roll = (i * 31 + back * 17) % 100;
            let status = match roll {
                0 | 1 => RunStatus::Failed,
                2 => RunStatus::Skipped,
                _ => RunStatus::Succeeded,
            };
            history.push(history_run(slot, status));
        }
        batch.loops.push(ImportLoop {
            new: NewLoop {
                name: format!("health-{i}"),
                description: None,
                schedule: self::every(every_ms),
                target: Target::Command(Exec::True.target()),
                policy: Policy::default(),
                labels: vec![],
                notify: None,
                next_run_at: Some(newest + every),
            },
            state: LoopAdvance {
                status: LoopStatus::Active,
                next_run_at: Some(newest + every),
                retry_scheduled_for: None,
            },
            history,
        });
    }
    Ok(batch)
}

fn history_run(slot: Instant, status: RunStatus) -> Run {
    let start = slot + TimeDelta::milliseconds(3);
    let end = start + TimeDelta::milliseconds(900);
    let ran = status != RunStatus::Skipped;
    Run {
        started_at: ran.then_some(start),
        finished_at: Some(if ran { end } else { start }),
        exit_code: ran.then_some(if status == RunStatus::Failed { 1 } else { 0 }),
        duration_ms: ran.then_some(900),
        stdout: ran.then(|| "ok\n".to_owned()),
        stderr: ran.then(String::new),
        error: match status {
            RunStatus::Failed => Some("exited with status 1".into()),
            RunStatus::Skipped => Some("previous run still active".into()),
            _ => None,
        },
        updated_at: end,
        ..Run::history(slot, 1, status, start)
    }
}
