//! `loops health` (JSON and table) over a store with a run history (issue #11).

use crate::dashboard::get;
use crate::harness::{file_len, ms, verdict, Bencher, Stats};
use crate::http::Serve;
use crate::HistoryArgs;
use anyhow::{ensure, Result};
use chrono::{TimeDelta, Utc};
use loops_runtime::client::Client;
use loops_sqlite::SqliteStore;
use loops_store::Store;
use std::time::Instant as Mono;

impl Bencher {
    /// `loops health` (JSON and table) over `loops` fixed-rate loops every `every_ms`
    /// with `runs` finished runs between them, every run in the last day's window (the
    /// worst case for the missed-slot count): 2 % failed, 1 % skipped, and every tenth
    /// loop missing one slot.
    pub(super) fn health(&self, args: &HistoryArgs) -> Result<()> {
        let (loops, runs, reps) = (args.loops, args.runs, args.reps);
        let dir = self.history_dir(args)?;
        let data = dir.data();
        let floor = self.time_cli_warm(&data, &["--version"], reps)?;
        let json = self.time_cli_warm(&data, &["--json", "health"], reps)?;
        let table = self.time_cli_warm(&data, &["health"], reps)?;
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
        // `GET /v1/health` of `loops serve`: its time, and the memory the server keeps
        // after each answer (a report built as a JSON tree was kept by the allocator).
        let mut serve = Serve::start(&self.bin, &data, &dir.log("serve.log"))?;
        let (mut served, mut kept) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let (took, status, _) = get(&serve.addr, &serve.token, "/v1/health")?;
            ensure!(status == 200, "GET /v1/health answered {status}");
            served.push(took);
            kept.push(serve.memory_kb()?);
        }
        serve.stop()?;
        let served = Stats::of(served);
        let (open, report, facts) = (Stats::of(open), Stats::of(report), Stats::of(facts));
        println!(
            "process floor: `loops --version` median {:.2} ms, p90 {:.2} ms ({reps} runs)\n",
            floor.p50, floor.p90
        );
        println!("| loops | runs | every | db MB | `--json health` median ms | p90 | max | `health` (table) median ms | p90 | in-process open ms | report ms | of which `run_facts` ms | ok / warn / fail | target ≤ 50 ms |");
        println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        println!(
            "| {loops} | {runs} | {} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} / {} / {} | {} |",
            loops_core::health::age_text(TimeDelta::milliseconds(args.every_ms as i64)),
            file_len(&dir.db()) as f64 / 1e6,
            json.median_p90_max(2),
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
        let mb = |kb: u64| kb as f64 / 1024.0;
        let anon: Vec<String> = kept.iter().map(|(a, _)| format!("{:.1}", mb(*a))).collect();
        println!(
            "\n`GET /v1/health` of `loops serve`, {reps} requests: median {:.1} ms, p90 {:.1} ms; \
             anonymous memory after each: {} MB; high-water mark {:.1} MB",
            served.p50,
            served.p90,
            anon.join(" / "),
            mb(kept.last().map_or(0, |(_, hwm)| *hwm)),
        );
        Ok(())
    }
}
