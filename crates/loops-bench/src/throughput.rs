//! End-to-end runs/s: N loops due at once, from daemon start to the last finalized run.

use crate::harness::{
    all_runs, clock_ticks_per_sec, delta_ms, keep_every_run, ms, populate, sleep, verdict, Bencher,
    Exec, Stats,
};
use anyhow::{bail, Result};
use chrono::{TimeDelta, Utc};
use loops_core::{RunStatus, Schedule};
use loops_runtime::client::Client;
use std::sync::Arc;
use std::time::{Duration, Instant as Mono};

impl Bencher {
    /// Benchmark 4: End-to-end runs/s.
    pub(super) fn throughput(
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
        let mut daemon = self.start_daemon(&dir, "daemon.log", &keep_every_run(&mc))?;
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
}
