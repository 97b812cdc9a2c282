//! `backup [FILE] [--force]` and `restore FILE` (issue #23): a consistent copy of the
//! SQLite store, and swapping one in while nothing uses the store.

use super::Context;
use crate::exit::Exit;
use crate::output::{self, outln, print_json};
use crate::Failure;
use clap::Args;
use loops_runtime::client::{Client, StoreCounts};

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the copy (default: <data dir>/backups/loops-manual-<UTC time>.db).
    pub file: Option<std::path::PathBuf>,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup to restore (a file `loops backup` wrote, or a kept one in
    /// <data dir>/backups).
    pub file: std::path::PathBuf,
}

pub fn backup(ctx: &Context, args: BackupArgs) -> Result<Exit, Failure> {
    let info = Client::backup_store(
        &ctx.data_dir()?,
        ctx.store_url(),
        args.file.as_deref(),
        args.force,
    )?;
    output::report(
        ctx.json,
        &info,
        format_args!(
            "backed up to {} ({}): {}",
            info.path.display(),
            size_text(info.bytes),
            counts_text(&info.counts)
        ),
    )
}

pub fn restore(ctx: &Context, args: RestoreArgs) -> Result<Exit, Failure> {
    let restored = Client::restore(&ctx.data_dir()?, ctx.store_url(), &args.file)?;
    if ctx.json {
        print_json(&restored)?;
        return Ok(Exit::Success);
    }
    outln!(
        "restored {} into {} ({}): {}",
        restored.from.display(),
        restored.store.path.display(),
        size_text(restored.store.bytes),
        counts_text(&restored.store.counts)
    )?;
    match &restored.kept {
        Some(kept) => outln!("the store as it was is kept in {}", kept.path.display())?,
        None => outln!("the store was empty; nothing kept")?,
    }
    Ok(Exit::Success)
}

/// `3 loops, 1 workflow specs, 120 runs, 4 workflow runs (8 steps), 300 events`.
fn counts_text(c: &StoreCounts) -> String {
    format!(
        "{} loops, {} workflow specs, {} runs, {} workflow runs ({} steps), {} events",
        c.loops, c.workflows, c.runs, c.workflow_runs, c.step_runs, c.events
    )
}

/// A size in bytes, KiB or MiB, one decimal.
fn size_text(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} bytes")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(super::size_text(512), "512 bytes");
        assert_eq!(super::size_text(4096), "4.0 KiB");
        assert_eq!(super::size_text(3 * 1024 * 1024 + 512 * 1024), "3.5 MiB");
    }
}
