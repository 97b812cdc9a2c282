//! `loops top`'s refresh cost (issue #23 item 2) over 1,000 loops and 100,000 runs: the
//! feed read from scratch (what `top` does once at start, and again only when the event
//! log was pruned past it), `loops top --once --json` through the real binary (process,
//! read, model, JSON), and each poll of the event log — idle (every 250 ms), and with a
//! batch of k `loop.changed` events, or a run's `run.started` + `run.finished`, to apply.

use crate::harness::{file_len, ms, warm_samples, Bencher, Stats};
use crate::HistoryArgs;
use anyhow::{ensure, Result};
use chrono::Utc;
use loops_runtime::client::Client;
use std::time::Instant as Mono;

impl Bencher {
    pub(super) fn top(&self, args: &HistoryArgs) -> Result<()> {
        let (loops, runs, reps) = (args.loops, args.runs, args.reps);
        let dir = self.history_dir(args)?;
        let data = dir.data();

        // From scratch, in-process.
        let client = Client::open(&data)?;
        let scratch = warm_samples(reps, || {
            let t = Mono::now();
            let feed = client.top(Utc::now())?;
            let took = ms(t.elapsed());
            ensure!(feed.data().loops.len() == loops, "the feed lost loops");
            Ok(took)
        })?;
        let once = self.time_cli_n(&data, &["--json", "top", "--once"], reps)?;

        // Polls: idle, then with k loop.changed events (k loops paused, then resumed).
        let mut feed = client.top(Utc::now())?;
        let mut idle = Vec::new();
        for _ in 0..reps {
            let t = Mono::now();
            let applied = feed.poll(Utc::now())?;
            idle.push(ms(t.elapsed()));
            ensure!(applied.events == 0, "events while idle");
        }
        let idle = Stats::of(idle);
        let names: Vec<String> = client.list(None)?.into_iter().map(|l| l.name).collect();
        let mut batches = Vec::new();
        for k in [1usize, 10, 100] {
            let k = k.min(names.len());
            let mut samples = Vec::new();
            for rep in 0..reps {
                for name in names.iter().take(k) {
                    if rep % 2 == 0 {
                        client.pause(name, Utc::now())?;
                    } else {
                        client.resume(name, Utc::now())?;
                    }
                }
                let t = Mono::now();
                let applied = feed.poll(Utc::now())?;
                samples.push(ms(t.elapsed()));
                ensure!(applied.events == k, "{} events for {k}", applied.events);
            }
            batches.push((k, Stats::of(samples)));
        }
        // A run: its two events (the run and its loop read again).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut run = Vec::new();
        for _ in 0..reps {
            rt.block_on(client.run_now(&names[0], true))?;
            let t = Mono::now();
            let applied = feed.poll(Utc::now())?;
            run.push(ms(t.elapsed()));
            ensure!(applied.events == 2, "{} events for a run", applied.events);
        }
        let run = Stats::of(run);

        println!("| loops | runs | db MB | from scratch (in-process) median ms | p90 | `top --once --json` median ms | p90 | idle poll median ms | 1 `loop.changed` ms | 10 | 100 | a run's 2 events ms |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let b = |k: usize| {
            batches
                .iter()
                .find(|(n, _)| *n == k)
                .map_or(0.0, |(_, s)| s.p50)
        };
        println!(
            "| {loops} | {runs} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} |",
            file_len(&dir.db()) as f64 / 1e6,
            scratch.p50,
            scratch.p90,
            once.p50,
            once.p90,
            idle.p50,
            b(1),
            b(10),
            b(100),
            run.p50,
        );
        Ok(())
    }
}
