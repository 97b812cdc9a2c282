//! `loops-bench`: benchmarks of the `loops` CLI, daemon and store. Not a test suite:
//! every subcommand sets up a fresh temporary data dir (`LOOPS_DATA_DIR`), measures one
//! thing against the real release binary and prints markdown table rows.
//!
//! Build both binaries in release mode first, then run one benchmark at a time:
//!
//! ```sh
//! cargo build --release -p loops -p loops-bench
//! cargo run --release -p loops-bench -- cli-list               # `loops --json list`, 1k and 10k loops
//! cargo run --release -p loops-bench -- cli-create             # `loops create` into 1k loops
//! cargo run --release -p loops-bench -- dispatch --secs 60     # 1k loops every 1 s: dispatch lag
//! cargo run --release -p loops-bench -- dispatch --stamp       # same, with the real spawn instants
//! cargo run --release -p loops-bench -- throughput             # 5k due runs end to end
//! cargo run --release -p loops-bench -- rss                    # daemon RSS and idle CPU
//! cargo run --release -p loops-bench -- tick-cost              # scheduling cost with 100k loops
//! cargo run --release -p loops-bench -- soak --secs 120        # bounded store under retention
//! cargo run --release -p loops-bench -- quick-check            # daemon start-up check, 100k runs
//! cargo run --release -p loops-bench -- cli-edit               # `loops edit`, `runs --status failed --since 1d`
//! cargo run --release -p loops-bench -- http-get               # `loops serve` request rates (needs `oha`)
//! cargo run --release -p loops-bench -- http-events            # SSE delivery to 100 clients, 1k loops/s
//! cargo run --release -p loops-bench -- mcp-list               # MCP `tools/call loops_list` round trip
//! cargo run --release -p loops-bench -- health                 # `loops health`, 1k loops, 100k runs
//! cargo run --release -p loops-bench -- dashboard              # the web overview, 1k loops, 100k runs
//! cargo run --release -p loops-bench -- top                    # `loops top`'s refresh, 1k loops, 100k runs
//! ```
//!
//! The `loops` binary is `target/release/loops` of this workspace unless
//! `--loops-bin PATH` says otherwise. Results and the machine they were taken on are
//! recorded in `BENCHMARKS.md` at the workspace root.

mod classify;
mod dashboard;
mod harness;
mod http;
mod operability;
mod supervised;
mod top;

use anyhow::{bail, ensure, Context as _, Result};
use chrono::{TimeDelta, Utc};
use clap::{Parser, Subcommand};
use harness::{
    all_runs, clock_ticks_per_sec, command_def, delta_ms, every, file_len, flush, loadavg, millis,
    ms, populate, seed_history, sleep, verdict, whole_ms, BenchDir, Bencher, Daemon, Exec, Stats,
};
use loops_core::transitions::LoopAdvance;
use loops_core::LoopStatus;
use loops_core::{Instant, Run, RunOutcome, RunSource, RunStatus, Schedule};
use loops_runtime::client::Client;
use loops_runtime::engine::{Engine, EngineConfig, SystemClock};
use loops_sqlite::SqliteStore;
use loops_store::{BatchClaim, ClaimOutcome, ClaimRequest, OnRefusal, RunFilter, RunWrite, Store};
use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant as Mono};

#[derive(Debug, Parser)]
#[command(
    name = "loops-bench",
    about = "Benchmarks of the loops CLI, daemon and store"
)]
struct Cli {
    /// The `loops` binary to measure (default: target/release/loops of this workspace).
    #[arg(long, global = true, value_name = "PATH")]
    loops_bin: Option<PathBuf>,
    /// Keep the temporary data dirs (their paths are printed) instead of deleting them.
    #[arg(long, global = true)]
    keep_dirs: bool,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Wall clock of `loops --json list` (and `loops list`) over stores of N loops.
    CliList {
        /// Store sizes to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [1_000usize, 10_000])]
        sizes: Vec<usize>,
        /// Timed invocations per size.
        #[arg(long, default_value_t = 30)]
        runs: usize,
    },
    /// Wall clock of `loops create command … --every 1m --cmd true` into a populated store.
    CliCreate {
        /// Loops already in the store.
        #[arg(long, default_value_t = 1_000)]
        existing: usize,
        /// Timed invocations.
        #[arg(long, default_value_t = 100)]
        calls: usize,
    },
    /// Dispatch lag of the real daemon with N loops every 1 s running `true`.
    Dispatch {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        /// How long the daemon runs.
        #[arg(long, default_value_t = 60)]
        secs: u64,
        #[arg(long, default_value_t = 256)]
        max_concurrent: usize,
        /// Give every loop the same phase (all N due at the same instant each second)
        /// instead of spreading the phases evenly over the second.
        #[arg(long)]
        aligned: bool,
        /// Run `true` through `sh -c` (the CLI's default) instead of exec'ing it.
        #[arg(long, conflicts_with = "stamp")]
        shell: bool,
        /// Run `date +%s%N` instead of `true`: its output is the instant the process
        /// actually ran, giving the real spawn lag next to the recorded one.
        #[arg(long)]
        stamp: bool,
        /// One more argument of `loops daemon run` (repeatable), e.g.
        /// `--daemon-arg=--max-concurrent-per --daemon-arg=kind=command:256`.
        #[arg(long = "daemon-arg", allow_hyphen_values = true)]
        daemon_args: Vec<String>,
    },
    /// Dispatch lag on PostgreSQL: N loops every 1 s shared by R runners (daemons with
    /// data dirs of their own), on a throwaway cluster unless --store names one.
    PgDispatch {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 60)]
        secs: u64,
        #[arg(long, default_value_t = 1)]
        runners: usize,
        #[arg(long, default_value_t = 256)]
        max_concurrent: usize,
        /// A PostgreSQL URL (its database is filled with the benchmark's loops).
        #[arg(long)]
        store: Option<String>,
        #[arg(long)]
        shell: bool,
    },
    /// Wake-up latency across runners on PostgreSQL: an idle runner (another data dir,
    /// as another host) starts a loop that `resume` made due (`--via resume`), or that
    /// `run-now --on-runner` asked for (`--via on-runner`), from the commit of the
    /// change to the child's own start (`date +%s%N`).
    PgWake {
        #[arg(long, default_value_t = 50)]
        samples: usize,
        /// What makes the loop due: `resume` of an overdue loop, or `on-runner`.
        #[arg(long, default_value = "resume")]
        via: String,
        /// A PostgreSQL URL (an empty database); a throwaway cluster otherwise.
        #[arg(long)]
        store: Option<String>,
    },
    /// End-to-end runs/s: N loops due at once, from daemon start to the last finalized run.
    Throughput {
        #[arg(long, default_value_t = 5_000)]
        loops: usize,
        #[arg(long, default_value_t = 256)]
        max_concurrent: usize,
        #[arg(long)]
        shell: bool,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
    },
    /// Daemon RSS and idle CPU with 0 loops and with N loops due far in the future.
    Rss {
        #[arg(long, default_value_t = 10_000)]
        loops: usize,
        /// Length of the idle CPU sample.
        #[arg(long, default_value_t = 10)]
        idle_secs: u64,
    },
    /// Scheduling cost of one pass with DUE due loops among N stored loops.
    TickCost {
        #[arg(long, default_value_t = 100_000)]
        loops: usize,
        #[arg(long, default_value_t = 10)]
        due: usize,
        /// Timed repetitions of each measurement.
        #[arg(long, default_value_t = 30)]
        runs: usize,
        /// Finished runs then added to the big store before measuring again (0: skip).
        #[arg(long, default_value_t = 100_000)]
        history: usize,
    },
    /// Long run of N loops every 1 s under scaled-down retention; samples the DB size.
    Soak {
        #[arg(long, default_value_t = 200)]
        loops: usize,
        #[arg(long, default_value_t = 600)]
        secs: u64,
        /// Seconds between samples.
        #[arg(long, default_value_t = 10)]
        sample_every: u64,
        /// Daemon `--keep-runs`.
        #[arg(long, default_value_t = 20)]
        keep_runs: usize,
        /// Daemon `--prune-every`.
        #[arg(long, default_value = "10s")]
        prune_every: String,
    },
    /// Wall clock of `loops edit` and of `loops runs --status failed --since 1d` over
    /// N loops and M finished runs spread over the last days (issue #11).
    CliEdit {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Every Nth run failed (the rest succeeded).
        #[arg(long, default_value_t = 10)]
        failed_every: usize,
        /// Days the runs' creation instants spread over, ending now.
        #[arg(long, default_value_t = 5)]
        days: u32,
        /// Timed invocations of each command.
        #[arg(long, default_value_t = 50)]
        calls: usize,
    },
    /// `loops serve`: `GET /v1/loops/{id}` and `GET /v1/loops?limit=100` over N loops,
    /// load from `oha` (on PATH or in ~/.cargo/bin) on loopback.
    HttpGet {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        /// Seconds of load per request.
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Concurrent connections.
        #[arg(long, default_value_t = 16)]
        connections: usize,
    },
    /// `loops serve`: event delivery to C SSE clients while the daemon runs N loops
    /// every 1 s, and the daemon's dispatch lag without and with those clients.
    HttpEvents {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// How long each round (without, then with clients) runs.
        #[arg(long, default_value_t = 30)]
        secs: u64,
        #[arg(long, default_value_t = 256)]
        max_concurrent: usize,
    },
    /// MCP `tools/call loops_list` round trip: one `loops mcp` session on stdio, the
    /// same request sent `calls` times in a row, each timed from its write to its
    /// response line, for each store size.
    McpList {
        #[arg(long, value_delimiter = ',', default_values_t = [10usize, 1_000])]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 200)]
        calls: usize,
    },
    /// `PRAGMA quick_check` (what `loops daemon run` runs before taking the store, and
    /// `integrity_check`, what `loops doctor` runs) over N loops and M finished runs.
    QuickCheck {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Bytes of stdout stored with each run.
        #[arg(long, default_value_t = 200)]
        output_bytes: usize,
        /// Timed repetitions of each check.
        #[arg(long, default_value_t = 10)]
        reps: usize,
    },
    /// `loops backup FILE` (the online backup API, through the CLI) over N loops and M
    /// finished runs: time and size of the copy, and `loops restore` of it.
    Backup {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Bytes of stdout stored with each run.
        #[arg(long, default_value_t = 200)]
        output_bytes: usize,
        /// Timed backups (and restores).
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// `loops health` (JSON and table) over N loops and M finished runs, all inside
    /// the last day's window.
    Health {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Each loop's interval, in milliseconds (default 15 minutes: 100 runs ≈ 25 h).
        #[arg(long, default_value_t = 900_000)]
        every_ms: u64,
        /// Timed invocations of each command.
        #[arg(long, default_value_t = 30)]
        reps: usize,
    },
    /// `loops top`'s refresh cost: its data read from scratch, `top --once --json`, and
    /// each poll of the event log (idle, k `loop.changed` events, a run's events).
    Top {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Each loop's interval, in milliseconds (default 15 minutes: 100 runs ≈ 25 h).
        #[arg(long, default_value_t = 900_000)]
        every_ms: u64,
        /// Timed repetitions of each measurement.
        #[arg(long, default_value_t = 30)]
        reps: usize,
    },
    /// What reading an agent run's ending costs: `providers::interpret` (output parsed,
    /// failure classified) over the real CLIs' captured outputs (issue #20).
    Classify {
        #[arg(long, default_value_t = 20_000)]
        reps: usize,
    },
    /// `daemon restart` with N runs in flight: the command's wall clock, and the time
    /// until the new daemon holds every run again (issue #18).
    Reattach {
        #[arg(long, default_value_t = 100)]
        runs: usize,
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// The web dashboard's overview (`GET /` of `loops serve`) over N loops and M
    /// finished runs: server time, HTML size, and first contentful paint in headless
    /// Chromium (needs node, chromium and tests/browser's `npm ci`).
    Dashboard {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Each loop's interval, in milliseconds (default 15 minutes).
        #[arg(long, default_value_t = 900_000)]
        every_ms: u64,
        /// Timed requests.
        #[arg(long, default_value_t = 30)]
        reps: usize,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let bin = match cli.loops_bin {
        Some(path) => path,
        None => default_loops_bin(),
    };
    ensure!(
        bin.is_file(),
        "loops binary not found at {} (run `cargo build --release -p loops` or pass --loops-bin)",
        bin.display()
    );
    let bench = Bencher {
        bin,
        keep_dirs: cli.keep_dirs,
    };
    println!("1-min load average at start: {}\n", loadavg());
    let result = match cli.bench {
        Bench::CliList { sizes, runs } => bench.cli_list(&sizes, runs),
        Bench::CliCreate { existing, calls } => bench.cli_create(existing, calls),
        Bench::Dispatch {
            loops,
            secs,
            max_concurrent,
            aligned,
            shell,
            stamp,
            daemon_args,
        } => {
            let exec = if stamp {
                Exec::Stamp
            } else {
                Exec::pick(shell)
            };
            bench.dispatch(loops, secs, max_concurrent, aligned, exec, &daemon_args)
        }
        Bench::Throughput {
            loops,
            max_concurrent,
            shell,
            timeout_secs,
        } => bench.throughput(loops, max_concurrent, shell, timeout_secs),
        Bench::PgWake {
            samples,
            via,
            store,
        } => bench.pg_wake(samples, &via, store),
        Bench::PgDispatch {
            loops,
            secs,
            runners,
            max_concurrent,
            store,
            shell,
        } => bench.pg_dispatch(
            loops,
            secs,
            runners,
            max_concurrent,
            store,
            Exec::pick(shell),
        ),
        Bench::Rss { loops, idle_secs } => bench.rss(loops, idle_secs),
        Bench::TickCost {
            loops,
            due,
            runs,
            history,
        } => bench.tick_cost(loops, due, runs, history),
        Bench::Soak {
            loops,
            secs,
            sample_every,
            keep_runs,
            prune_every,
        } => bench.soak(loops, secs, sample_every, keep_runs, &prune_every),
        Bench::QuickCheck {
            loops,
            runs,
            output_bytes,
            reps,
        } => bench.quick_check(loops, runs, output_bytes, reps),
        Bench::Backup {
            loops,
            runs,
            output_bytes,
            reps,
        } => bench.backup(loops, runs, output_bytes, reps),
        Bench::CliEdit {
            loops,
            runs,
            failed_every,
            days,
            calls,
        } => bench.cli_edit(loops, runs, failed_every, days, calls),
        Bench::HttpGet {
            loops,
            secs,
            connections,
        } => bench.http_get(loops, secs, connections),
        Bench::HttpEvents {
            loops,
            clients,
            secs,
            max_concurrent,
        } => bench.http_events(loops, clients, secs, max_concurrent),
        Bench::McpList { sizes, calls } => bench.mcp_list(&sizes, calls),
        Bench::Health {
            loops,
            runs,
            every_ms,
            reps,
        } => bench.health(loops, runs, every_ms, reps),
        Bench::Dashboard {
            loops,
            runs,
            every_ms,
            reps,
        } => bench.dashboard(loops, runs, every_ms, reps),
        Bench::Top {
            loops,
            runs,
            every_ms,
            reps,
        } => bench.top(loops, runs, every_ms, reps),
        Bench::Reattach { runs, reps } => bench.reattach(runs, reps),
        Bench::Classify { reps } => bench.classify(reps),
    };
    println!("\n1-min load average at end: {}", loadavg());
    result
}

fn default_loops_bin() -> PathBuf {
    let in_workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/loops");
    match in_workspace.canonicalize() {
        Ok(path) => path,
        Err(_) => PathBuf::from("target/release/loops"),
    }
}

/// Timings of one scheduling pass and its queries.
struct PassCost {
    due_loops: Stats,
    expire: Stats,
    running: Stats,
    next_due: Stats,
    tick: Stats,
    cli: Stats,
}

/// Adds `count` finished (succeeded) ad-hoc runs spread over the first `loops` due
/// loops, through the store's own claim and finalize calls. Returns the time taken.
fn add_history(db: &Path, loops: usize, count: usize) -> Result<Duration> {
    let store = SqliteStore::open(db)?;
    let targets: Vec<_> = store
        .due_loops(Utc::now(), loops)?
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    ensure!(!targets.is_empty(), "no loops to attach runs to");
    let origin = chrono::DateTime::from_timestamp_millis(1_577_836_800_000).unwrap_or_default();
    let start = Mono::now();
    for i in 0..count {
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
        let mut outcome = RunOutcome::new(RunStatus::Succeeded, now);
        outcome.exit_code = Some(0);
        let finish = RunWrite::Finished {
            run: run.id,
            outcome,
        };
        store.record_run_writes(&[finish], now, None)?.remove(0)?;
    }
    Ok(start.elapsed())
}

/// Adds `count` finished ad-hoc runs over every loop of the store, created at instants
/// spread evenly over the last `days` days (every `failed_every`th failed, the rest
/// succeeded), in batches of 1,000 claims and 1,000 finalizations. Returns the time
/// taken.
fn add_spread_history(db: &Path, count: usize, failed_every: usize, days: u32) -> Result<Duration> {
    const BATCH: usize = 1_000;
    let store = SqliteStore::open(db)?;
    let targets = store.list_loops(None)?;
    ensure!(!targets.is_empty(), "no loops to attach runs to");
    let end = Utc::now();
    let span_ms = i64::from(days) * 86_400_000;
    let origin = chrono::DateTime::from_timestamp_millis(1_577_836_800_000).unwrap_or_default();
    let start = Mono::now();
    let mut i = 0;
    while i < count {
        let n = BATCH.min(count - i);
        let at = |k: usize| {
            let k = i64::try_from(k).unwrap_or(i64::MAX);
            let total = i64::try_from(count).unwrap_or(i64::MAX).max(1);
            end - TimeDelta::milliseconds(span_ms - span_ms * k / total)
        };
        let claims: Vec<BatchClaim> = (i..i + n)
            .map(|k| BatchClaim {
                caps: Default::default(),
                request: ClaimRequest {
                    loop_id: targets[k % targets.len()].id.clone(),
                    scheduled_for: origin + millis(k),
                    runner_id: "loops-bench".into(),
                    source: RunSource::AdHoc,
                    now: at(k),
                    require_no_running: false,
                },
                advance: None,
                on_refusal: OnRefusal::Keep,
            })
            .collect();
        let mut writes = Vec::with_capacity(n);
        for (k, outcome) in (i..).zip(store.claim_runs(&claims, None)?) {
            let ClaimOutcome::Claimed(run) = outcome else {
                bail!("history claim refused: {outcome:?}");
            };
            let failed = k % failed_every == 0;
            let status = if failed {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            };
            let mut outcome = RunOutcome::new(status, at(k) + TimeDelta::milliseconds(50));
            outcome.exit_code = Some(i32::from(failed));
            writes.push(RunWrite::Finished {
                run: run.id,
                outcome,
            });
        }
        for written in store.record_run_writes(&writes, end, None)? {
            written?;
        }
        i += n;
    }
    Ok(start.elapsed())
}

// ---------------------------------------------------------------------------------
// The benchmarks
// ---------------------------------------------------------------------------------

impl Bencher {
    /// Benchmark 9: the daemon's start-up `quick_check` (and doctor's `integrity_check`)
    /// over a store of `loops` loops and `runs` finished runs; page cache warm.
    fn quick_check(
        &self,
        loops: usize,
        runs: usize,
        output_bytes: usize,
        reps: usize,
    ) -> Result<()> {
        let dir = self.fresh_dir()?;
        seed_history(&dir, loops, runs, output_bytes)?;
        let mut quick = Vec::with_capacity(reps);
        let mut integrity = Vec::with_capacity(reps);
        for _ in 0..reps {
            let store = SqliteStore::open(&dir.db())?;
            let t = Mono::now();
            let problems = store.quick_check()?;
            quick.push(ms(t.elapsed()));
            ensure!(problems == ["ok"], "quick_check: {problems:?}");
            let t = Mono::now();
            let problems = store.integrity_check()?;
            integrity.push(ms(t.elapsed()));
            ensure!(problems == ["ok"], "integrity_check: {problems:?}");
        }
        let (quick, integrity) = (Stats::of(quick), Stats::of(integrity));
        println!("| loops | finished runs | stdout bytes/run | db MB | `quick_check` median ms | p90 | max | `integrity_check` median ms | p90 | max |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {loops} | {runs} | {output_bytes} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            file_len(&dir.db()) as f64 / 1e6,
            quick.p50,
            quick.p90,
            quick.max,
            integrity.p50,
            integrity.p90,
            integrity.max
        );
        println!();
        println!("({reps} repetitions each, page cache warm: every repetition reads a database the previous one just read.)");
        Ok(())
    }

    /// `loops backup FILE` and `loops restore FILE` over a seeded store: the median
    /// wall clock of each and the copy's size.
    fn backup(&self, loops: usize, runs: usize, output_bytes: usize, reps: usize) -> Result<()> {
        let dir = self.fresh_dir()?;
        seed_history(&dir, loops, runs, output_bytes)?;
        let data = dir.data();
        let copies = data.join("bench-copies");
        std::fs::create_dir_all(&copies)?;
        let mut backup = Vec::with_capacity(reps);
        let mut restore = Vec::with_capacity(reps);
        let mut size = 0;
        for i in 0..reps {
            let file = copies.join(format!("copy-{i}.db"));
            let path = file.to_string_lossy().into_owned();
            backup.push(ms(self.time_cli(&data, &["backup", &path])?));
            size = file_len(&file);
            restore.push(ms(self.time_cli(&data, &["restore", &path])?));
        }
        let (backup, restore) = (Stats::of(backup), Stats::of(restore));
        println!("| loops | finished runs | stdout bytes/run | db MB | backup MB | `loops backup` median ms | p90 | max | `loops restore` median ms | p90 | max |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {loops} | {runs} | {output_bytes} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            file_len(&dir.db()) as f64 / 1e6,
            size as f64 / 1e6,
            backup.p50,
            backup.p90,
            backup.max,
            restore.p50,
            restore.p90,
            restore.max
        );
        println!();
        println!("({reps} repetitions, wall clock of the CLI process; each restore also keeps the store it replaces as a before-restore backup, so it copies twice.)");
        Ok(())
    }

    /// Benchmark 1: `loops --json list` over 1k and 10k loops, with no daemon and with an idle
    /// daemon holding the store open.
    fn cli_list(&self, sizes: &[usize], runs: usize) -> Result<()> {
        let floor = {
            let dir = self.fresh_dir()?;
            self.time_cli_n(&dir.data(), &["--version"], runs)?
        };
        println!(
            "process floor: `loops --version` median {:.2} ms, p90 {:.2} ms ({runs} runs)\n",
            floor.p50, floor.p90
        );
        println!("| loops | daemon | `--json list` median ms | p90 ms | max ms | `list` (table) median ms | p90 ms | JSON bytes | in-process open ms | list ms | serialize to memory ms | serialize via LineWriter ms | target ≤ 15 ms @1k |");
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for &n in sizes {
            let dir = self.fresh_dir()?;
            let data = dir.data();
            let client = Client::open(&data)?;
            let now = Utc::now();
            let (_, setup) = populate(&client, n, "bench", Exec::ShTrue, |_| {
                (every(3_600_000), now)
            })?;
            drop(client);
            eprintln!("populated {n} loops in {:.1} s", setup.as_secs_f64());
            let bytes = Command::new(&self.bin)
                .args(["--json", "list"])
                .env("LOOPS_DATA_DIR", &data)
                .output()?
                .stdout
                .len();
            // The same work in-process, split into its steps.
            let (mut open, mut list, mut ser, mut line) = (vec![], vec![], vec![], vec![]);
            for _ in 0..runs {
                let t = Mono::now();
                let client = Client::open(&data)?;
                open.push(ms(t.elapsed()));
                let t = Mono::now();
                let loops = client.list(None)?;
                list.push(ms(t.elapsed()));
                let t = Mono::now();
                let text = serde_json::to_vec_pretty(&loops)?;
                ser.push(ms(t.elapsed()));
                std::hint::black_box(text);
                // What `print_json` does: pretty JSON straight into a line-buffered
                // stdout, one write(2) per line (here /dev/null through a LineWriter).
                let devnull = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
                let t = Mono::now();
                let mut out = std::io::LineWriter::new(devnull);
                serde_json::to_writer_pretty(&mut out, &loops)?;
                out.flush()?;
                line.push(ms(t.elapsed()));
            }
            let (open, list, ser, line) = (
                Stats::of(open),
                Stats::of(list),
                Stats::of(ser),
                Stats::of(line),
            );
            for with_daemon in [false, true] {
                let mut daemon = if with_daemon {
                    Some(self.start_daemon(&dir, "daemon.log", &[])?)
                } else {
                    None
                };
                // Warm the page cache and the binary.
                for _ in 0..3 {
                    self.time_cli(&data, &["--json", "list"])?;
                }
                let json = self.time_cli_n(&data, &["--json", "list"], runs)?;
                let table = self.time_cli_n(&data, &["list"], runs)?;
                if let Some(d) = daemon.as_mut() {
                    d.stop()?;
                }
                let target = if n == 1_000 {
                    format!("{} ({:.2} ms)", verdict(json.p50 <= 15.0), json.p50)
                } else {
                    "—".into()
                };
                println!(
                    "| {n} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {bytes} | {:.2} | {:.2} | {:.2} | {:.2} | {target} |",
                    if with_daemon { "running" } else { "none" },
                    json.p50,
                    json.p90,
                    json.max,
                    table.p50,
                    table.p90,
                    open.p50,
                    list.p50,
                    ser.p50,
                    line.p50,
                );
                flush();
            }
        }
        Ok(())
    }

    /// Benchmark 2: `loops create command …` into a store of 1k loops, with no daemon (the CLI
    /// is the last connection and checkpoints the WAL on exit) and with an idle daemon.
    fn cli_create(&self, existing: usize, calls: usize) -> Result<()> {
        println!("| store | daemon | calls | `loops create` median ms | p90 ms | max ms | `loops --version` median ms | in-process `Client::open` median ms | in-process `Client::create` median ms | target ≤ 10 ms |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for with_daemon in [false, true] {
            let dir = self.fresh_dir()?;
            let data = dir.data();
            let client = Client::open(&data)?;
            let now = Utc::now();
            populate(&client, existing, "existing", Exec::ShTrue, |_| {
                (every(3_600_000), now)
            })?;
            drop(client);
            let mut daemon = if with_daemon {
                Some(self.start_daemon(&dir, "daemon.log", &[])?)
            } else {
                None
            };
            let floor = self.time_cli_n(&data, &["--version"], 30)?;
            let mut samples = Vec::with_capacity(calls);
            for i in 0..calls {
                let name = format!("bench-{i}");
                let args = ["create", "command", &name, "--every", "1m", "--cmd", "true"];
                samples.push(ms(self.time_cli(&data, &args)?));
            }
            let cli = Stats::of(samples);
            // The library calls alone, for comparison.
            let mut opens = Vec::with_capacity(calls);
            let mut lib = Vec::with_capacity(calls);
            for i in 0..calls {
                let t = Mono::now();
                let client = Client::open(&data)?;
                opens.push(ms(t.elapsed()));
                let def = command_def(format!("lib-{i}"), every(60_000), Exec::ShTrue);
                let t = Mono::now();
                client.create(def, Utc::now())?;
                lib.push(ms(t.elapsed()));
            }
            if let Some(d) = daemon.as_mut() {
                d.stop()?;
            }
            let (opens, lib) = (Stats::of(opens), Stats::of(lib));
            println!(
                "| {existing} loops | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {} ({:.2} ms) |",
                if with_daemon { "running" } else { "none" },
                cli.n,
                cli.p50,
                cli.p90,
                cli.max,
                floor.p50,
                opens.p50,
                lib.p50,
                verdict(cli.p50 <= 10.0),
                cli.p50
            );
            flush();
        }
        Ok(())
    }

    /// Benchmark 10 (issue #11): `loops edit` (a description, then a new schedule) and
    /// `loops runs --status failed --since 1d` against `loops` loops and `runs` finished
    /// runs created over the last `days` days, every `failed_every`th of them failed.
    fn cli_edit(
        &self,
        loops: usize,
        runs: usize,
        failed_every: usize,
        days: u32,
        calls: usize,
    ) -> Result<()> {
        let dir = self.fresh_dir()?;
        let data = dir.data();
        let client = Client::open(&data)?;
        let now = Utc::now();
        let (_, setup) = populate(&client, loops, "edit", Exec::True, |_| {
            (every(3_600_000), now)
        })?;
        drop(client);
        eprintln!("{loops} loops created in {:.1} s", setup.as_secs_f64());
        let took = add_spread_history(&dir.db(), runs, failed_every.max(1), days)?;
        eprintln!(
            "{runs} finished runs over {days} days added in {:.1} s, db {:.1} MB",
            took.as_secs_f64(),
            file_len(&dir.db()) as f64 / 1e6
        );
        let store = SqliteStore::open(&dir.db())?;
        let filter = RunFilter {
            statuses: vec![RunStatus::Failed],
            since: Some(Utc::now() - TimeDelta::days(1)),
            limit: Some(20),
            ..RunFilter::default()
        };
        let matching = store
            .list_runs(&RunFilter {
                limit: None,
                ..filter.clone()
            })?
            .len();
        println!(
            "query plan of `runs --status failed --since 1d`: {}\n",
            store.runs_query_plan(&filter)?.join(" | ")
        );
        drop(store);
        println!("| command | calls | median ms | p90 ms | p99 ms | max ms | target | verdict |");
        println!("|---|---:|---:|---:|---:|---:|---|---|");
        let row = |what: &str, st: &Stats, target: Option<f64>| {
            let (t, v) = match target {
                Some(t) => (format!("≤ {t} ms"), verdict(st.p50 <= t).to_owned()),
                None => ("–".to_owned(), "–".to_owned()),
            };
            println!(
                "| {what} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {t} | {v} |",
                st.n, st.p50, st.p90, st.p99, st.max
            );
            flush();
        };
        let floor = self.time_cli_n(&data, &["--version"], calls)?;
        row("`loops --version` (process floor)", &floor, None);
        let name = |i: usize| format!("edit-{}", i % loops.max(1));
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls {
            let (n, d) = (name(i), format!("edited {i}"));
            samples.push(ms(self.time_cli(&data, &["edit", &n, "-d", &d])?));
        }
        row(
            "`loops edit edit-N -d TEXT`",
            &Stats::of(samples),
            Some(15.0),
        );
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls {
            let (n, e) = (name(i), if i % 2 == 0 { "2h" } else { "3h" });
            samples.push(ms(self.time_cli(&data, &["edit", &n, "--every", e])?));
        }
        row(
            "`loops edit edit-N --every 2h` (replanned)",
            &Stats::of(samples),
            Some(15.0),
        );
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls {
            let (n, d) = (name(i), format!("json {i}"));
            samples.push(ms(self.time_cli(&data, &["--json", "edit", &n, "-d", &d])?));
        }
        row(
            "`loops --json edit edit-N -d TEXT`",
            &Stats::of(samples),
            Some(15.0),
        );
        let args = ["runs", "--status", "failed", "--since", "1d"];
        row(
            "`loops runs --status failed --since 1d` (20 shown)",
            &self.time_cli_n(&data, &args, calls)?,
            Some(20.0),
        );
        let args = ["--json", "runs", "--status", "failed", "--since", "1d"];
        row(
            "`loops --json runs --status failed --since 1d`",
            &self.time_cli_n(&data, &args, calls)?,
            Some(20.0),
        );
        let args = [
            "--json", "runs", "--status", "failed", "--since", "1d", "--limit", "0",
        ];
        row(
            &format!("`… --limit 0` (all {matching} matching)"),
            &self.time_cli_n(&data, &args, calls)?,
            None,
        );
        let args = ["runs", "edit-7", "--status", "failed", "--since", "1d"];
        row(
            "`loops runs edit-7 --status failed --since 1d`",
            &self.time_cli_n(&data, &args, calls)?,
            None,
        );
        Ok(())
    }

    /// MCP `tools/call loops_list` round trips against a `loops mcp` child, per store
    /// size: the session is initialized once; each call is the time from writing the
    /// request line to reading its response line (the server's parse, the store read,
    /// the JSON encoding and both pipes).
    fn mcp_list(&self, sizes: &[usize], calls: usize) -> Result<()> {
        use std::io::{BufRead, BufReader};
        println!(
            "| loops stored | calls | median ms | p90 ms | p99 ms | max ms | response bytes |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for &n in sizes {
            let dir = self.fresh_dir()?;
            let data = dir.data();
            let client = Client::open(&data)?;
            let now = Utc::now();
            populate(&client, n, "mcp", Exec::True, |_| (every(3_600_000), now))?;
            drop(client);
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

    /// Benchmark 3: Dispatch lag with N loops every 1 s.
    fn dispatch(
        &self,
        n: usize,
        secs: u64,
        max_concurrent: usize,
        aligned: bool,
        exec: Exec,
        daemon_args: &[String],
    ) -> Result<()> {
        ensure!(n > 0 && secs >= 6, "need at least one loop and --secs >= 6");
        let dir = self.fresh_dir()?;
        let client = Client::open(&dir.data())?;
        let period = 1_000usize;
        // Creation instants in the near future, so no slot is missed before the daemon
        // is up; spread evenly over one period unless --aligned.
        let base = whole_ms(Utc::now() + TimeDelta::seconds(2));
        let (first_slots, setup) = populate(&client, n, "tick", exec, |i| {
            let offset = if aligned { 0 } else { i * period / n };
            (every(1_000), base + millis(offset))
        })?;
        drop(client);
        eprintln!(
            "created {n} loops in {:.2} s; first slots from {}",
            setup.as_secs_f64(),
            base + TimeDelta::seconds(1)
        );
        let mc = max_concurrent.to_string();
        let mut args = vec![
            "--max-concurrent",
            &mc,
            "--keep-runs",
            "0",
            "--keep-for",
            "0",
        ];
        args.extend(daemon_args.iter().map(String::as_str));
        let mut daemon = self.start_daemon(&dir, "daemon.log", &args)?;
        let tck = clock_ticks_per_sec();
        let (cpu0, sup0) = (daemon.cpu()?, daemon.supervisor_cpu());
        sleep(Duration::from_secs(secs));
        let (cpu1, sup1) = (daemon.cpu()?, daemon.supervisor_cpu());
        let (rss, hwm) = daemon.rss_kb()?;
        let stopped_at = Utc::now();
        let shutdown = daemon.stop()?;
        let (cpu_own, cpu_children) = cpu1.since_ms(&cpu0, tck);
        let (sup_own, sup_children) = sup1.since_ms(&sup0, tck);
        let cpu_children = cpu_children + sup_children;

        let runs = all_runs(&dir.db())?;
        // Measure only slots well inside the daemon's lifetime.
        let ws = daemon.ready_at.max(base + TimeDelta::seconds(1)) + TimeDelta::seconds(2);
        let we = stopped_at - TimeDelta::seconds(2);
        let window_s = delta_ms(we - ws) / 1_000.0;
        let in_window = |r: &&Run| r.scheduled_for >= ws && r.scheduled_for <= we;
        let mut claim_lag = vec![];
        let mut finish_lag = vec![];
        let mut spawn_lag = vec![];
        let mut skipped = 0usize;
        let mut not_ok = 0usize;
        let mut executed = 0usize;
        let mut slots: HashMap<&str, BTreeSet<Instant>> = HashMap::new();
        let mut off_grid = 0usize;
        for r in runs.iter().filter(in_window) {
            let id = r.loop_id.as_str();
            if let Some(Some(first)) = first_slots.get(id) {
                if (r.scheduled_for - *first).num_milliseconds() % 1_000 != 0 {
                    off_grid += 1;
                }
            }
            slots.entry(id).or_default().insert(r.scheduled_for);
            match r.status {
                RunStatus::Skipped => skipped += 1,
                status => {
                    executed += 1;
                    if status != RunStatus::Succeeded {
                        not_ok += 1;
                    }
                    if let Some(started) = r.started_at {
                        claim_lag.push(delta_ms(started - r.scheduled_for));
                    }
                    if let Some(finished) = r.finished_at {
                        finish_lag.push(delta_ms(finished - r.scheduled_for));
                    }
                    if let Some(ran) = r
                        .stdout
                        .as_deref()
                        .and_then(|out| out.trim().parse::<i64>().ok())
                    {
                        let ran = chrono::DateTime::from_timestamp_nanos(ran);
                        spawn_lag.push(delta_ms(ran - r.scheduled_for));
                    }
                }
            }
        }
        // Missed slots: grid points of each loop inside the window without any row.
        let mut expected = 0i64;
        let mut missed = 0i64;
        for (id, first) in &first_slots {
            let Some(first) = first else { continue };
            let k0 = ((ws - *first).num_milliseconds() + 999)
                .div_euclid(1_000)
                .max(0);
            let k1 = (we - *first).num_milliseconds().div_euclid(1_000);
            let want = (k1 - k0 + 1).max(0);
            expected += want;
            let have = slots.get(id.as_str()).map_or(0, |s| {
                s.iter()
                    .filter(|t| (**t - *first).num_milliseconds() % 1_000 == 0)
                    .count()
            });
            missed += want - i64::try_from(have).unwrap_or(0);
        }
        let claim = Stats::of(claim_lag);
        let finish = Stats::of(finish_lag);
        let spawn = (exec == Exec::Stamp).then(|| Stats::of(spawn_lag));
        // Judged on the real spawn lag when it is known, else on the recorded lag.
        let judged = spawn.as_ref().unwrap_or(&claim);
        let target_met = judged.p50 <= 5.0 && judged.p99 <= 50.0 && missed == 0 && skipped == 0;
        let phase = if aligned { "aligned" } else { "spread" };

        println!(
            "daemon: startup {:.1} ms, shutdown {:.0} ms, window {window_s:.1} s ({} .. {}), {} runs in the store",
            daemon.startup_ms(),
            ms(shutdown),
            ws.format("%H:%M:%S%.3f"),
            we.format("%H:%M:%S%.3f"),
            runs.len()
        );
        println!();
        println!("| loops | phases | exec | runs in window | expected slots | runs/s | lag p50 ms | p99 ms | max ms | real spawn lag p50 / p99 / max ms | start→finish p50 ms | p99 ms | max ms | missed slots | skipped | not succeeded | off-grid | daemon CPU | supervisor CPU | daemon CPU per run ms | children CPU | RSS / HWM MB | target p50 ≤ 5, p99 ≤ 50, none missed |");
        println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        println!(
            "| {n} | {phase} | {} | {executed} | {expected} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {missed} | {skipped} | {not_ok} | {off_grid} | {:.0}% | {:.0}% | {:.3} / {:.3} | {:.0}% | {:.1} / {:.1} | {} |",
            exec.label(),
            executed as f64 / window_s,
            claim.p50,
            claim.p99,
            claim.max,
            spawn.as_ref().map_or_else(
                || "—".to_owned(),
                |s| format!("{:.1} / {:.1} / {:.1}", s.p50, s.p99, s.max)
            ),
            finish.p50,
            finish.p99,
            finish.max,
            cpu_own / (secs as f64 * 10.0),
            sup_own / (secs as f64 * 10.0),
            cpu_own / executed.max(1) as f64 * window_s / secs as f64,
            (cpu_own + sup_own) / executed.max(1) as f64 * window_s / secs as f64,
            cpu_children / (secs as f64 * 10.0),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            verdict(target_met),
        );
        println!();
        println!("(lag = startedAt − scheduledFor as recorded by the store; real spawn lag = the instant `date` ran − scheduledFor, with --stamp; start→finish = finishedAt − scheduledFor, an upper bound on the real spawn lag; CPU per run = the daemon's / the daemon's and its supervisors' CPU over the runs of the window, scaled to the whole sample)");
        Ok(())
    }

    /// Benchmark 11b: wake-up latency across runners.
    fn pg_wake(&self, samples: usize, via: &str, store: Option<String>) -> Result<()> {
        let on_runner = match via {
            "resume" => false,
            "on-runner" => true,
            other => anyhow::bail!("--via {other:?}: expected resume or on-runner"),
        };
        let _cluster;
        let url = match store {
            Some(url) => url,
            None => {
                let bin = loops_testkit::find_bin()
                    .context("PostgreSQL not installed (apt-get install postgresql)")?;
                let cluster = loops_testkit::PgCluster::start(&bin)
                    .map_err(|e| anyhow::anyhow!("cannot start a PostgreSQL cluster: {}", e.0))?;
                let url = cluster.database();
                _cluster = cluster;
                url
            }
        };
        let (here, there) = (self.fresh_dir()?, self.fresh_dir()?);
        let client = Client::open_store(&here.data(), Some(&url))?;
        let mut runner = Daemon::start(
            &self.bin,
            &there.data(),
            &there.log("daemon.log"),
            &[],
            &[("LOOPS_STORE", url.as_str())],
        )?;
        // Let it register and settle into its idle sleep.
        sleep(Duration::from_millis(500));
        let store = Arc::clone(client.store());
        let (mut recorded, mut real) = (vec![], vec![]);
        let mut pending_requests = Vec::new();
        for i in 0..samples {
            let name = format!("wake-{i}");
            let lp = client.create(
                command_def(name.clone(), every(3_600_000), Exec::Stamp),
                Utc::now(),
            )?;
            client.pause(&name, Utc::now())?;
            let committed = if on_runner {
                // A paused loop runs ad hoc, as `run-now --on-runner` asks.
                sleep(Duration::from_millis(100));
                let request = store.request_run(&lp.id, false, "loops-bench", 10_000)?;
                // The request's transaction has committed when the call returns.
                let committed = Utc::now();
                pending_requests.push(request);
                committed
            } else {
                // Overdue by a second, as after a pause past its slot.
                let overdue = LoopAdvance {
                    status: LoopStatus::Paused,
                    next_run_at: Some(Utc::now() - TimeDelta::seconds(1)),
                    retry_scheduled_for: None,
                };
                store.update_loop_schedule(&lp.id, &overdue, Utc::now(), None)?;
                sleep(Duration::from_millis(100));
                client.resume(&name, Utc::now())?;
                // The resume's transaction has committed when the call returns.
                Utc::now()
            };
            let deadline = Mono::now() + Duration::from_secs(10);
            let run = loop {
                let runs = store.list_runs(&loops_store::RunFilter {
                    loop_id: Some(lp.id.clone()),
                    ..Default::default()
                })?;
                if let Some(run) = runs.into_iter().find(|r| r.status == RunStatus::Succeeded) {
                    break run;
                }
                ensure!(
                    Mono::now() < deadline,
                    "the runner did not start {name} within 10 s"
                );
                sleep(Duration::from_millis(2));
            };
            if let Some(started) = run.started_at {
                recorded.push(delta_ms(started - committed));
            }
            if let Some(ran) = run
                .stdout
                .as_deref()
                .and_then(|o| o.trim().parse::<i64>().ok())
            {
                real.push(delta_ms(
                    chrono::DateTime::from_timestamp_nanos(ran) - committed,
                ));
            }
        }
        runner.stop()?;
        for request in pending_requests {
            store.withdraw_run_request(&request)?;
        }
        let (recorded, real) = (Stats::of(recorded), Stats::of(real));
        println!();
        println!("| via | samples | claimed (startedAt) − commit p50 / p99 / max ms | child ran (`date`) − commit p50 / p99 / max ms | target ≤ 5 ms p50, ≤ 20 ms p99 |");
        println!("|---|---:|---|---|---|");
        println!(
            "| {via} | {samples} | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} / {:.1} | {} |",
            recorded.p50,
            recorded.p99,
            recorded.max,
            real.p50,
            real.p99,
            real.max,
            verdict(real.p50 <= 5.0 && real.p99 <= 20.0)
        );
        Ok(())
    }

    /// Benchmark 11: dispatch on PostgreSQL with `runners` daemons sharing the loops.
    fn pg_dispatch(
        &self,
        n: usize,
        secs: u64,
        runners: usize,
        max_concurrent: usize,
        store: Option<String>,
        exec: Exec,
    ) -> Result<()> {
        ensure!(
            n > 0 && secs >= 6 && runners > 0,
            "need loops, runners and --secs >= 6"
        );
        let _cluster;
        let url = match store {
            Some(url) => url,
            None => {
                let bin = loops_testkit::find_bin()
                    .context("PostgreSQL not installed (apt-get install postgresql)")?;
                let cluster = loops_testkit::PgCluster::start(&bin)
                    .map_err(|e| anyhow::anyhow!("cannot start a PostgreSQL cluster: {}", e.0))?;
                let url = cluster.database();
                _cluster = cluster;
                url
            }
        };
        let dirs = (0..runners)
            .map(|_| self.fresh_dir())
            .collect::<Result<Vec<_>>>()?;
        let client = Client::open_store(&dirs[0].data(), Some(&url))?;
        let stats = loops_postgres::PgStore::open(&url)?;
        let base = whole_ms(Utc::now() + TimeDelta::seconds(3));
        let (first_slots, setup) = populate(&client, n, "tick", exec, |i| {
            (every(1_000), base + millis(i * 1_000 / n))
        })?;
        eprintln!("created {n} loops in {:.2} s", setup.as_secs_f64());
        let mc = max_concurrent.to_string();
        let flags = [
            "--max-concurrent",
            &mc,
            "--keep-runs",
            "0",
            "--keep-for",
            "0",
        ];
        let mut daemons = dirs
            .iter()
            .map(|d| {
                Daemon::start(
                    &self.bin,
                    &d.data(),
                    &d.log("daemon.log"),
                    &flags,
                    &[("LOOPS_STORE", url.as_str())],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let tck = clock_ticks_per_sec();
        let cpu0 = daemons
            .iter()
            .map(Daemon::cpu)
            .collect::<Result<Vec<_>>>()?;
        let x0 = stats.transactions()?;
        let measured_from = Utc::now();
        sleep(Duration::from_secs(secs));
        let cpu1 = daemons
            .iter()
            .map(Daemon::cpu)
            .collect::<Result<Vec<_>>>()?;
        let measured_to = Utc::now();
        // The server's statistics are flushed within a second of each transaction.
        sleep(Duration::from_millis(1_500));
        let x1 = stats.transactions()?;
        for d in &mut daemons {
            d.stop()?;
        }
        // Each daemon logs its round trips to the server when it stops.
        let round_trips: u64 = daemons.iter().map(Daemon::round_trips).sum();
        let cpu_ms: f64 = cpu1
            .iter()
            .zip(&cpu0)
            .map(|(b, a)| b.since_ms(a, tck).0)
            .sum();
        let runs = client
            .store()
            .list_runs(&loops_store::RunFilter::default())?;
        let ready = daemons.iter().map(|d| d.ready_at).max().unwrap_or(base);
        let ws = ready.max(base + TimeDelta::seconds(1)) + TimeDelta::seconds(2);
        let we = measured_to - TimeDelta::seconds(2);
        let window_s = delta_ms(we - ws) / 1_000.0;
        let mut lag = vec![];
        let mut slots: HashMap<&str, BTreeSet<Instant>> = HashMap::new();
        let mut by_runner: HashMap<String, usize> = HashMap::new();
        let (mut executed, mut skipped, mut not_ok) = (0usize, 0usize, 0usize);
        let started_in = runs
            .iter()
            .filter(|r| {
                r.started_at
                    .is_some_and(|t| t >= measured_from && t <= measured_to)
            })
            .count();
        for r in runs
            .iter()
            .filter(|r| r.scheduled_for >= ws && r.scheduled_for <= we)
        {
            slots
                .entry(r.loop_id.as_str())
                .or_default()
                .insert(r.scheduled_for);
            if r.status == RunStatus::Skipped {
                skipped += 1;
                continue;
            }
            executed += 1;
            if r.status != RunStatus::Succeeded {
                not_ok += 1;
            }
            if let Some(started) = r.started_at {
                lag.push(delta_ms(started - r.scheduled_for));
            }
            if let Some(by) = &r.claimed_by {
                *by_runner.entry(by.clone()).or_default() += 1;
            }
        }
        let (mut expected, mut missed) = (0i64, 0i64);
        for (id, first) in &first_slots {
            let Some(first) = first else { continue };
            let k0 = ((ws - *first).num_milliseconds() + 999)
                .div_euclid(1_000)
                .max(0);
            let k1 = (we - *first).num_milliseconds().div_euclid(1_000);
            let want = (k1 - k0 + 1).max(0);
            expected += want;
            let have = slots.get(id.as_str()).map_or(0, BTreeSet::len);
            missed += want - i64::try_from(have).unwrap_or(0);
        }
        let lag = Stats::of(lag);
        let mut shares: Vec<usize> = by_runner.values().copied().collect();
        shares.sort_unstable();
        let per_run = |v: f64| v / started_in.max(1) as f64;
        // Round trips are counted over the daemons' whole lives: per run they started.
        let started_ever = runs
            .iter()
            .filter(|r| r.status != RunStatus::Skipped && r.started_at.is_some())
            .count();
        println!();
        println!("| backend | runners | loops | exec | runs in window | expected slots | runs/s | lag p50 ms | p99 ms | max ms | missed slots | skipped | not succeeded | runs per runner | daemon CPU (all runners) | daemon CPU ms per run | DB transactions per run | DB round trips per run |");
        println!(
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
        );
        println!(
            "| postgres | {runners} | {n} | {} | {executed} | {expected} | {:.0} | {:.2} | {:.2} | {:.2} | {missed} | {skipped} | {not_ok} | {shares:?} | {:.0}% | {:.2} | {:.2} | {:.2} |",
            exec.label(),
            executed as f64 / window_s,
            lag.p50,
            lag.p99,
            lag.max,
            cpu_ms / (secs as f64 * 10.0),
            per_run(cpu_ms),
            per_run((x1 - x0) as f64),
            round_trips as f64 / started_ever.max(1) as f64,
        );
        println!();
        println!("(lag = startedAt − scheduledFor as recorded; CPU and transactions per run over the runs started in the {secs} s measured; transactions from pg_stat_database, every client of the database)");
        Ok(())
    }

    /// Benchmark 4: End-to-end runs/s.
    fn throughput(
        &self,
        n: usize,
        max_concurrent: usize,
        shell: bool,
        timeout_secs: u64,
    ) -> Result<()> {
        let dir = self.fresh_dir()?;
        let client = Client::open(&dir.data())?;
        // `dynamic` loops created a day ago: the first slot (one minimum interval after
        // creation) is now, the next one a day after the finish, so each runs exactly
        // once here.
        let created = Utc::now() - TimeDelta::days(1);
        let (_, setup) = populate(&client, n, "burst", Exec::pick(shell), |_| {
            (
                Schedule::Dynamic {
                    min_interval_ms: 86_400_000,
                },
                created,
            )
        })?;
        eprintln!("created {n} due loops in {:.2} s", setup.as_secs_f64());
        let store = Arc::clone(client.store());
        // What every scheduler pass pays while this many loops are due.
        let mut due_query = vec![];
        for _ in 0..10 {
            let t = Mono::now();
            let found = store.due_loops(Utc::now(), 2_048)?;
            due_query.push(ms(t.elapsed()));
            std::hint::black_box(found);
        }
        let due_query = Stats::of(due_query);
        let mc = max_concurrent.to_string();
        let tck = clock_ticks_per_sec();
        let mut daemon = self.start_daemon(
            &dir,
            "daemon.log",
            &[
                "--max-concurrent",
                &mc,
                "--keep-runs",
                "0",
                "--keep-for",
                "0",
            ],
        )?;
        let (cpu0, sup0) = (daemon.cpu()?, daemon.supervisor_cpu());
        // Done when nothing is due (checked first) and then nothing runs.
        loop {
            sleep(Duration::from_millis(50));
            if store.due_loops(Utc::now(), 1)?.is_empty() && store.running_runs(None)?.is_empty() {
                break;
            }
            if daemon.spawned_mono.elapsed() > Duration::from_secs(timeout_secs) {
                bail!("not finished after {timeout_secs} s");
            }
        }
        let observed = daemon.spawned_mono.elapsed();
        let (cpu1, sup1) = (daemon.cpu()?, daemon.supervisor_cpu());
        let (rss, hwm) = daemon.rss_kb()?;
        daemon.stop()?;
        let (cpu_own, cpu_children) = cpu1.since_ms(&cpu0, tck);
        let (sup_own, sup_children) = sup1.since_ms(&sup0, tck);
        let cpu_children = cpu_children + sup_children;
        let runs = all_runs(&dir.db())?;
        let ok = runs
            .iter()
            .filter(|r| r.status == RunStatus::Succeeded)
            .count();
        let first_start = runs.iter().filter_map(|r| r.started_at).min();
        let last_finish = runs.iter().filter_map(|r| r.finished_at).max();
        let (Some(first_start), Some(last_finish)) = (first_start, last_finish) else {
            bail!("no finished runs");
        };
        let e2e_s = delta_ms(last_finish - daemon.spawned_at) / 1_000.0;
        let steady_s = delta_ms(last_finish - first_start) / 1_000.0;
        let rate = runs.len() as f64 / e2e_s;
        let durations = Stats::of(
            runs.iter()
                .filter_map(|r| r.duration_ms)
                .map(|d| d as f64)
                .collect(),
        );
        println!("| loops | exec | --max-concurrent | runs | succeeded | daemon start → last finalized s | runs/s end to end | first claim → last finalized s | runs/s steady | durationMs p50 / p99 | daemon CPU s | supervisor CPU s | children CPU s | RSS / HWM MB | target ≥ 1,000 runs/s |");
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        println!(
            "| {n} | {} | {max_concurrent} | {} | {ok} | {e2e_s:.2} | {rate:.0} | {steady_s:.2} | {:.0} | {:.0} / {:.0} | {:.2} | {:.2} | {:.2} | {:.1} / {:.1} | {} |",
            if shell { "sh -c true" } else { "exec true" },
            runs.len(),
            runs.len() as f64 / steady_s,
            durations.p50,
            durations.p99,
            cpu_own / 1_000.0,
            sup_own / 1_000.0,
            cpu_children / 1_000.0,
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            verdict(rate >= 1_000.0 && ok == n),
        );
        println!();
        println!(
            "(completion observed by polling after {:.2} s; the figures use the recorded finishedAt; `due_loops(now, 2048)` with {n} loops due: median {:.2} ms)",
            observed.as_secs_f64(),
            due_query.p50
        );
        Ok(())
    }

    /// Benchmark 5: Daemon RSS and idle CPU.
    fn rss(&self, n: usize, idle_secs: u64) -> Result<()> {
        let tck = clock_ticks_per_sec();
        println!("| loops defined | settle s | VmRSS MB | VmHWM MB | idle CPU ms per {idle_secs} s | context switches per {idle_secs} s | target |");
        println!("|---:|---:|---:|---:|---:|---:|---|");
        for (loops, settle) in [(0usize, 3u64), (n, 5)] {
            let dir = self.fresh_dir()?;
            let client = Client::open(&dir.data())?;
            let now = Utc::now();
            let yearly = Schedule::Cron {
                expression: "0 0 1 1 *".into(),
                timezone: "UTC".into(),
            };
            let (_, setup) = populate(&client, loops, "idle", Exec::ShTrue, |_| {
                (yearly.clone(), now)
            })?;
            drop(client);
            if loops > 0 {
                eprintln!("created {loops} loops in {:.1} s", setup.as_secs_f64());
            }
            let mut daemon = self.start_daemon(&dir, "daemon.log", &[])?;
            sleep(Duration::from_secs(settle));
            let (rss, hwm) = daemon.rss_kb()?;
            let cpu0 = daemon.cpu()?;
            let switches0 = daemon.context_switches()?;
            sleep(Duration::from_secs(idle_secs));
            let cpu1 = daemon.cpu()?;
            let wakeups = daemon.context_switches()?.saturating_sub(switches0);
            daemon.stop()?;
            let (cpu, _) = cpu1.since_ms(&cpu0, tck);
            let mb = rss as f64 / 1024.0;
            let limit = if loops == 0 { 20.0 } else { 40.0 };
            println!(
                "| {loops} | {settle} | {mb:.1} | {:.1} | {cpu:.0} | {wakeups} | ≤ {limit:.0} MB, CPU ≈ 0: {} |",
                hwm as f64 / 1024.0,
                verdict(mb <= limit && cpu <= 10.0 * idle_secs as f64)
            );
            flush();
        }
        println!();
        println!(
            "(CPU is utime+stime from /proc/PID/stat at {tck} ticks/s, i.e. {:.0} ms resolution)",
            1_000.0 / tck as f64
        );
        Ok(())
    }

    /// Benchmark 6: Scheduling cost of a pass with a few due loops among many loops,
    /// and among many finished runs.
    fn tick_cost(&self, n: usize, due: usize, runs: usize, history: usize) -> Result<()> {
        ensure!(due > 0 && due <= n, "need 0 < --due <= --loops");
        let mut rows = vec![];
        for total in [due, n] {
            let dir = self.fresh_dir()?;
            let client = Client::open(&dir.data())?;
            let now = Utc::now();
            // `due` loops that are due again 1 ms after each finish; the rest daily,
            // first slot a day from now.
            let (_, setup) = populate(&client, total, "cost", Exec::True, |i| {
                if i < due {
                    (Schedule::Dynamic { min_interval_ms: 1 }, now)
                } else {
                    (every(86_400_000), now)
                }
            })?;
            drop(client);
            eprintln!(
                "{total} loops created in {:.1} s ({:.0} loops/s), db {:.1} MB",
                setup.as_secs_f64(),
                total as f64 / setup.as_secs_f64(),
                file_len(&dir.db()) as f64 / 1e6
            );
            rows.push((total, 0, self.measure_pass(&dir, due, runs)?));
            if total == n && history > 0 {
                let setup = add_history(&dir.db(), due, history)?;
                eprintln!(
                    "{history} finished runs added in {:.1} s, db {:.1} MB",
                    setup.as_secs_f64(),
                    file_len(&dir.db()) as f64 / 1e6
                );
                rows.push((total, history, self.measure_pass(&dir, due, runs)?));
            }
        }
        println!("| loops stored | finished runs stored | due | `due_loops` median ms | `expire_loops` median ms | `running_runs` median ms | `next_due_at` median ms | `Engine::tick` median ms | p90 ms | `loops tick` median ms | p90 ms | target ≤ 5 ms |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for (total, hist, m) in &rows {
            println!(
                "| {total} | {hist} | {due} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                m.due_loops.p50,
                m.expire.p50,
                m.running.p50,
                m.next_due.p50,
                m.tick.p50,
                m.tick.p90,
                m.cli.p50,
                m.cli.p90,
                if *total == due {
                    "baseline".to_owned()
                } else {
                    format!("{} ({:.2} ms)", verdict(m.tick.p50 <= 5.0), m.tick.p50)
                }
            );
        }
        println!();
        println!("(`Engine::tick` = one in-process pass: recover, expire, due query, {due} claims with their loop advance, task spawn; the runs execute afterwards, untimed. `loops tick` = the CLI end to end, including running {due} × `true`.)");
        Ok(())
    }

    /// Times the store queries of a pass, an in-process `Engine::tick` and `loops tick`.
    fn measure_pass(&self, dir: &BenchDir, due: usize, runs: usize) -> Result<PassCost> {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.db())?);
        let (mut q_due, mut q_exp, mut q_run, mut q_next) = (vec![], vec![], vec![], vec![]);
        for _ in 0..runs.max(50) {
            let now = Utc::now();
            let t = Mono::now();
            let found = store.due_loops(now, 2_048)?;
            q_due.push(ms(t.elapsed()));
            ensure!(
                found.len() == due,
                "expected {due} due, found {}",
                found.len()
            );
            let t = Mono::now();
            store.expire_loops(now, None)?;
            q_exp.push(ms(t.elapsed()));
            let t = Mono::now();
            store.running_runs(None)?;
            q_run.push(ms(t.elapsed()));
            let t = Mono::now();
            store.next_due_at()?;
            q_next.push(ms(t.elapsed()));
        }

        // A whole in-process pass: `Engine::tick` claims and advances the due loops and
        // spawns their tasks, which only execute at `drain` (not timed).
        let engine = Engine::new(
            Arc::clone(&store),
            EngineConfig::for_this_process(),
            Arc::new(SystemClock),
        )?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let tick = rt.block_on(async {
            let mut samples = vec![];
            for _ in 0..runs {
                tokio::time::sleep(Duration::from_millis(3)).await;
                let t = Mono::now();
                let report = engine.pass(true)?;
                samples.push(ms(t.elapsed()));
                ensure!(
                    report.claimed.len() == due,
                    "tick claimed {} of {due}",
                    report.claimed.len()
                );
                engine.drain().await;
            }
            Ok(Stats::of(samples))
        })?;
        drop(engine);
        drop(store);

        // `loops tick` wall clock: process + open + pass + running `true` × due.
        let mut cli = vec![];
        for _ in 0..runs {
            sleep(Duration::from_millis(3));
            cli.push(ms(self.time_cli(&dir.data(), &["tick"])?));
        }
        Ok(PassCost {
            due_loops: Stats::of(q_due),
            expire: Stats::of(q_exp),
            running: Stats::of(q_run),
            next_due: Stats::of(q_next),
            tick,
            cli: Stats::of(cli),
        })
    }

    /// Benchmark 7: Soak: bounded store under retention.
    fn soak(
        &self,
        n: usize,
        secs: u64,
        sample_every: u64,
        keep_runs: usize,
        prune_every: &str,
    ) -> Result<()> {
        ensure!(sample_every > 0, "--sample-every must be positive");
        let dir = self.fresh_dir()?;
        let client = Client::open(&dir.data())?;
        let base = whole_ms(Utc::now() + TimeDelta::seconds(2));
        populate(&client, n, "soak", Exec::True, |i| {
            (every(1_000), base + millis(i * 1_000 / n.max(1)))
        })?;
        let store = Arc::clone(client.store());
        let keep = keep_runs.to_string();
        let tck = clock_ticks_per_sec();
        let mut daemon = self.start_daemon(
            &dir,
            "daemon.log",
            &[
                "--max-concurrent",
                "256",
                "--keep-runs",
                &keep,
                "--prune-every",
                prune_every,
            ],
        )?;
        let db = dir.db();
        let wal = dir.data().join(format!("{}-wal", loops_store::DB_FILE));
        let cpu0 = daemon.cpu()?;
        println!("| t s | loops.db KB | -wal KB | total KB | run rows | slots in interval (expected) | recorded lag p99 ms | skipped | daemon RSS MB | daemon CPU % (interval) |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut total_expected = 0usize;
        let mut total_slots = 0usize;
        let mut series: Vec<(u64, u64)> = vec![];
        let mut prev_cpu = cpu0;
        let start = Mono::now();
        let mut next = sample_every;
        while next <= secs {
            let wake = Duration::from_secs(next).saturating_sub(start.elapsed());
            sleep(wake);
            let (d, w) = (file_len(&db), file_len(&wal));
            let listed = store.list_runs(&RunFilter {
                loop_id: None,
                limit: None,
                ..RunFilter::default()
            })?;
            let rows = listed.len();
            // Slots of the last interval, shifted back 1 s so they have run. Retention
            // keeps `keep_runs` per loop, more than one interval's worth.
            let hi = Utc::now() - TimeDelta::seconds(1);
            let lo = hi - TimeDelta::seconds(i64::try_from(sample_every).unwrap_or(10));
            let recent: Vec<&Run> = listed
                .iter()
                .filter(|r| r.scheduled_for > lo && r.scheduled_for <= hi)
                .collect();
            let slots: BTreeSet<(&str, Instant)> = recent
                .iter()
                .map(|r| (r.loop_id.as_str(), r.scheduled_for))
                .collect();
            let skipped = recent
                .iter()
                .filter(|r| r.status == RunStatus::Skipped)
                .count();
            let lag = Stats::of(
                recent
                    .iter()
                    .filter_map(|r| r.started_at.map(|s| delta_ms(s - r.scheduled_for)))
                    .collect(),
            );
            let expected = n * usize::try_from(sample_every).unwrap_or(0);
            if next > sample_every {
                total_expected += expected;
                total_slots += slots.len();
            }
            let (rss, _) = daemon.rss_kb()?;
            let cpu = daemon.cpu()?;
            let (own, _) = cpu.since_ms(&prev_cpu, tck);
            prev_cpu = cpu;
            series.push((next, d + w));
            println!(
                "| {next} | {} | {} | {} | {rows} | {} ({expected}) | {:.0} | {skipped} | {:.1} | {:.1} |",
                d / 1024,
                w / 1024,
                (d + w) / 1024,
                slots.len(),
                lag.p99,
                rss as f64 / 1024.0,
                own / (sample_every as f64 * 10.0)
            );
            flush();
            next += sample_every;
        }
        let cpu_end = daemon.cpu()?;
        daemon.stop()?;
        let (own, children) = cpu_end.since_ms(&cpu0, tck);
        let runs = all_runs(&db)?;
        let sizes: Vec<u64> = series.iter().map(|(_, s)| *s).collect();
        let min = sizes.iter().copied().min().unwrap_or(0);
        let max = sizes.iter().copied().max().unwrap_or(0);
        let half = sizes.len() / 2;
        let first_half = sizes[..half].iter().copied().max().unwrap_or(0);
        let second_half = sizes[half..].iter().copied().max().unwrap_or(0);
        let plateau = second_half as f64 <= first_half as f64 * 1.10;
        let failed = runs
            .iter()
            .filter(|r| !matches!(r.status, RunStatus::Succeeded | RunStatus::Running))
            .count();
        println!();
        println!("| loops | secs | keep-runs | prune-every | size min KB | size max KB | max 1st half KB | max 2nd half KB | rows at end | not succeeded at end | slots run / expected (after the first interval) | daemon CPU % | children CPU % | plateau (2nd-half max ≤ 1.1 × 1st-half max) |");
        println!("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        println!(
            "| {n} | {secs} | {keep_runs} | {prune_every} | {} | {} | {} | {} | {} | {failed} | {total_slots} / {total_expected} | {:.1} | {:.1} | {} |",
            min / 1024,
            max / 1024,
            first_half / 1024,
            second_half / 1024,
            runs.len(),
            own / (secs as f64 * 10.0),
            children / (secs as f64 * 10.0),
            verdict(plateau)
        );
        Ok(())
    }
}
