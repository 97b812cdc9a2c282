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
//! cargo run --release -p loops-bench -- pg-dispatch            # dispatch lag on PostgreSQL (throwaway cluster)
//! cargo run --release -p loops-bench -- pg-wake                # an idle runner woken across hosts
//! cargo run --release -p loops-bench -- pg-wake --load 1000    # the same runner running 1k loops/s meanwhile
//! cargo run --release -p loops-bench -- throughput             # 5k due runs end to end
//! cargo run --release -p loops-bench -- saturation             # 2k loops/s: runs/s as a share of xargs -P2
//! cargo run --release -p loops-bench -- rss                    # daemon RSS and idle CPU
//! cargo run --release -p loops-bench -- clock-back             # start-up re-plan, 100,000 loops ahead
//! cargo run --release -p loops-bench -- tick-cost              # scheduling cost with 100k loops
//! cargo run --release -p loops-bench -- soak --secs 120        # bounded store under retention
//! cargo run --release -p loops-bench -- quick-check            # daemon start-up check, 100k runs
//! cargo run --release -p loops-bench -- backup                 # `loops backup` / `restore`, 100k runs
//! cargo run --release -p loops-bench -- cli-edit               # `loops edit`, `runs --status failed --since 1d`
//! cargo run --release -p loops-bench -- http-get               # `loops serve` request rates (needs `oha`)
//! cargo run --release -p loops-bench -- http-events            # SSE delivery to 100 clients, 1k loops/s
//! cargo run --release -p loops-bench -- mcp-list               # MCP `tools/call loops_list` round trip
//! cargo run --release -p loops-bench -- health                 # `loops health`, 1k loops, 100k runs
//! cargo run --release -p loops-bench -- dashboard              # the web overview, 1k loops, 100k runs
//! cargo run --release -p loops-bench -- history                # 10M runs: pass, runs, health, overview, prune
//! cargo run --release -p loops-bench -- top                    # `loops top`'s refresh, 1k loops, 100k runs
//! cargo run --release -p loops-bench -- classify               # reading an agent run's ending
//! cargo run --release -p loops-bench -- reattach               # `daemon restart` with 100 runs in flight
//! ```
//!
//! The `loops` binary is `target/release/loops` of this workspace unless
//! `--loops-bin PATH` says otherwise. Results and the machine they were taken on are
//! recorded in `BENCHMARKS.md` at the workspace root.
//!
//! Each benchmark is a method of `Bencher` in a module of its own (`cli`,
//! `dispatch`, `pg`, …); what they share — data dirs, timed CLI calls, the daemon
//! child, statistics, seeding — is in `harness`.

mod classify;
mod cli;
mod clock_back;
mod dashboard;
mod dispatch;
mod harness;
mod health;
mod history;
mod http;
mod mcp;
mod pg;
mod retention;
mod rss;
mod saturation;
mod soak;
mod store_file;
mod supervised;
mod throughput;
mod tick_cost;
mod top;

use anyhow::{ensure, Result};
use clap::{Args, Parser, Subcommand};
use harness::{loadavg, Bencher, Exec};
use std::path::{Path, PathBuf};

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
        /// Each loop's interval in milliseconds, phases spread over it: 100,000 loops
        /// every 100,000 ms are 1,000 slots due each second among 100,000 loops.
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
        every_ms: u64,
        /// How long the daemon runs (at least 10 s: the first seconds and the last 2 s
        /// are not measured, and a shorter run leaves no slot to judge).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(10..))]
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
        /// How long the runners run (at least 10 s, as `dispatch`).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(10..))]
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
        /// Loops every 1 s (phases spread, `true`) the runner runs meanwhile: the
        /// wake-up under that load (0: an idle runner).
        #[arg(long, default_value_t = 0)]
        load: usize,
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
    /// Saturation: N loops every 1 s (more than the machine runs), the runs/s the
    /// daemon starts as a share of `seq R | xargs -P2 -n1 sh -c true` timed before
    /// and after it; both sides start `sh -c true`.
    Saturation {
        #[arg(long, default_value_t = 2_000)]
        loops: usize,
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(10..))]
        secs: u64,
        /// Children `xargs` starts for the baseline.
        #[arg(long, default_value_t = 4_000)]
        xargs_runs: usize,
        #[arg(long, default_value_t = 256)]
        max_concurrent: usize,
    },
    /// Daemon RSS and idle CPU with 0 loops and with N loops due far in the future.
    Rss {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        /// Length of the idle CPU sample.
        #[arg(long, default_value_t = 10)]
        idle_secs: u64,
    },
    /// A clock stepped back: N loops whose next slots lie a day ahead and one due now;
    /// the due loop's first run after the daemon's start (its re-plan moves the N back
    /// first), beside the same with none ahead.
    ClockBack {
        #[arg(long, default_value_t = 100_000)]
        loops: usize,
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// On a throwaway PostgreSQL cluster instead of SQLite.
        #[arg(long)]
        postgres: bool,
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
        /// How long each round (without, then with clients) runs (at least 10 s, as
        /// `dispatch`).
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(10..))]
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
    QuickCheck(StoreArgs),
    /// `loops backup FILE` (the online backup API, through the CLI) over N loops and M
    /// finished runs: time and size of the copy, and `loops restore` of it.
    #[command(mut_arg("reps", |a| a.default_value("5").help("Timed backups (and restores)")))]
    Backup(StoreArgs),
    /// `loops health` (JSON and table) over N loops and M finished runs, all inside
    /// the last day's window.
    #[command(mut_arg("reps", |a| a.help("Timed invocations of each command")))]
    Health(HistoryArgs),
    /// A long history: `loops tick`, `runs --limit 50`, `health`, the dashboard's
    /// overview and `prune` over N loops and M finished runs (issue #21).
    #[command(
        mut_arg("runs", |a| a.default_value("10000000")),
        mut_arg("every_ms", |a| a
            .default_value("60000")
            .help("Each loop's interval, in milliseconds (default 1 minute: 10,000 runs ≈ 7 days)")),
        mut_arg("reps", |a| a.default_value("10").help("Timed invocations of each read")),
    )]
    History(HistoryArgs),
    /// The daemon's retention over a long history: the lag of a loop due every 100 ms
    /// while the daemon's first prune ranks every run and deletes a tenth (issue #21).
    Retention {
        #[arg(long, default_value_t = 1_000)]
        loops: usize,
        #[arg(long, default_value_t = 2_000_000)]
        runs: usize,
        /// How long the daemon runs.
        #[arg(long, default_value_t = 40)]
        secs: u64,
    },
    /// `loops top`'s refresh cost: its data read from scratch, `top --once --json`, and
    /// each poll of the event log (idle, k `loop.changed` events, a run's events).
    Top(HistoryArgs),
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
    #[command(mut_arg("every_ms", |a| a.help("Each loop's interval, in milliseconds (default 15 minutes)")))]
    #[command(mut_arg("reps", |a| a.help("Timed requests")))]
    Dashboard(HistoryArgs),
}

/// The flags of the benchmarks over an imported run history (`health`, `history`, `top`,
/// `dashboard`): its size, and how many timed repetitions of each measurement.
#[derive(Debug, Clone, Copy, Args)]
struct HistoryArgs {
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
}

/// The flags of the benchmarks over a seeded store file (`quick-check`, `backup`): its
/// size, and how many timed repetitions.
#[derive(Debug, Clone, Copy, Args)]
struct StoreArgs {
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
            every_ms,
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
            bench.dispatch(
                loops,
                every_ms,
                secs,
                max_concurrent,
                aligned,
                exec,
                &daemon_args,
            )
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
            load,
        } => bench.pg_wake(samples, &via, store, load),
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
        Bench::Saturation {
            loops,
            secs,
            xargs_runs,
            max_concurrent,
        } => bench.saturation(loops, secs, xargs_runs, max_concurrent),
        Bench::Rss { loops, idle_secs } => bench.rss(loops, idle_secs),
        Bench::ClockBack {
            loops,
            rounds,
            postgres,
        } => bench.clock_back(loops, rounds, postgres),
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
        Bench::QuickCheck(args) => bench.quick_check(&args),
        Bench::Backup(args) => bench.backup(&args),
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
        Bench::Health(args) => bench.health(&args),
        Bench::Dashboard(args) => bench.dashboard(&args),
        Bench::History(args) => bench.history(&args),
        Bench::Top(args) => bench.top(&args),
        Bench::Retention { loops, runs, secs } => bench.retention(loops, runs, secs),
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
