//! The daemon's retention over a long history (issue #21): while its first prune ranks
//! N runs and deletes a tenth of them, a probe loop due every 100 ms must still be
//! started on time. Retention used to run inside the scheduling loop, on its
//! connection; it now has a thread and a connection of its own.

use crate::harness::{delta_ms, sleep, verdict, Bencher};
use crate::harness::{populate_every, Daemon, Exec, Stats};
use anyhow::{Context as _, Result};
use loops_sqlite::SqliteStore;
use loops_store::{RunFilter, Store};
use std::time::{Duration, Instant as Mono};

/// The probe loop's period.
const PROBE_EVERY_MS: u64 = 100;

impl Bencher {
    pub(super) fn retention(&self, loops: usize, runs: usize, secs: u64) -> Result<()> {
        // Hourly loops: their runs are history, their next slots mostly beyond the window.
        let (dir, written) = self.long_history_dir(loops, runs, 3_600_000)?;
        let data = dir.data();
        let per_loop = runs / loops;
        populate_every(&data, 1, "probe", Exec::True, PROBE_EVERY_MS)?;

        // The first prune (at start) keeps nine tenths of each loop's runs.
        let keep = (per_loop * 9 / 10).to_string();
        let log = dir.log("daemon.log");
        let mut daemon = Daemon::start(
            &self.bin,
            &data,
            &log,
            &["--keep-runs", &keep, "--prune-every", "1h"],
            &[("LOOPS_LOG", "info")],
        )?;
        let began = Mono::now();
        let (mut pruned_after, mut deleted) = (None, 0);
        while began.elapsed() < Duration::from_secs(secs) {
            if pruned_after.is_none() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if let Some(line) = text.lines().find(|l| l.contains("retention")) {
                    pruned_after = Some(began.elapsed());
                    deleted = logged_runs(line);
                }
            }
            sleep(Duration::from_millis(50));
        }
        let ready = daemon.ready_at;
        daemon.stop()?;
        let pruned_after = pruned_after.context(
            "the daemon logged no retention within the window (raise --secs): the prune did not end",
        )?;

        let store = SqliteStore::open(&dir.db())?;
        let probe = store
            .get_loop_by_name("probe-0")?
            .context("the probe loop is gone")?;
        let probe_runs = store.list_runs(&RunFilter {
            loop_id: Some(probe.id),
            ..RunFilter::default()
        })?;
        let prune_end = ready + chrono::TimeDelta::from_std(pruned_after)?;
        let lags = |during: bool| -> Vec<f64> {
            probe_runs
                .iter()
                .filter(|r| r.scheduled_for >= ready)
                .filter(|r| (r.scheduled_for < prune_end) == during)
                .filter_map(|r| Some(delta_ms(r.started_at? - r.scheduled_for)))
                .collect()
        };
        let (during, after) = (lags(true), lags(false));
        let (n_during, n_after) = (during.len(), after.len());
        let (during, after) = (Stats::of(during), Stats::of(after));
        println!("| runs | deleted by the first prune | prune ended after s | probe runs during / after | lag during p50 / p99 / max ms | lag after p50 / p99 / max ms | goal | verdict |");
        println!("|---:|---:|---:|---:|---|---|---|---|");
        println!(
            "| {written} | {} | {:.1} | {n_during} / {n_after} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} | the probe's lag p99 ≤ 50 ms while the prune runs | {} |",
            deleted,
            pruned_after.as_secs_f64(),
            during.p50,
            during.p99,
            during.max,
            after.p50,
            after.p99,
            after.max,
            verdict(n_during > 0 && during.p99 <= 50.0)
        );
        Ok(())
    }
}

/// The `runs=N` of the daemon's retention log line.
fn logged_runs(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("runs="))
        .and_then(|n| n.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        .unwrap_or(0)
}
