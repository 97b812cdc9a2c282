//! `loops health` (JSON and table) over a store with a run history (issue #11).

use crate::harness::{file_len, import_history, ms, verdict, Bencher, Stats};
use anyhow::Result;
use chrono::{TimeDelta, Utc};
use loops_runtime::client::Client;
use loops_sqlite::SqliteStore;
use loops_store::Store;
use std::path::Path;
use std::time::Instant as Mono;

impl Bencher {
    /// `loops health` (JSON and table) over `loops` fixed-rate loops every `every_ms`
    /// with `runs` finished runs between them, every run in the last day's window (the
    /// worst case for the missed-slot count): 2 % failed, 1 % skipped, and every tenth
    /// loop missing one slot.
    pub(super) fn health(
        &self,
        loops: usize,
        runs: usize,
        every_ms: u64,
        reps: usize,
    ) -> Result<()> {
        let dir = self.fresh_dir()?;
        let data = dir.data();
        let t = Mono::now();
        let imported = import_history(&dir, loops, runs, every_ms)?;
        eprintln!(
            "{} loops and {} runs written in {:.1} s, db {:.1} MB",
            imported.loops.len(),
            imported.runs,
            t.elapsed().as_secs_f64(),
            file_len(&dir.db()) as f64 / 1e6
        );
        let floor = self.time_health(&data, &["--version"], reps)?;
        let json = self.time_health(&data, &["--json", "health"], reps)?;
        let table = self.time_health(&data, &["health"], reps)?;
        // The same work in-process: open, then the report; and the store's part alone.
        let (mut open, mut report, mut facts) = (vec![], vec![], vec![]);
        let mut counts = [0; 3];
        for _ in 0..reps {
            let t = Mono::now();
            let client = Client::open_read_only(&data)?;
            open.push(ms(t.elapsed()));
            let t = Mono::now();
            let r = client.health(Utc::now(), &[])?;
            report.push(ms(t.elapsed()));
            use loops_core::health::Verdict;
            counts = [Verdict::Ok, Verdict::Warn, Verdict::Fail].map(|v| r.count(v));
        }
        let store = SqliteStore::open_read_only(&dir.db())?;
        let loops_now = store.list_loops(None)?;
        for _ in 0..reps {
            let t = Mono::now();
            let now = Utc::now();
            let queries: Vec<_> = loops_now
                .iter()
                .map(|lp| loops_core::health::facts_query(lp, now))
                .collect();
            std::hint::black_box(store.run_facts(&queries, loops_core::health::RECENT_RUNS)?);
            facts.push(ms(t.elapsed()));
        }
        let (open, report, facts) = (Stats::of(open), Stats::of(report), Stats::of(facts));
        println!(
            "process floor: `loops --version` median {:.2} ms, p90 {:.2} ms ({reps} runs)\n",
            floor.p50, floor.p90
        );
        println!("| loops | runs | every | db MB | `--json health` median ms | p90 | max | `health` (table) median ms | p90 | in-process open ms | report ms | of which `run_facts` ms | ok / warn / fail | target ≤ 50 ms |");
        println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        println!(
            "| {loops} | {runs} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} / {} / {} | {} |",
            loops_core::health::age_text(TimeDelta::milliseconds(every_ms as i64)),
            file_len(&dir.db()) as f64 / 1e6,
            json.p50,
            json.p90,
            json.max,
            table.p50,
            table.p90,
            open.p50,
            report.p50,
            facts.p50,
            counts[0],
            counts[1],
            counts[2],
            verdict(json.p50 <= 50.0)
        );
        println!("\n({reps} timed runs each after 3 warm-up runs, stdout to /dev/null, page cache warm.)");
        Ok(())
    }

    /// Wall clock of `loops ARGS` (exit 0 or 1: health exits 1 when a loop fails).
    fn time_health(&self, data: &Path, args: &[&str], reps: usize) -> Result<Stats> {
        let mut samples = Vec::with_capacity(reps);
        for i in 0..reps + 3 {
            let elapsed =
                self.time_cli_accepting(data, args, |status| matches!(status.code(), Some(0 | 1)))?;
            if i >= 3 {
                samples.push(ms(elapsed));
            }
        }
        Ok(Stats::of(samples))
    }
}
