//! Reading a file at a path a user named — a bundle, an OpenLoops database, a workflow
//! spec, a prompt file, the HTTP token file, the daemon's pid file — the one way every
//! front end does it: regular files only, opened without blocking, read with a bound.
//!
//! A FIFO opened for reading waits for a writer (for ever, when none comes), and one
//! with a writer that writes nothing waits in `read`; `/dev/zero` or `/dev/urandom`
//! never end; a terminal or a tape device acts on open. So the path is checked with
//! `stat` before it is opened, opened with `O_NONBLOCK | O_NOCTTY` (a FIFO swapped in
//! meanwhile returns at once instead of waiting), and checked again on the open file;
//! anything but a regular file is refused with one line naming what it is. Then at
//! most `limit + 1` bytes are read, so a file that grows without end costs the bound.
//! stdin (`-`, where a command takes it) is the caller's to bound.

use std::fs::{File, FileType};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a user-named file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UserFileError {
    /// It could not be opened or read (missing, a permission, not a regular file…):
    /// the I/O error says which.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It holds more than the limit.
    #[error("larger than {limit} bytes")]
    TooLarge { limit: usize },
}

/// What a file type is, for the refusal: `a FIFO`, `a directory`, …
fn kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn refuse(t: FileType) -> std::io::Error {
    let what = kind(t);
    let message = if what == "not a regular file" {
        what.to_owned()
    } else {
        format!("not a regular file ({what})")
    };
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// Opens the regular file at `path` (symlinks followed) for reading, without ever
/// blocking on it; anything else is an [`std::io::ErrorKind::InvalidInput`] error that
/// says what it is (`not a regular file (a FIFO)`).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let before = std::fs::metadata(path)?;
    if !before.is_file() {
        return Err(refuse(before.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)?;
    // What was opened, not what the path named a moment ago. On a regular file
    // `O_NONBLOCK` changes nothing about reads.
    let opened = file.metadata()?;
    if !opened.is_file() {
        return Err(refuse(opened.file_type()));
    }
    Ok(file)
}

/// Reads the regular file at `path` ([`open_regular`]): at most `limit` bytes, else
/// [`UserFileError::TooLarge`] after reading `limit + 1`. A database file a store of
/// this process has open is refused unopened: closing our descriptor of it would drop
/// that store's locks ([`crate::open_files`]).
pub fn read_bounded(path: &Path, limit: usize) -> Result<Vec<u8>, UserFileError> {
    if std::fs::metadata(path).is_ok_and(|m| crate::open_files::is_claimed(&m)) {
        return Err(UserFileError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the database of a store this command has open, not a file to read",
        )));
    }
    let file = open_regular(path)?;
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut bytes = Vec::new();
    file.take(cap).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(UserFileError::TooLarge { limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_database_this_process_has_open_is_refused_unopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loops.db");
        std::fs::write(&path, b"SQLite format 3\0").unwrap();
        let (_, claim) = crate::open_files::claim(&path, open_regular).unwrap();
        let err = read_bounded(&path, 100).unwrap_err().to_string();
        assert!(err.contains("a store this command has open"), "{err}");
        drop(claim);
        assert_eq!(read_bounded(&path, 100).unwrap(), b"SQLite format 3\0");
    }

    #[test]
    fn regular_files_are_read_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap(), b"0123456789");
        assert!(matches!(
            read_bounded(&path, 9),
            Err(UserFileError::TooLarge { limit: 9 })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_bounded(&link, 10).unwrap().len(), 10);
        let missing = read_bounded(&dir.path().join("nope"), 10).unwrap_err();
        assert!(
            matches!(&missing, UserFileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let began = Instant::now();
        let cases = [
            (fifo.as_path(), "not a regular file (a FIFO)"),
            (
                Path::new("/dev/zero"),
                "not a regular file (a character device)",
            ),
            (dir.path(), "not a regular file (a directory)"),
        ];
        for (path, expected) in cases {
            let err = read_bounded(path, 1 << 20).unwrap_err();
            assert_eq!(err.to_string(), expected, "{}", path.display());
        }
        assert!(began.elapsed() < Duration::from_secs(2));
    }
}
