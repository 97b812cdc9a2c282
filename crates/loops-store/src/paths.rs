//! Where the store lives: the data dir (`$LOOPS_DATA_DIR`, else the platform data dir)
//! and the rule that keeps it private.
//!
//! One user owns a data dir. Its database holds prompts, env values and run output, and
//! every loop definition in it is a command the daemon runs as that user, so nothing
//! another local user can write may ever be read from it. [`prepare_data_dir`] creates
//! the dir 0700, tightens an existing one (and the files in [`PRIVATE_FILES`]) to
//! owner-only, and refuses a dir or file owned by someone else, or one it cannot
//! tighten. Tightening only removes permission bits: a 0400 database stays 0400.

use crate::StoreError;
use std::path::{Path, PathBuf};

/// File name of the SQLite database inside the data dir.
pub const DB_FILE: &str = "loops.db";

/// Environment variable that overrides the data dir.
pub const DATA_DIR_ENV: &str = "LOOPS_DATA_DIR";

/// Every file loops keeps in the data dir: the database and its WAL companions, and
/// the daemon's log, pid file and wake socket (their names are defined next to their
/// writers in `loops-runtime`, whose tests check they are listed here). Each must be
/// owned by the data dir's owner and is kept 0600 or tighter.
pub const PRIVATE_FILES: &[&str] = &[
    DB_FILE,
    "loops.db-wal",
    "loops.db-shm",
    "daemon.log",
    "daemon.pid",
    "daemon.sock",
    "http.token",
];

/// The data dir: `$LOOPS_DATA_DIR` when set and non-empty, else the platform data dir
/// plus `loops` (`~/.local/share/loops` on Linux). Does not create it.
pub fn data_dir() -> Result<PathBuf, StoreError> {
    if let Some(dir) = std::env::var_os(DATA_DIR_ENV) {
        if !dir.is_empty() {
            return Ok(PathBuf::from(dir));
        }
    }
    match dirs::data_dir() {
        Some(base) => Ok(base.join("loops")),
        None => Err(StoreError::DataDir {
            path: String::new(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no platform data directory is known; set {DATA_DIR_ENV}"),
            ),
        }),
    }
}

/// Makes `dir` a private data dir, or refuses it: creates it (and missing parents)
/// with mode 0700 when it does not exist; otherwise checks that it and every file of
/// [`PRIVATE_FILES`] in it belong to the effective user and strips group and other
/// permission bits where set. A dir or file owned by another user, or one whose mode
/// cannot be tightened, yields [`StoreError::NotPrivate`] and nothing is changed
/// beyond what was already tightened.
pub fn prepare_data_dir(dir: &Path) -> Result<(), StoreError> {
    secure_data_dir(dir).map(drop)
}

/// [`prepare_data_dir`], returning what it tightened (`"data dir /x: 0777 → 0700"`),
/// for `loops doctor`.
pub fn secure_data_dir(dir: &Path) -> Result<Vec<String>, StoreError> {
    let err = |source: std::io::Error| StoreError::DataDir {
        path: dir.display().to_string(),
        source,
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a directory",
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_private_dir(dir).map_err(err)?;
            return Ok(Vec::new());
        }
        Err(e) => return Err(err(e)),
    }
    imp::secure_existing(dir)
}

/// Owner and mode of the data dir and of each file of [`PRIVATE_FILES`] that exists,
/// without changing anything (for `loops doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionReport {
    /// The dir or file.
    pub path: PathBuf,
    /// Its owner's uid.
    pub uid: u32,
    /// Its permission bits (`0o600`).
    pub mode: u32,
    /// What is wrong with it, if anything (another owner, group/other bits).
    pub problem: Option<String>,
}

/// Reports the owner and mode of `dir` and of each existing file of [`PRIVATE_FILES`].
/// Empty when the dir does not exist.
pub fn inspect_data_dir(dir: &Path) -> Vec<PermissionReport> {
    imp::inspect(dir)
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // The umask may have narrowed (or, if odd, broken) the mode; we created the
    // directory, so we own its mode.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
mod imp {
    use super::{PermissionReport, PRIVATE_FILES};
    use crate::StoreError;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    /// Bits a private dir may keep (owner rwx) and a private file may keep (owner rw).
    const DIR_KEEP: u32 = 0o700;
    const FILE_KEEP: u32 = 0o600;

    fn me() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    fn refuse(path: &Path, what: &str, problem: String) -> StoreError {
        StoreError::NotPrivate {
            subject: format!("{what}{}", path.display()),
            problem,
        }
    }

    fn not_yours(uid: u32) -> String {
        format!("is owned by uid {uid}, not by you (uid {})", me())
    }

    /// The checks shared by [`secure_existing`] and [`inspect`]: `Err` is a reason to
    /// refuse; `Ok(Some(mode))` a mode to tighten to.
    fn judge(path: &Path, keep: u32) -> std::io::Result<Result<Option<u32>, String>> {
        let link = std::fs::symlink_metadata(path)?;
        if link.file_type().is_symlink() && link.uid() != me() && link.uid() != 0 {
            return Ok(Err(format!(
                "is a symlink owned by uid {}, not by you (uid {})",
                link.uid(),
                me()
            )));
        }
        let meta = std::fs::metadata(path)?;
        if meta.uid() != me() {
            return Ok(Err(not_yours(meta.uid())));
        }
        let mode = meta.permissions().mode() & 0o7777;
        Ok(Ok((mode & !keep != 0).then_some(mode & keep)))
    }

    pub(super) fn secure_existing(dir: &Path) -> Result<Vec<String>, StoreError> {
        let mut tightened = Vec::new();
        let io = |path: &Path, e: std::io::Error| StoreError::DataDir {
            path: path.display().to_string(),
            source: e,
        };
        let mut items = vec![(dir.to_path_buf(), DIR_KEEP, "data dir ")];
        items.extend(
            PRIVATE_FILES
                .iter()
                .map(|name| (dir.join(name), FILE_KEEP, "")),
        );
        for (path, keep, what) in items {
            let verdict = match judge(&path, keep) {
                Ok(v) => v,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && what.is_empty() => continue,
                Err(e) => return Err(io(&path, e)),
            };
            match verdict {
                Err(problem) => return Err(refuse(&path, what, problem)),
                Ok(None) => {}
                Ok(Some(mode)) => {
                    let old = std::fs::metadata(&path)
                        .map(|m| m.permissions().mode() & 0o7777)
                        .unwrap_or(0);
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| {
                            refuse(
                                &path,
                                what,
                                format!(
                                    "has mode {old:04o} and cannot be tightened to {mode:04o} ({e})"
                                ),
                            )
                        })?;
                    tightened.push(format!("{what}{}: {old:04o} → {mode:04o}", path.display()));
                }
            }
        }
        Ok(tightened)
    }

    pub(super) fn inspect(dir: &Path) -> Vec<PermissionReport> {
        let mut items = vec![(dir.to_path_buf(), DIR_KEEP)];
        items.extend(PRIVATE_FILES.iter().map(|name| (dir.join(name), FILE_KEEP)));
        let mut reports = Vec::new();
        for (path, keep) in items {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            let problem = match judge(&path, keep) {
                Ok(Err(problem)) => Some(problem),
                Ok(Ok(Some(_))) => Some(format!(
                    "mode {mode:04o} lets other users in (want {keep:04o} or tighter)"
                )),
                Ok(Ok(None)) => None,
                Err(e) => Some(e.to_string()),
            };
            reports.push(PermissionReport {
                path,
                uid: meta.uid(),
                mode,
                problem,
            });
        }
        reports
    }
}

#[cfg(not(unix))]
mod imp {
    use super::PermissionReport;
    use crate::StoreError;
    use std::path::Path;

    pub(super) fn secure_existing(_dir: &Path) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    pub(super) fn inspect(_dir: &Path) -> Vec<PermissionReport> {
        Vec::new()
    }
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_missing_dirs_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        prepare_data_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn tightens_without_adding_bits() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for (name, bits) in [
            ("loops.db", 0o644),
            ("daemon.log", 0o666),
            ("daemon.pid", 0o400),
        ] {
            std::fs::write(dir.join(name), b"x").unwrap();
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(bits))
                .unwrap();
        }
        let done = secure_data_dir(&dir).unwrap();
        assert_eq!(done.len(), 3, "{done:?}");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("loops.db")), 0o600);
        assert_eq!(mode(&dir.join("daemon.log")), 0o600);
        assert_eq!(mode(&dir.join("daemon.pid")), 0o400, "never loosened");
        assert!(secure_data_dir(&dir).unwrap().is_empty(), "idempotent");
        assert!(inspect_data_dir(&dir).iter().all(|r| r.problem.is_none()));
    }

    #[test]
    fn reports_loose_modes_without_changing_them() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let reports = inspect_data_dir(tmp.path());
        assert_eq!(reports.len(), 1);
        assert!(reports[0].problem.as_deref().unwrap().contains("0755"));
        assert_eq!(mode(tmp.path()), 0o755);
    }

    #[test]
    fn a_file_in_place_of_the_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("data");
        std::fs::write(&file, b"x").unwrap();
        let err = prepare_data_dir(&file).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
    }
}
