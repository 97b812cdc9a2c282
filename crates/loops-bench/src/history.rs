//! A long history (issue #21): 10 million finished runs over 1,000 loops. The
//! everyday reads over it (`loops tick`'s pass, `runs --limit 50`, `health`, the
//! dashboard's overview) and how fast `prune` deletes, against the 1,000 runs a
//! second a busy store adds.

use crate::dashboard::time_overview;
use crate::harness::{file_len, json_output, ms, verdict, Bencher};
use crate::http::Serve;
use crate::HistoryArgs;
use anyhow::{Context as _, Result};
use std::time::Instant as Mono;

impl Bencher {
    pub(super) fn history(&self, args: &HistoryArgs) -> Result<()> {
        let (loops, reps) = (args.loops, args.reps);
        let (dir, written) = self.long_history_dir(loops, args.runs, args.every_ms)?;
        let data = dir.data();
        let per_loop = args.runs / loops;

        let time = |args: &[&str]| self.time_cli_warm(&data, args, reps);
        let floor = time(&["--version"])?;
        let pass = time(&["tick"])?;
        let recent = time(&["--json", "runs", "--limit", "50"])?;
        let one_loop = time(&["--json", "runs", "--limit", "50", "health-7"])?;
        let health = time(&["--json", "health"])?;
        let overview = {
            let mut serve = Serve::start(&self.bin, &data, &dir.log("serve.log"))?;
            let (times, _) = time_overview(&serve, reps)?;
            serve.stop()?;
            times
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
            let doc = json_output(&out, "loops prune")?;
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
