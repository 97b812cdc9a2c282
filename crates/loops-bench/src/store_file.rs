//! The whole store file: the daemon's start-up `quick_check` (and `loops doctor`'s
//! `integrity_check`), and `loops backup` / `loops restore`, over a seeded store.

use crate::harness::{file_len, ms, seed_history, BenchDir, Bencher, Stats};
use crate::StoreArgs;
use anyhow::{ensure, Result};
use loops_sqlite::SqliteStore;
use std::time::Instant as Mono;

impl Bencher {
    /// Benchmark 9: the daemon's start-up `quick_check` (and doctor's `integrity_check`)
    /// over a store of `loops` loops and `runs` finished runs; page cache warm.
    pub(super) fn quick_check(&self, args: &StoreArgs) -> Result<()> {
        let reps = args.reps;
        let dir = self.fresh_dir()?;
        seed_history(&dir, args)?;
        let mut quick = Vec::with_capacity(reps);
        let mut integrity = Vec::with_capacity(reps);
        for _ in 0..reps {
            let store = SqliteStore::open(&dir.db())?;
            let t = Mono::now();
            let problems = store.quick_check()?;
            quick.push(ms(t.elapsed()));
            ensure!(problems == ["ok"], "quick_check: {problems:?}");
            let t = Mono::now();
            let problems = store.integrity_check()?;
            integrity.push(ms(t.elapsed()));
            ensure!(problems == ["ok"], "integrity_check: {problems:?}");
        }
        let (quick, integrity) = (Stats::of(quick), Stats::of(integrity));
        store_table(
            args,
            &dir,
            "`quick_check` median ms | p90 | max | `integrity_check` median ms | p90 | max",
            &format!(
                "{} | {}",
                quick.median_p90_max(1),
                integrity.median_p90_max(1)
            ),
        );
        println!();
        println!("({reps} repetitions each, page cache warm: every repetition reads a database the previous one just read.)");
        Ok(())
    }

    /// `loops backup FILE` and `loops restore FILE` over a seeded store: the median
    /// wall clock of each and the copy's size.
    pub(super) fn backup(&self, args: &StoreArgs) -> Result<()> {
        let reps = args.reps;
        let dir = self.fresh_dir()?;
        seed_history(&dir, args)?;
        let data = dir.data();
        let copies = data.join("bench-copies");
        std::fs::create_dir_all(&copies)?;
        let mut backup = Vec::with_capacity(reps);
        let mut restore = Vec::with_capacity(reps);
        let mut size = 0;
        for i in 0..reps {
            let file = copies.join(format!("copy-{i}.db"));
            let path = file.to_string_lossy().into_owned();
            backup.push(ms(self.time_cli(&data, &["backup", &path])?));
            size = file_len(&file);
            restore.push(ms(self.time_cli(&data, &["restore", &path])?));
        }
        let (backup, restore) = (Stats::of(backup), Stats::of(restore));
        store_table(
            args,
            &dir,
            "backup MB | `loops backup` median ms | p90 | max | `loops restore` median ms | p90 | max",
            &format!(
                "{:.1} | {} | {}",
                size as f64 / 1e6,
                backup.median_p90_max(0),
                restore.median_p90_max(0)
            ),
        );
        println!();
        println!("({reps} repetitions, wall clock of the CLI process; each restore also keeps the store it replaces as a before-restore backup, so it copies twice.)");
        Ok(())
    }
}

/// A one-row table of numbers: the seeded store (loops, runs, stdout bytes a run, its
/// size in MB), then `columns` with their `cells`.
fn store_table(args: &StoreArgs, dir: &BenchDir, columns: &str, cells: &str) {
    println!("| loops | finished runs | stdout bytes/run | db MB | {columns} |");
    println!("{}|", "|---:".repeat(4 + columns.split(" | ").count()));
    println!(
        "| {} | {} | {} | {:.1} | {cells} |",
        args.loops,
        args.runs,
        args.output_bytes,
        file_len(&dir.db()) as f64 / 1e6
    );
}
