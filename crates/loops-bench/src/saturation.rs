//! Saturation: the runs a second the daemon starts when more is due than the machine
//! can run, as a share of what `xargs -P2` starts of the same child in the same
//! minute (issue #21's first row). Both sides start one `sh -c true` a run.

use crate::harness::{
    all_runs, clock_ticks_per_sec, every, keep_every_run, loadavg, millis, ms, populate, sleep,
    verdict, whole_ms, Bencher, Exec, Window,
};
use anyhow::{ensure, Context as _, Result};
use chrono::{TimeDelta, Utc};
use loops_core::RunStatus;
use loops_runtime::client::Client;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant as Mono};

/// The share of `xargs`'s rate the daemon must reach.
const GOAL: f64 = 0.90;

impl Bencher {
    /// `n` loops every second (phases spread) for `secs`, between two timings of
    /// `seq {xargs_runs} | xargs -P2 -n1 sh -c true`.
    pub(super) fn saturation(
        &self,
        n: usize,
        secs: u64,
        xargs_runs: usize,
        max_concurrent: usize,
    ) -> Result<()> {
        ensure!(
            n > 0 && secs >= 10,
            "need at least one loop and --secs >= 10"
        );
        let before = xargs_rate(xargs_runs)?;
        let dir = self.fresh_dir()?;
        let client = Client::open(&dir.data())?;
        // As `dispatch`: first slots from `base` + 1 s, created one period before.
        let lead = 2_000 + i64::try_from(n / 2)?;
        let base = whole_ms(Utc::now() + TimeDelta::milliseconds(lead));
        populate(&client, n, "sat", Exec::ShTrue, |i| {
            let created = base + millis(i * 1_000 / n);
            (every(1_000), created)
        })?;
        drop(client);
        let mc = max_concurrent.to_string();
        let mut daemon = self.start_daemon(&dir, "daemon.log", &keep_every_run(&mc))?;
        let tck = clock_ticks_per_sec();
        let (cpu0, sup0) = (daemon.cpu()?, daemon.supervisor_cpu());
        sleep(Duration::from_secs(secs));
        let (cpu1, sup1) = (daemon.cpu()?, daemon.supervisor_cpu());
        let stopped_at = Utc::now();
        daemon.stop()?;
        let after = xargs_rate(xargs_runs)?;
        let (cpu_own, _) = cpu1.since_ms(&cpu0, tck);
        let (sup_own, _) = sup1.since_ms(&sup0, tck);

        // Runs started inside the window (neither the start nor the stop in it).
        let window = Window::new(daemon.ready_at, base, stopped_at);
        let runs = all_runs(&dir.db())?;
        let started = runs
            .iter()
            .filter(|r| r.status != RunStatus::Skipped)
            .filter_map(|r| r.started_at)
            .filter(|t| *t >= window.start && *t <= window.end)
            .count();
        let rate = started as f64 / window.secs();
        let baseline = (before + after) / 2.0;
        let share = rate / baseline;
        let all_started = runs.iter().filter(|r| r.started_at.is_some()).count();
        println!(
            "saturation: {rate:.0} runs/s of {n} due a second, xargs -P2 {before:.0} / {after:.0} runs/s (before / after) = {:.0} % | goal ≥ {:.0} % | {} | daemon CPU {:.3} ms a run (with supervisors {:.3}) | window {:.1} s | load {}",
            share * 100.0,
            GOAL * 100.0,
            verdict(share >= GOAL),
            cpu_own / all_started.max(1) as f64,
            (cpu_own + sup_own) / all_started.max(1) as f64,
            window.secs(),
            loadavg(),
        );
        Ok(())
    }
}

/// Runs a second of `seq runs | xargs -P2 -n1 sh -c true`: two at a time, one `sh`
/// each, as fast as the machine starts them.
fn xargs_rate(runs: usize) -> Result<f64> {
    let script = format!("seq {runs} | xargs -P2 -n1 sh -c true");
    let t = Mono::now();
    let status = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .status()
        .context("cannot run sh for the xargs baseline")?;
    let took = t.elapsed();
    ensure!(status.success(), "{script}: {status}");
    Ok(runs as f64 / (ms(took) / 1_000.0))
}
