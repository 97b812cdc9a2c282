//! The cost of one scheduling pass (its store queries, `Engine::tick`, `loops tick`)
//! with a few due loops among many stored loops and many finished runs.

use crate::harness::{
    every, file_len, finish_runs, ms, populate, sleep, verdict, BenchDir, Bencher, Exec, Stats,
};
use anyhow::{ensure, Result};
use chrono::Utc;
use loops_core::{LoopId, Schedule};
use loops_runtime::client::Client;
use loops_runtime::engine::{Engine, EngineConfig, SystemClock};
use loops_sqlite::SqliteStore;
use loops_store::Store;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant as Mono};

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
    let targets: Vec<LoopId> = store
        .due_loops(Utc::now(), loops)?
        .into_iter()
        .filter_map(Result::ok)
        .map(|l| l.id)
        .collect();
    let start = Mono::now();
    finish_runs(&store, &targets, count, None)?;
    Ok(start.elapsed())
}

impl Bencher {
    /// Benchmark 6: Scheduling cost of a pass with a few due loops among many loops,
    /// and among many finished runs.
    pub(super) fn tick_cost(
        &self,
        n: usize,
        due: usize,
        runs: usize,
        history: usize,
    ) -> Result<()> {
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
}
