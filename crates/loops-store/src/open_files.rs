//! The database files this process has open through SQLite, so that nothing of ours
//! ever closes a descriptor of theirs.
//!
//! SQLite locks a database with POSIX advisory locks, which belong to the *process*:
//! closing any descriptor of the file — even one that SQLite never saw — drops every
//! lock the process holds on it ("How To Corrupt An SQLite Database File", §2.2).
//! Checking a file's header with a plain `open`/`read`/`close` while a connection of
//! this process held its shared lock did exactly that: the daemon leaving the store
//! then found no other reader, took the file as its last user, checkpointed and
//! removed the WAL and its index under us, and our connections went on reading the
//! removed index — the store as it was before the daemon left, for as long as they
//! lived (`daemon restart` waited 10 s for a lease row it could not see).
//!
//! So every header check goes through [`claim`], under one process-wide lock: a file
//! some connection of ours has open (same device and inode) is not opened again — it
//! is a database already, checked when it was first claimed — and a file nobody here
//! has open is opened, read and closed before any connection can claim it. A claim is
//! released when its [`Claim`] drops, after the connection that needed it closed.
//! The other reader of files by path, [`crate::user_file::read_bounded`], refuses a
//! claimed file ([`is_claimed`]): a bundle or prompt "file" that is the store's own
//! database would have been the same close.
//!
//! The registry lives here rather than in the SQLite backend because both readers of
//! paths need it; it knows nothing of SQLite but the 16 bytes of its magic string.

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The first 16 bytes of every SQLite database file.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// A file's identity: (device, inode).
type FileKey = (u64, u64);

/// How many live claims each file has.
static CLAIMS: Mutex<Option<HashMap<FileKey, usize>>> = Mutex::new(None);

fn claims() -> MutexGuard<'static, Option<HashMap<FileKey, usize>>> {
    // Counts only: a panic elsewhere cannot leave them half-updated.
    CLAIMS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a file's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// An empty file (a store not set up yet).
    Empty,
    /// It starts with SQLite's magic string.
    Sqlite,
    /// Anything else (too short, or other bytes).
    Foreign,
}

/// A file this process may hold SQLite locks on; released (its count decremented)
/// when dropped. Keep it alive as long as a connection to the file is open.
#[derive(Debug)]
pub struct Claim {
    key: FileKey,
}

impl Claim {
    /// One more claim of the same file (for a second connection to it).
    pub fn again(&self) -> Self {
        let mut guard = claims();
        *guard
            .get_or_insert_with(HashMap::new)
            .entry(self.key)
            .or_insert(0) += 1;
        Self { key: self.key }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut guard = claims();
        if let Some(map) = guard.as_mut() {
            if let Some(count) = map.get_mut(&self.key) {
                *count -= 1;
                if *count == 0 {
                    map.remove(&self.key);
                }
            }
        }
    }
}

/// Reads `path`'s header (opening it with `open_regular`: a regular file only, never
/// blocking) and claims the file, unless this process has it open already: then its
/// header is known without opening it (a claimed file is a database, or empty until
/// SQLite writes its first page).
pub fn claim(
    path: &Path,
    open_regular: impl FnOnce(&Path) -> std::io::Result<std::fs::File>,
) -> std::io::Result<(Header, Claim)> {
    let mut guard = claims();
    let map = guard.get_or_insert_with(HashMap::new);
    if let Ok(meta) = std::fs::metadata(path) {
        let key = (meta.dev(), meta.ino());
        if meta.is_file() {
            if let Some(count) = map.get_mut(&key) {
                *count += 1;
                let header = if meta.len() == 0 {
                    Header::Empty
                } else {
                    Header::Sqlite
                };
                return Ok((header, Claim { key }));
            }
        }
    }
    let mut file = open_regular(path)?;
    let meta = file.metadata()?;
    let key = (meta.dev(), meta.ino());
    let header = if meta.len() == 0 {
        Header::Empty
    } else {
        let mut head = [0u8; 16];
        if file.read_exact(&mut head).is_ok() && &head == SQLITE_MAGIC {
            Header::Sqlite
        } else {
            Header::Foreign
        }
    };
    if map.contains_key(&key) {
        // The path was replaced by a file we hold between the two looks: closing this
        // descriptor would drop our locks on it, so it is kept open (one descriptor,
        // for a race nobody should ever run).
        std::mem::forget(file);
    } else {
        drop(file);
    }
    *map.entry(key).or_insert(0) += 1;
    Ok((header, Claim { key }))
}

/// Whether the file `meta` describes is claimed: some connection of this process has
/// it open, and a descriptor of ours on it must not be closed.
pub fn is_claimed(meta: &std::fs::Metadata) -> bool {
    claims()
        .as_ref()
        .is_some_and(|map| map.contains_key(&(meta.dev(), meta.ino())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> std::io::Result<std::fs::File> {
        std::fs::File::open(path)
    }

    #[test]
    fn a_claimed_file_is_not_opened_again_and_claims_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        std::fs::write(&path, b"SQLite format 3\0rest").unwrap();
        let (header, first) = claim(&path, open).unwrap();
        assert_eq!(header, Header::Sqlite);
        let (header, second) =
            claim(&path, |_| panic!("a claimed file must not be opened")).unwrap();
        assert_eq!(header, Header::Sqlite);
        drop(first);
        let (_, third) = claim(&path, |_| panic!("still claimed by the second")).unwrap();
        drop(second);
        drop(third);
        let mut opened = false;
        claim(&path, |p| {
            opened = true;
            open(p)
        })
        .unwrap();
        assert!(opened, "no claim left: read again");
    }

    #[test]
    fn headers_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        let foreign = dir.path().join("foreign");
        let short = dir.path().join("short");
        std::fs::write(&empty, b"").unwrap();
        std::fs::write(&foreign, b"not a database at all, no").unwrap();
        std::fs::write(&short, b"SQLite").unwrap();
        assert_eq!(claim(&empty, open).unwrap().0, Header::Empty);
        assert_eq!(claim(&foreign, open).unwrap().0, Header::Foreign);
        assert_eq!(claim(&short, open).unwrap().0, Header::Foreign);
        assert!(claim(&dir.path().join("missing"), open).is_err());
    }
}
