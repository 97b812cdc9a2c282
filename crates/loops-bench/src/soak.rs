//! A long run of loops every second under scaled-down retention: the store's size
//! must plateau.

use crate::harness::{
    all_runs, clock_ticks_per_sec, delta_ms, every, file_len, flush, millis, populate, sleep,
    verdict, whole_ms, Bencher, Exec, Stats,
};
use anyhow::{ensure, Result};
use chrono::{TimeDelta, Utc};
use loops_core::{Instant, Run, RunStatus};
use loops_runtime::client::Client;
use loops_store::RunFilter;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant as Mono};

impl Bencher {
    /// Benchmark 7: Soak: bounded store under retention.
    pub(super) fn soak(
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
