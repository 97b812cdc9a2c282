//! The daemon's files in the data dir: its pid file, and the store file it watches (a
//! store removed or replaced under it stops it).

use super::*;

/// The database file the daemon serves, by identity: `rm loops.db` (or putting
/// another file in its place) leaves SQLite working on the unlinked inode, where new
/// loops never appear. One `stat` per pass notices.
pub(super) struct StoreFile {
    path: PathBuf,
    identity: Option<(u64, u64)>,
}

impl StoreFile {
    /// Records the identity of `data_dir`'s database now (`None`, and no checks, for
    /// a store that is not a file there).
    pub(super) fn record(data_dir: &Path) -> Self {
        let path = data_dir.join(loops_store::DB_FILE);
        Self {
            identity: wake::file_identity(&path),
            path,
        }
    }

    /// No file to watch (a store that is not a file in the data dir).
    pub(super) fn none() -> Self {
        Self {
            path: PathBuf::new(),
            identity: None,
        }
    }

    /// Fails with [`DaemonError::StoreGone`] when the path no longer names the file
    /// recorded.
    pub(super) fn check(&self) -> Result<(), DaemonError> {
        let Some(recorded) = self.identity else {
            return Ok(());
        };
        let detail = match std::fs::metadata(&self.path) {
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                if (meta.dev(), meta.ino()) == recorded {
                    return Ok(());
                }
                "another file is in its place"
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "it no longer exists",
            // Unreadable for a moment (permissions being fixed, say): not proof.
            Err(_) => return Ok(()),
        };
        Err(DaemonError::StoreGone {
            path: self.path.display().to_string(),
            detail,
        })
    }
}

pub(super) fn write_pid_file(dir: &Path, pid: u32) -> Result<(), DaemonError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(PID_FILE);
    let tmp = dir.join(format!(".{PID_FILE}.{pid}"));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(format!("{pid}\n").as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| DaemonError::Io {
            context: format!("cannot write pid file {}", path.display()),
            source,
        })
}

pub(super) fn remove_pid_file(dir: &Path, pid: u32) {
    let path = dir.join(PID_FILE);
    if read_pid_file(dir) == Some(pid) {
        let _ = std::fs::remove_file(path);
    }
}

/// The pid recorded in the data dir's pid file, if any.
pub fn read_pid_file(dir: &Path) -> Option<u32> {
    crate::daemon_view::pid_file_text(&dir.join(PID_FILE))?
        .trim()
        .parse()
        .ok()
}
