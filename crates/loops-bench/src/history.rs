//! A long history (issue #21): 10 million finished runs over 1,000 loops. The
//! everyday reads over it (`loops tick`'s pass, `runs --limit 50`, `health`, the
//! dashboard's overview) and how fast `prune` deletes, against the 1,000 runs a
//! second a busy store adds.

use crate::dashboard::get;
use crate::harness::{file_len, history_batch_of, ms, verdict, whole_ms, Bencher, Stats};
use crate::http::Serve;
use anyhow::{ensure, Context as _, Result};
use chrono::Utc;
use loops_runtime::client::Client;
use loops_sqlite::SqliteStore;
use loops_store::Store;
use std::time::Instant as Mono;

/// Loops imported per batch: a batch's runs are held in memory at once.
const LOOPS_PER_BATCH: usize = 50;

impl Bencher {
    pub(super) fn history(
        &self,
        loops: usize,
        runs: usize,
        every_ms: u64,
        reps: usize,
    ) -> Result<()> {
        ensure!(loops > 0 && runs >= loops, "need --runs >= --loops > 0");
        let dir = self.fresh_dir()?;
        let data = dir.data();
        let now = whole_ms(Utc::now());
        let per_loop = runs / loops;
        drop(Client::open(&data)?);
        let store = SqliteStore::open(&dir.db())?;
        let t = Mono::now();
        let mut written = 0;
        for first in (0..loops).step_by(LOOPS_PER_BATCH) {
            let part = first..(first + LOOPS_PER_BATCH).min(loops);
            let batch = history_batch_of(part, loops, per_loop, every_ms, now)?;
            written += store.import(&batch, now)?.runs;
        }
        drop(store);
        eprintln!(
            "{loops} loops and {written} runs written in {:.0} s, db {:.0} MB",
            t.elapsed().as_secs_f64(),
            file_len(&dir.db()) as f64 / 1e6
        );

        let time = |args: &[&str]| -> Result<Stats> {
            let mut samples = Vec::with_capacity(reps);
            for i in 0..reps + 3 {
                let took =
                    self.time_cli_accepting(&data, args, |s| matches!(s.code(), Some(0 | 1)))?;
                if i >= 3 {
                    samples.push(ms(took));
                }
            }
            Ok(Stats::of(samples))
        };
        let floor = time(&["--version"])?;
        let pass = time(&["tick"])?;
        let recent = time(&["--json", "runs", "--limit", "50"])?;
        let one_loop = time(&["--json", "runs", "--limit", "50", "health-7"])?;
        let health = time(&["--json", "health"])?;
        let overview = {
            let mut serve = Serve::start(&self.bin, &data, &dir.log("serve.log"))?;
            let mut samples = Vec::with_capacity(reps);
            for i in 0..reps + 3 {
                let (took, status, _) = get(&serve.addr, &serve.token, "/")?;
                ensure!(status == 200, "GET / answered {status}");
                if i >= 3 {
                    samples.push(took);
                }
            }
            serve.stop()?;
            Stats::of(samples)
        };

        // Prune: the newest 9,000 runs of each loop kept (a tenth deleted), then 10 more
        // deleted of each: a first clean-up and then the steady one.
        // Meanwhile another process writes (pause and resume one loop, in turn), as a
        // daemon's claims and a person's commands do: the longest such write is how
        // long prune kept everyone else out.
        let prune = |keep: usize| -> Result<(f64, u64, f64, usize)> {
            let t = Mono::now();
            let mut child = std::process::Command::new(&self.bin)
                .args(["--json", "prune", "--keep", &keep.to_string()])
                .env("LOOPS_DATA_DIR", &data)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .context("cannot run loops prune")?;
            let (mut longest, mut refused) = (0f64, 0usize);
            let mut verb = ["pause", "resume"].into_iter().cycle();
            while child.try_wait()?.is_none() {
                let args = [verb.next().unwrap_or("pause"), "health-3"];
                let (took, ok) = self.time_cli_status(&data, &args)?;
                longest = longest.max(took);
                refused += usize::from(!ok);
            }
            let out = child.wait_with_output()?;
            let took = ms(t.elapsed());
            ensure!(
                out.status.success(),
                "loops prune failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            let doc: serde_json::Value =
                serde_json::from_slice(&out.stdout).context("loops prune printed no JSON")?;
            Ok((took, doc["pruned"].as_u64().unwrap_or(0), longest, refused))
        };
        let first_keep = per_loop * 9 / 10;
        let first = prune(first_keep)?;
        let steady = prune(first_keep.saturating_sub(10))?;
        let rate = |deleted: u64, took: f64| deleted as f64 / (took / 1_000.0);

        println!(
            "process floor: `loops --version` median {:.2} ms ({reps} runs); db {:.0} MB\n",
            floor.p50,
            file_len(&dir.db()) as f64 / 1e6
        );
        println!("| loops | runs | read | median ms | p90 ms | max ms | goal | verdict |");
        println!("|---:|---:|---|---:|---:|---:|---|---|");
        for (what, s) in [
            ("`loops tick` (a pass, nothing due)", &pass),
            ("`runs --limit 50`", &recent),
            ("`runs --limit 50 <loop>`", &one_loop),
            ("`health --json`", &health),
            ("dashboard `GET /`", &overview),
        ] {
            println!(
                "| {loops} | {written} | {what} | {:.1} | {:.1} | {:.1} | ≤ 100 ms | {} |",
                s.p50,
                s.p90,
                s.max,
                verdict(s.p50 <= 100.0)
            );
        }
        println!();
        println!("| prune | runs deleted | ms | runs deleted per second | longest concurrent write ms | writes refused (locked) | goal | verdict |");
        println!("|---|---:|---:|---:|---:|---:|---|---|");
        for (what, (took, deleted, wait, refused)) in [
            (format!("`--keep {first_keep}`"), first),
            (
                format!("`--keep {}`", first_keep.saturating_sub(10)),
                steady,
            ),
        ] {
            println!(
                "| {what} | {deleted} | {took:.0} | {:.0} | {wait:.0} | {refused} | keeps up with 1,000 runs/s, no write refused | {} |",
                rate(deleted, took),
                verdict(deleted > 0 && rate(deleted, took) >= 1_000.0 && refused == 0)
            );
        }
        println!("\n({reps} timed calls each after 3 warm-up calls, output discarded, page cache warm; exit 1 of `health` accepted.)");
        Ok(())
    }
}
