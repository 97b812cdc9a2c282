//! Where the store lives: the data dir (`$LOOPS_DATA_DIR`, else the platform data dir)
//! and how it is created (owner-only, since run output and prompts may be sensitive).

use crate::StoreError;
use std::path::{Path, PathBuf};

/// File name of the SQLite database inside the data dir.
pub const DB_FILE: &str = "loops.db";

/// Environment variable that overrides the data dir.
pub const DATA_DIR_ENV: &str = "LOOPS_DATA_DIR";

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

/// Creates `dir` (and missing parents) with mode 0700 when it does not exist. An
/// existing directory is left as the user made it: its mode is their choice.
pub fn prepare_data_dir(dir: &Path) -> Result<(), StoreError> {
    let err = |source: std::io::Error| StoreError::DataDir {
        path: dir.display().to_string(),
        source,
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a directory",
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    create_private_dir(dir).map_err(err)
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
