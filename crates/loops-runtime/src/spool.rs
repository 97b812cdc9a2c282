//! Spooled output: while a run (or a workflow step) executes, the tails of its stdout
//! and stderr are copied to files in `<data dir>/spool/`, so a run whose runner dies
//! (`kill -9`, a crash, a power cut) keeps what it printed before: the daemon that
//! recovers or adopts it reads them back into the run's row.
//!
//! Invariants:
//! - each file holds at most the captured tail (the same bound as the row, plus the
//!   `[truncated N bytes]` marker), written whole to a temporary file and renamed over
//!   the old one, so a reader never sees a half-written tail;
//! - a spill happens at most every [`SPILL_EVERY`] and only after new output, so a
//!   short run never touches the disk and a flooding one costs a bounded write rate;
//! - files are owner-only (0600 in a 0700 directory), like the database: output can
//!   hold secrets;
//! - the files of a run are removed once its row is finalized.

use loops_core::RunId;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Directory name inside the data dir.
pub const SPOOL_DIR: &str = "spool";
/// Least time between two spills of one run's output.
pub const SPILL_EVERY: Duration = Duration::from_millis(250);

/// The spool directory of a data dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// The spool of `data_dir` (`<data_dir>/spool`); nothing is created yet.
    pub fn in_data_dir(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(SPOOL_DIR),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory (mode 0700) when missing.
    pub fn ensure(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The files of a loop run.
    pub fn for_run(&self, run: &RunId) -> SpoolFiles {
        self.files(&format!("run-{run}"))
    }

    /// The files of a workflow step run (by the step run's id).
    pub fn for_step(&self, step_run_id: &str) -> SpoolFiles {
        self.files(&format!("step-{step_run_id}"))
    }

    fn files(&self, stem: &str) -> SpoolFiles {
        SpoolFiles {
            stdout: self.dir.join(format!("{stem}.stdout")),
            stderr: self.dir.join(format!("{stem}.stderr")),
        }
    }
}

/// Where one process's output tails are spooled.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpoolFiles {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl SpoolFiles {
    /// The spooled stdout and stderr (empty when nothing was spooled), each read up to
    /// `max` bytes plus room for the truncation marker.
    pub fn read(&self, max: usize) -> (String, String) {
        (
            read_bounded(&self.stdout, max),
            read_bounded(&self.stderr, max),
        )
    }

    /// Removes both files; missing files are fine.
    pub fn remove(&self) {
        for path in [&self.stdout, &self.stderr] {
            if let Err(e) = std::fs::remove_file(path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::debug!(path = %path.display(), error = %e, "could not remove spooled output");
                }
            }
        }
    }
}

/// Room for `[truncated N bytes]\n` on top of the tail itself.
const MARKER_ROOM: usize = 64;

fn read_bounded(path: &Path, max: usize) -> String {
    let Ok(file) = std::fs::File::open(path) else {
        return String::new();
    };
    let mut bytes = Vec::new();
    let limit = u64::try_from(max.saturating_add(MARKER_ROOM)).unwrap_or(u64::MAX);
    if let Err(e) = file.take(limit).read_to_end(&mut bytes) {
        tracing::debug!(path = %path.display(), error = %e, "could not read spooled output");
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Replaces `path` with `text`: written to a temporary file (0600) beside it, then
/// renamed over it.
pub(crate) fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_per_run_and_step() {
        let spool = Spool::in_data_dir(Path::new("/d"));
        let run = spool.for_run(&RunId::new("0123456789ab"));
        assert_eq!(run.stdout, Path::new("/d/spool/run-0123456789ab.stdout"));
        assert_eq!(run.stderr, Path::new("/d/spool/run-0123456789ab.stderr"));
        let step = spool.for_step("ba9876543210");
        assert_eq!(step.stdout, Path::new("/d/spool/step-ba9876543210.stdout"));
    }

    #[test]
    fn write_read_remove_round_trip() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = Spool::in_data_dir(dir.path());
        spool.ensure().expect("ensure");
        spool.ensure().expect("ensure twice");
        let mode = std::fs::metadata(spool.dir())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let files = spool.for_run(&RunId::new("aaaaaaaaaaaa"));
        assert_eq!(files.read(16), (String::new(), String::new()));
        write_atomic(&files.stdout, "hello").expect("write");
        write_atomic(&files.stdout, "hello again").expect("rewrite");
        let mode = std::fs::metadata(&files.stdout)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(files.read(1024).0, "hello again");
        // Bounded: never more than max plus the marker's room.
        write_atomic(&files.stderr, &"x".repeat(500)).expect("write");
        assert_eq!(files.read(10).1.len(), 10 + MARKER_ROOM);
        files.remove();
        files.remove();
        assert!(!files.stdout.exists() && !files.stderr.exists());
    }
}
