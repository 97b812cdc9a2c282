//! SQLite's errors as store errors. Inside the backend a statement's error stays a
//! `rusqlite::Error` ([`Error::Sqlite`]) until it leaves through the [`Store`] trait,
//! where [`from_sqlite`] classifies it: a damaged file becomes
//! [`StoreError::Corrupt`] whichever statement met it, and the codes a daemon retries
//! become transient [`StoreError::Backend`] kinds.
//!
//! [`Store`]: loops_store::Store

use loops_store::{BackendErrorKind, CorruptKind, StoreError};
use rusqlite::{ffi, ErrorCode};

loops_store::backend_error!(
    /// An error inside the backend: a store error already decided, or SQLite's own.
    Sqlite(rusqlite::Error),
    from_sqlite
);

impl Error {
    /// SQLite's failure to find a free id after `ID_ATTEMPTS` random draws.
    pub(crate) fn ids_exhausted(what: &str) -> Self {
        Error::Sqlite(rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_CONSTRAINT),
            Some(format!("could not allocate a unique {what} id")),
        ))
    }
}

/// Every SQLite error leaves the backend here, so a corrupt database is recognised
/// whichever statement met it.
pub(crate) fn from_sqlite(e: rusqlite::Error) -> StoreError {
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => return corrupt_at("", e),
        Some(ErrorCode::DiskFull | ErrorCode::OutOfMemory) => BackendErrorKind::Full,
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => BackendErrorKind::Busy,
        Some(ErrorCode::SystemIoFailure | ErrorCode::CannotOpen) => BackendErrorKind::Io,
        Some(ErrorCode::ReadOnly) => BackendErrorKind::ReadOnly,
        _ => BackendErrorKind::Other,
    };
    StoreError::backend(kind, e)
}

/// [`StoreError::Corrupt`] for `path` (empty: not known here): damaged when SQLite
/// says `SQLITE_CORRUPT`, otherwise not a loops database.
pub(crate) fn corrupt_at(path: &str, e: rusqlite::Error) -> StoreError {
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt) => CorruptKind::Damaged,
        _ => CorruptKind::NotAStore,
    };
    StoreError::Corrupt {
        path: path.to_owned(),
        kind,
        source: Box::new(e),
    }
}

/// Whether SQLite says the file is damaged or is not a database at all.
pub(crate) fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

/// Whether a SQLite error means "cannot write here". While opening, `CANTOPEN` also
/// counts: the read-only inspection already proved the file readable, so failing to
/// open it (or its `-wal`/`-shm` companions) for writing is a permission problem.
pub(crate) fn is_readonly_error(e: &rusqlite::Error, opening: bool) -> bool {
    match e.sqlite_error_code() {
        Some(ErrorCode::ReadOnly) => true,
        Some(ErrorCode::CannotOpen) => opening,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(c: i32) -> StoreError {
        from_sqlite(rusqlite::Error::SqliteFailure(ffi::Error::new(c), None))
    }

    #[test]
    fn transient_errors_are_told_apart() {
        assert!(code(ffi::SQLITE_FULL).is_transient());
        assert!(code(ffi::SQLITE_BUSY).is_transient());
        assert!(code(ffi::SQLITE_LOCKED).is_transient());
        assert!(code(ffi::SQLITE_IOERR).is_transient());
        assert!(code(ffi::SQLITE_NOMEM).is_transient());
        assert!(code(ffi::SQLITE_CANTOPEN).is_transient());
        assert!(code(ffi::SQLITE_READONLY).is_transient());
        assert!(!StoreError::LeaseLost.is_transient());
        assert!(!StoreError::NotRunning("x".into()).is_transient());
        let corrupt = code(ffi::SQLITE_CORRUPT);
        assert!(!corrupt.is_transient());
        assert!(corrupt.is_corrupt());
        assert!(code(ffi::SQLITE_NOTADB).is_corrupt());
        assert!(!code(ffi::SQLITE_CONSTRAINT).is_transient());
    }

    #[test]
    fn messages_are_sqlites() {
        let e = rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_CONSTRAINT),
            Some("could not allocate a unique run id".to_owned()),
        );
        assert_eq!(
            from_sqlite(e).to_string(),
            "database error: could not allocate a unique run id"
        );
        let damaged = code(ffi::SQLITE_CORRUPT).to_string();
        assert!(
            damaged.starts_with("the loops database is corrupt (")
                && damaged.contains("nothing was written"),
            "{damaged}"
        );
        let foreign = code(ffi::SQLITE_NOTADB).to_string();
        assert!(
            foreign.starts_with("the loops database is not a loops database (or is corrupt)"),
            "{foreign}"
        );
    }
}
