//! What every benchmark shares: the `Bencher` (binary under test, fresh data dirs, timed
//! CLI calls), statistics and timing helpers; the daemon in `daemon`, seeding in `seed`.

mod daemon;
mod seed;

pub(crate) use daemon::{keep_every_run, status_kb, CpuTicks, Daemon};
pub(crate) use seed::{
    command_def, every, finish_runs, history_batch_of, import_history, populate, populate_every,
    seed_history, Exec,
};

use crate::HistoryArgs;
use anyhow::{bail, ensure, Context as _, Result};
use chrono::TimeDelta;
use loops_core::{Instant, Run};
use loops_sqlite::SqliteStore;
use loops_store::{RunFilter, Store};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant as Mono};

/// What every benchmark runs against: the `loops` binary under test.
pub(crate) struct Bencher {
    pub(crate) bin: PathBuf,
    /// Keep the temporary data dirs instead of deleting them.
    pub(crate) keep_dirs: bool,
}

/// A fresh temporary directory; the store lives in its `data` subdir.
pub(crate) struct BenchDir {
    tmp: Option<tempfile::TempDir>,
    root: PathBuf,
}

impl BenchDir {
    pub(crate) fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    pub(crate) fn db(&self) -> PathBuf {
        self.data().join(loops_store::DB_FILE)
    }

    pub(crate) fn log(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = tmp.close();
        }
    }
}

impl Bencher {
    pub(crate) fn fresh_dir(&self) -> Result<BenchDir> {
        let tmp = tempfile::Builder::new()
            .prefix("loops-bench-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let root = tmp.path().to_path_buf();
        let tmp = if self.keep_dirs {
            eprintln!("data dir kept: {}", root.display());
            let _ = tmp.keep();
            None
        } else {
            Some(tmp)
        };
        Ok(BenchDir { tmp, root })
    }

    /// Runs `loops ARGS` against `data`, stdout discarded; the wall clock of spawn → exit.
    pub(crate) fn time_cli(&self, data: &Path, args: &[&str]) -> Result<Duration> {
        self.time_cli_accepting(data, args, |status| status.success())
    }

    /// As [`Bencher::time_cli`], with `accept` saying which exit statuses count as success.
    pub(crate) fn time_cli_accepting(
        &self,
        data: &Path,
        args: &[&str],
        accept: impl Fn(std::process::ExitStatus) -> bool,
    ) -> Result<Duration> {
        let (elapsed, out) = self.timed_output(data, args, Stdio::piped())?;
        if !accept(out.status) {
            bail!(
                "`loops {}` failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(elapsed)
    }

    /// Runs `loops ARGS` against `data`; the wall clock of spawn → exit and whether it
    /// succeeded.
    pub(crate) fn time_cli_status(&self, data: &Path, args: &[&str]) -> Result<(f64, bool)> {
        let (elapsed, out) = self.timed_output(data, args, Stdio::null())?;
        Ok((ms(elapsed), out.status.success()))
    }

    /// `loops ARGS` against `data` run to its exit, its stderr to `stderr`: the wall
    /// clock of spawn → exit, and what it left.
    fn timed_output(
        &self,
        data: &Path,
        args: &[&str],
        stderr: Stdio,
    ) -> Result<(Duration, std::process::Output)> {
        let start = Mono::now();
        let out = self
            .cli(data, args)
            .stderr(stderr)
            .output()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        Ok((start.elapsed(), out))
    }

    /// `reps` timed runs of `loops ARGS` against `data` after [`WARM_UP`] untimed ones;
    /// exit 0 or 1 counts as success (`health` exits 1 when a loop fails).
    pub(crate) fn time_cli_warm(&self, data: &Path, args: &[&str], reps: usize) -> Result<Stats> {
        warm_samples(reps, || {
            let took = self.time_cli_accepting(data, args, |s| matches!(s.code(), Some(0 | 1)))?;
            Ok(ms(took))
        })
    }

    /// `loops ARGS` against the store in `data`, stdin closed, stdout discarded.
    fn cli(&self, data: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .env("LOOPS_DATA_DIR", data)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
    }

    pub(crate) fn time_cli_n(&self, data: &Path, args: &[&str], runs: usize) -> Result<Stats> {
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            samples.push(ms(self.time_cli(data, args)?));
        }
        Ok(Stats::of(samples))
    }

    pub(crate) fn start_daemon(
        &self,
        dir: &BenchDir,
        log_name: &str,
        flags: &[&str],
    ) -> Result<Daemon> {
        Daemon::start(&self.bin, &dir.data(), &dir.log(log_name), flags, &[])
    }

    /// A fresh data dir holding `args`' run history ([`import_history`]); says on stderr
    /// what was written, how long that took and how large the store is.
    /// A fresh data dir holding `loops` loops of period `every_ms`, each with `runs /
    /// loops` finished runs on its last slots, imported 50 loops at a time so that a
    /// history of millions of runs is never held in memory at once; and the runs written.
    pub(crate) fn long_history_dir(
        &self,
        loops: usize,
        runs: usize,
        every_ms: u64,
    ) -> Result<(BenchDir, usize)> {
        const LOOPS_PER_BATCH: usize = 50;
        anyhow::ensure!(loops > 0 && runs >= loops, "need --runs >= --loops > 0");
        let dir = self.fresh_dir()?;
        let now = whole_ms(chrono::Utc::now());
        drop(loops_runtime::client::Client::open(&dir.data())?);
        let store = loops_sqlite::SqliteStore::open(&dir.db())?;
        let t = Mono::now();
        let mut written = 0;
        for first in (0..loops).step_by(LOOPS_PER_BATCH) {
            let part = first..(first + LOOPS_PER_BATCH).min(loops);
            let batch = history_batch_of(part, loops, runs / loops, every_ms, now)?;
            written += loops_store::Store::import(&store, &batch, now)?.runs;
        }
        drop(store);
        eprintln!(
            "{loops} loops and {written} runs written in {:.0} s, db {:.0} MB",
            t.elapsed().as_secs_f64(),
            file_len(&dir.db()) as f64 / 1e6
        );
        Ok((dir, written))
    }

    pub(crate) fn history_dir(&self, args: &HistoryArgs) -> Result<BenchDir> {
        let dir = self.fresh_dir()?;
        let t = Mono::now();
        let imported = import_history(&dir, args)?;
        eprintln!(
            "{} loops and {} runs written in {:.1} s, db {:.1} MB",
            imported.loops.len(),
            imported.runs,
            t.elapsed().as_secs_f64(),
            file_len(&dir.db()) as f64 / 1e6
        );
        Ok(dir)
    }
}

/// The slots the dispatch benchmarks judge: from 2 s after the later of the daemon's
/// readiness and the first slot (`base` + 1 s) to 2 s before the daemon was stopped,
/// so that neither its start nor its stop is in the figures.
pub(crate) struct Window {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

impl Window {
    pub(crate) fn new(ready: Instant, base: Instant, stopped: Instant) -> Self {
        Self {
            start: ready.max(base + TimeDelta::seconds(1)) + TimeDelta::seconds(2),
            end: stopped - TimeDelta::seconds(2),
        }
    }

    pub(crate) fn secs(&self) -> f64 {
        delta_ms(self.end - self.start) / 1_000.0
    }

    /// How many slots of a loop every second, first due at `first`, fall inside.
    pub(crate) fn slots_from(&self, first: Instant) -> i64 {
        self.slots_every(first, 1_000)
    }

    /// How many slots of a loop every `every_ms`, first due at `first`, fall inside.
    pub(crate) fn slots_every(&self, first: Instant, every_ms: i64) -> i64 {
        let k0 = ((self.start - first).num_milliseconds() + every_ms - 1)
            .div_euclid(every_ms)
            .max(0);
        let k1 = (self.end - first).num_milliseconds().div_euclid(every_ms);
        (k1 - k0 + 1).max(0)
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

pub(crate) fn delta_ms(d: TimeDelta) -> f64 {
    match d.num_microseconds() {
        Some(us) => us as f64 / 1_000.0,
        None => d.num_milliseconds() as f64,
    }
}

/// `t` truncated to whole milliseconds, the store's precision (so slots computed here
/// compare equal to the stored ones).
pub(crate) fn whole_ms(t: Instant) -> Instant {
    chrono::DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

pub(crate) fn millis(n: usize) -> TimeDelta {
    TimeDelta::milliseconds(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Order statistics of a sample (nearest-rank percentiles).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

impl Stats {
    pub(crate) fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
            v[rank - 1]
        };
        Self {
            n: v.len(),
            p50: pct(0.50),
            p90: pct(0.90),
            p99: pct(0.99),
            max: v[v.len() - 1],
        }
    }
}

impl Stats {
    /// The median, p90 and max cells of a table row, `decimals` after the point.
    pub(crate) fn median_p90_max(&self, decimals: usize) -> String {
        format!(
            "{:.decimals$} | {:.decimals$} | {:.decimals$}",
            self.p50, self.p90, self.max
        )
    }
}

/// Untimed calls before the timed ones (page cache and allocator warm).
pub(crate) const WARM_UP: usize = 3;

/// The statistics of `reps` samples of `sample` (milliseconds), taken after [`WARM_UP`]
/// calls whose samples are dropped.
pub(crate) fn warm_samples(reps: usize, mut sample: impl FnMut() -> Result<f64>) -> Result<Stats> {
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + WARM_UP {
        let took = sample()?;
        if i >= WARM_UP {
            samples.push(took);
        }
    }
    Ok(Stats::of(samples))
}

/// The JSON document a finished child printed on stdout; an error (with its stderr)
/// when it failed. `what` names it in the errors.
pub(crate) fn json_output(out: &std::process::Output, what: &str) -> Result<serde_json::Value> {
    ensure!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    serde_json::from_slice(&out.stdout).with_context(|| format!("{what} printed no JSON"))
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

pub(crate) fn sleep(d: Duration) {
    std::thread::sleep(d);
}

pub(crate) fn clock_ticks_per_sec() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

pub(crate) fn all_runs(db: &Path) -> Result<Vec<Run>> {
    let store = SqliteStore::open(db)?;
    Ok(store.list_runs(&RunFilter {
        loop_id: None,
        limit: None,
        ..RunFilter::default()
    })?)
}

/// The 1-minute load average (other work on the machine skews every figure).
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

pub(crate) fn flush() {
    let _ = std::io::stdout().flush();
}
