//! Wall clock of the everyday CLI commands against a populated store: `loops list`,
//! `loops create`, `loops edit` and `loops runs --status failed --since 1d`.

use crate::harness::{
    command_def, every, file_len, flush, millis, ms, populate_every, verdict, Bencher, Exec, Stats,
};
use anyhow::{bail, ensure, Result};
use chrono::{TimeDelta, Utc};
use loops_core::{RunOutcome, RunSource, RunStatus};
use loops_runtime::client::Client;
use loops_sqlite::SqliteStore;
use loops_store::{BatchClaim, ClaimOutcome, ClaimRequest, OnRefusal, RunFilter, RunWrite, Store};
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant as Mono};

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

impl Bencher {
    /// Benchmark 1: `loops --json list` over 1k and 10k loops, with no daemon and with an idle
    /// daemon holding the store open.
    pub(super) fn cli_list(&self, sizes: &[usize], runs: usize) -> Result<()> {
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
            let (_, setup) = populate_every(&data, n, "bench", Exec::ShTrue, 3_600_000)?;
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
    pub(super) fn cli_create(&self, existing: usize, calls: usize) -> Result<()> {
        println!("| store | daemon | calls | `loops create` median ms | p90 ms | max ms | `loops --version` median ms | in-process `Client::open` median ms | in-process `Client::create` median ms | target ≤ 10 ms |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for with_daemon in [false, true] {
            let dir = self.fresh_dir()?;
            let data = dir.data();
            populate_every(&data, existing, "existing", Exec::ShTrue, 3_600_000)?;
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
    pub(super) fn cli_edit(
        &self,
        loops: usize,
        runs: usize,
        failed_every: usize,
        days: u32,
        calls: usize,
    ) -> Result<()> {
        let dir = self.fresh_dir()?;
        let data = dir.data();
        let (_, setup) = populate_every(&data, loops, "edit", Exec::True, 3_600_000)?;
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
        // `calls` timed edits of edit-0, edit-1, … in turn, the i-th with `args(name, i)`.
        let edits = |args: &dyn Fn(&str, usize) -> Vec<String>| -> Result<Stats> {
            let mut samples = Vec::with_capacity(calls);
            for i in 0..calls {
                let args = args(&format!("edit-{}", i % loops.max(1)), i);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                samples.push(ms(self.time_cli(&data, &args)?));
            }
            Ok(Stats::of(samples))
        };
        let words = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let text = edits(&|n, i| words(&["edit", n, "-d", &format!("edited {i}")]))?;
        row("`loops edit edit-N -d TEXT`", &text, Some(15.0));
        let every = edits(&|n, i| words(&["edit", n, "--every", ["2h", "3h"][i % 2]]))?;
        row(
            "`loops edit edit-N --every 2h` (replanned)",
            &every,
            Some(15.0),
        );
        let json = edits(&|n, i| words(&["--json", "edit", n, "-d", &format!("json {i}")]))?;
        row("`loops --json edit edit-N -d TEXT`", &json, Some(15.0));
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
}
