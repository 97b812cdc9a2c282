//! Benchmarks of issue #18's supervised runs: how long a new daemon takes to re-attach
//! to the runs an earlier one left to their supervisors (`daemon restart` with N runs
//! in flight).

use crate::harness::{command_def, ms, verdict, Bencher, Exec, Stats};
use anyhow::{bail, ensure, Context as _, Result};
use chrono::Utc;
use loops_runtime::client::Client;
use loops_sqlite::SqliteStore;
use loops_store::Store;
use std::process::{Command, Stdio};
use std::time::Duration;
use std::time::Instant as Mono;

impl Bencher {
    /// `daemon restart` with `n` runs in flight (`sleep`s), `reps` times: the restart
    /// command's wall clock, and from its start until every run is held by the new
    /// daemon again (its claim, in the store). Target: within the new daemon's first
    /// second (README, Running loops).
    pub(super) fn reattach(&self, n: usize, reps: usize) -> Result<()> {
        ensure!(n > 0 && reps > 0, "need --runs and --reps above 0");
        let dir = self.fresh_dir()?;
        let data = dir.data();
        let client = Client::open(&data)?;
        let now = Utc::now();
        for i in 0..n {
            let def = command_def(
                format!("held-{i}"),
                loops_core::Schedule::Once { at: now },
                Exec::True,
            );
            let mut def = def;
            if let loops_core::Target::Command(c) = &mut def.target {
                c.command = "sleep".to_owned();
                c.args = vec!["600".to_owned()];
            }
            client
                .create(def, now)
                .with_context(|| format!("cannot create loop held-{i}"))?;
        }
        drop(client);
        let cli = |args: &[&str]| -> Result<String> {
            let out = Command::new(&self.bin)
                .args(args)
                .env("LOOPS_DATA_DIR", &data)
                .stdin(Stdio::null())
                .output()?;
            if !out.status.success() {
                bail!(
                    "`loops {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let mc = (n + 16).to_string();
        cli(&["--json", "daemon", "start", "--max-concurrent", &mc])?;
        let store = SqliteStore::open(&dir.db())?;
        let held_by = |pid: &str| -> Result<usize> {
            Ok(store
                .running_runs(None)?
                .iter()
                .filter(|r| {
                    r.pid.is_some() && r.claimed_by.as_deref().is_some_and(|c| c.contains(pid))
                })
                .count())
        };
        let pid_of = |text: &str| -> Result<String> {
            let doc: serde_json::Value = serde_json::from_str(text)?;
            Ok(format!("/{}/", doc["pid"].as_u64().context("no pid")?))
        };
        let status = cli(&["--json", "daemon", "status"])?;
        let mut pid = pid_of(&status)?;
        let wait_all = |pid: &str| -> Result<Duration> {
            let begun = Mono::now();
            while held_by(pid)? < n {
                if begun.elapsed() > Duration::from_secs(120) {
                    bail!("only {} of {n} runs held after 120 s", held_by(pid)?);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(begun.elapsed())
        };
        wait_all(&pid)?;
        let mut command = vec![];
        let mut reattached = vec![];
        for _ in 0..reps {
            let begun = Mono::now();
            let out = cli(&["--json", "daemon", "restart", "--max-concurrent", &mc])?;
            command.push(ms(begun.elapsed()));
            pid = pid_of(&out)?;
            wait_all(&pid)?;
            reattached.push(ms(begun.elapsed()));
        }
        cli(&["daemon", "stop", "--terminate-runs"])?;
        let runs = store.running_runs(None)?.len();
        ensure!(runs == 0, "{runs} runs still running after the stop");
        let (command, reattached) = (Stats::of(command), Stats::of(reattached));
        println!("| runs in flight | restarts | `daemon restart` p50 / max ms | restart start → all runs held by the new daemon p50 / max ms | target ≤ 1,000 ms |");
        println!("|---:|---:|---:|---:|---|");
        println!(
            "| {n} | {reps} | {:.0} / {:.0} | {:.0} / {:.0} | {} |",
            command.p50,
            command.max,
            reattached.p50,
            reattached.max,
            verdict(reattached.max <= 1_000.0)
        );
        Ok(())
    }
}
