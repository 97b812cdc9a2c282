//! The PostgreSQL store: dispatch with several runners sharing the loops, and the
//! wake-up latency of an idle runner across hosts.

use crate::harness::{
    clock_ticks_per_sec, command_def, delta_ms, every, keep_every_run, millis, populate, sleep,
    verdict, whole_ms, Bencher, Daemon, Exec, Stats, Window,
};
use anyhow::{ensure, Context as _, Result};
use chrono::{TimeDelta, Utc};
use loops_core::transitions::LoopAdvance;
use loops_core::{Instant, LoopStatus, RunStatus};
use loops_runtime::client::Client;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant as Mono};

/// The PostgreSQL URL of `--store`, or else of a throwaway cluster started here and
/// returned with it (it lives as long as that value).
pub(crate) fn pg_store(
    store: Option<String>,
) -> Result<(String, Option<loops_testkit::PgCluster>)> {
    match store {
        Some(url) => Ok((url, None)),
        None => {
            let bin = loops_testkit::find_bin()
                .context("PostgreSQL not installed (apt-get install postgresql)")?;
            let cluster = loops_testkit::PgCluster::start(&bin)
                .map_err(|e| anyhow::anyhow!("cannot start a PostgreSQL cluster: {}", e.0))?;
            Ok((cluster.database(), Some(cluster)))
        }
    }
}

impl Bencher {
    /// Benchmark 11b: wake-up latency across runners.
    pub(super) fn pg_wake(
        &self,
        samples: usize,
        via: &str,
        store: Option<String>,
        load: usize,
    ) -> Result<()> {
        let on_runner = match via {
            "resume" => false,
            "on-runner" => true,
            other => anyhow::bail!("--via {other:?}: expected resume or on-runner"),
        };
        let (url, _cluster) = pg_store(store)?;
        let (here, there) = (self.fresh_dir()?, self.fresh_dir()?);
        let client = Client::open_store(&here.data(), Some(&url))?;
        // The runner first, then the load (see `pg_dispatch`: a runner started after
        // the load would move every load loop back at its start).
        let mut runner = Daemon::start(
            &self.bin,
            &there.data(),
            &there.log("daemon.log"),
            &keep_every_run("256"),
            &[("LOOPS_STORE", url.as_str())],
        )?;
        // The load, as `dispatch` spreads it: first slots from `base` + 1 s.
        let base = whole_ms(Utc::now() + TimeDelta::milliseconds(2_000 + i64::try_from(load)?));
        populate(&client, load, "load", Exec::True, |i| {
            (every(1_000), base + millis(i * 1_000 / load.max(1)))
        })?;
        // Let it register and settle (into its idle sleep, or into the load's rhythm).
        sleep(if load > 0 {
            Duration::from_secs(3).max(
                (base + TimeDelta::seconds(3) - Utc::now())
                    .to_std()
                    .unwrap_or_default(),
            )
        } else {
            Duration::from_millis(500)
        });
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
        println!("| via | loops every 1 s meanwhile | samples | claimed (startedAt) − commit p50 / p99 / max ms | child ran (`date`) − commit p50 / p99 / max ms | target ≤ 5 ms p50, ≤ 20 ms p99 |");
        println!("|---|---:|---:|---|---|---|");
        println!(
            "| {via} | {load} | {samples} | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} / {:.1} | {} |",
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
    pub(super) fn pg_dispatch(
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
        let (url, _cluster) = pg_store(store)?;
        let dirs = (0..runners)
            .map(|_| self.fresh_dir())
            .collect::<Result<Vec<_>>>()?;
        let client = Client::open_store(&dirs[0].data(), Some(&url))?;
        let stats = loops_postgres::PgStore::open(&url)?;
        // The runners start first, the loops after them. A daemon moves back, when it
        // starts, every next slot further ahead than one period (a clock that went
        // back: `replan_after_clock_jump`); these loops' first slots lie up to four
        // periods ahead, so a daemon started after them moved all 1,000 (a write each,
        // ≈ 1 s on PostgreSQL) before its first pass, and began a second behind
        // (BENCHMARKS.md §31).
        let mc = max_concurrent.to_string();
        let flags = keep_every_run(&mc);
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
        let base = whole_ms(Utc::now() + TimeDelta::seconds(3));
        let (first_slots, setup) = populate(&client, n, "tick", exec, |i| {
            (every(1_000), base + millis(i * 1_000 / n))
        })?;
        eprintln!("created {n} loops in {:.2} s", setup.as_secs_f64());
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
        let window = Window::new(ready, base, measured_to);
        let (ws, we, window_s) = (window.start, window.end, window.secs());
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
            let want = window.slots_from(*first);
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
}
