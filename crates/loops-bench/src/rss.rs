//! The idle daemon: its RSS, CPU and wake-ups with no loops and with many loops due
//! far in the future.

use crate::harness::{clock_ticks_per_sec, flush, populate, sleep, verdict, Bencher, Exec};
use anyhow::Result;
use chrono::Utc;
use loops_core::Schedule;
use loops_runtime::client::Client;
use std::time::Duration;

impl Bencher {
    /// Benchmark 5: Daemon RSS and idle CPU.
    pub(super) fn rss(&self, n: usize, idle_secs: u64) -> Result<()> {
        let tck = clock_ticks_per_sec();
        println!("| loops defined | settle s | VmRSS MB | of it anonymous / file-backed MB | VmHWM MB | idle CPU ms per {idle_secs} s | context switches per {idle_secs} s | target |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---|");
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
            let (anon, file) = daemon.rss_split_kb()?;
            let cpu0 = daemon.cpu()?;
            let switches0 = daemon.context_switches()?;
            sleep(Duration::from_secs(idle_secs));
            let cpu1 = daemon.cpu()?;
            let wakeups = daemon.context_switches()?.saturating_sub(switches0);
            daemon.stop()?;
            let (cpu, _) = cpu1.since_ms(&cpu0, tck);
            let mb = rss as f64 / 1024.0;
            // Issue #21's goals: ≤ 10 MB idle, ≤ 12 MB with 1,000 loops.
            let limit = if loops == 0 { 10.0 } else { 12.0 };
            println!(
                "| {loops} | {settle} | {mb:.1} | {:.1} / {:.1} | {:.1} | {cpu:.0} | {wakeups} | ≤ {limit:.0} MB, CPU ≈ 0: {} |",
                anon as f64 / 1024.0,
                file as f64 / 1024.0,
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
}
