//! Status files: how a supervised unit ended, written by its supervisor when no daemon
//! took the news (`supervise/<unit>.status`: the [`ExitReport`] as JSON, 0600, written
//! to a temporary file and renamed, so a reader sees all of it or nothing). Whoever
//! records the run — the next daemon, `loops tick`, any runner recovering it on this
//! host — reads it instead of calling the run abandoned, then removes it.

use super::protocol::ExitReport;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Longest status file read: two output tails of the largest kept size, escaped as
/// JSON, with room to spare.
const MAX_STATUS_BYTES: u64 = 16 * 1024 * 1024;

/// The status file of `unit` in the supervise dir `dir`.
pub fn path(dir: &Path, unit: &str) -> PathBuf {
    dir.join(format!("{unit}.status"))
}

/// Writes `report` as its unit's status file.
pub fn write(dir: &Path, report: &ExitReport) -> std::io::Result<()> {
    let text = serde_json::to_string(report).map_err(std::io::Error::other)?;
    crate::spool::write_atomic(&path(dir, &report.unit), &text)
}

/// The status file of `unit`, if there is a readable one. A file that does not parse
/// (cut short by a full disk before the rename could not happen; hand-edited) is
/// reported once and treated as absent.
pub fn read(dir: &Path, unit: &str) -> Option<ExitReport> {
    let path = path(dir, unit);
    let file = std::fs::File::open(&path).ok()?;
    let mut text = String::new();
    if let Err(e) = file.take(MAX_STATUS_BYTES).read_to_string(&mut text) {
        tracing::warn!(path = %path.display(), error = %e, "cannot read a status file");
        return None;
    }
    match serde_json::from_str::<ExitReport>(&text) {
        Ok(report) if report.unit == unit => Some(report),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "a status file names another unit; ignored");
            None
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "a status file does not parse; ignored");
            None
        }
    }
}

/// Removes `unit`'s status file; a missing one is fine.
pub fn remove(dir: &Path, unit: &str) {
    let path = path(dir, unit);
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::debug!(path = %path.display(), error = %e, "cannot remove a status file");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::executor::ExecResult;

    #[test]
    fn written_whole_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let report = ExitReport {
            unit: "run-0123456789ab".to_owned(),
            group: "0123456789ab".to_owned(),
            result: ExecResult::unspecified("boom".to_owned(), chrono::Utc::now()),
            terminated_by: Some("because".to_owned()),
        };
        assert_eq!(read(dir.path(), &report.unit), None);
        write(dir.path(), &report).unwrap();
        let file = path(dir.path(), &report.unit);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read(dir.path(), &report.unit), Some(report.clone()));
        // A file under another unit's name is not taken for it.
        std::fs::copy(&file, path(dir.path(), "run-ffffffffffff")).unwrap();
        assert_eq!(read(dir.path(), "run-ffffffffffff"), None);
        std::fs::write(&file, b"{\"unit\":").unwrap();
        assert_eq!(read(dir.path(), &report.unit), None);
        remove(dir.path(), &report.unit);
        remove(dir.path(), &report.unit);
        assert!(!file.exists());
    }
}
