//! Store errors, the same for every backend: what a caller can tell apart (a missing
//! row, a lost lease, a damaged or read-only store, a transient failure) without
//! knowing which database is behind the trait. A backend maps its own library's
//! errors onto these, and keeps the original as the `source`; [`backend_error!`]
//! declares each backend's internal error type around its library's error.

/// A backend library's own error, kept as the source of a [`StoreError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("a loop named {0:?} already exists")]
    DuplicateName(String),
    #[error("an active workflow named {0:?} already exists (use --replace to archive it and store a new version)")]
    DuplicateWorkflow(String),
    #[error("workflow {0} not found")]
    WorkflowNotFound(String),
    #[error("workflow run {0} not found")]
    WorkflowRunNotFound(String),
    #[error("loop {0} not found")]
    LoopNotFound(String),
    #[error("run {0} not found")]
    RunNotFound(String),
    #[error("run {0} is not running")]
    NotRunning(String),
    #[error("daemon lease lost")]
    LeaseLost,
    /// The store is damaged, or is not a loops store at all: found on opening (`path`
    /// set) or by any later statement (`path` empty when the caller did not know it).
    /// Never retried: the write it interrupted rolled back, and nothing else is
    /// attempted.
    #[error("{}", corrupt_message(path, *kind, source))]
    Corrupt {
        path: String,
        kind: CorruptKind,
        #[source]
        source: BoxError,
    },
    #[error(
        "database {path} was written by a newer loops (schema {found}, this build knows {known})"
    )]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
    /// The data dir or a file in it belongs to another user, or its mode lets other
    /// users in and cannot be tightened (`subject` names it: "data dir /x", "/x/loops.db").
    #[error("{subject} {problem}; refusing to use it")]
    NotPrivate { subject: String, problem: String },
    #[error("cannot use data dir {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The store does not accept writes: its file, directory or file system (SQLite),
    /// or the server (a PostgreSQL standby, a read-only role).
    #[error("{path} is read-only (file, directory or file system not writable): {source}")]
    ReadOnly {
        path: String,
        #[source]
        source: BoxError,
    },
    #[error("invalid stored data: {0}")]
    Decode(String),
    /// A caller passed a value the store cannot record (e.g. finalizing as `running`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Any other failure of the backend's database, classified by `kind` (which decides
    /// [`StoreError::is_transient`]); `message` is the backend's one-line account of it.
    #[error("database error: {message}")]
    Backend {
        kind: BackendErrorKind,
        message: String,
        #[source]
        source: BoxError,
    },
}

/// How a damaged store is damaged ([`StoreError::Corrupt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptKind {
    /// A loops store whose contents are damaged (SQLite `SQLITE_CORRUPT`; PostgreSQL
    /// `data_corrupted` / `index_corrupted`).
    Damaged,
    /// Not a loops store: another program's file or schema, or so damaged that it no
    /// longer reads as a database (SQLite `SQLITE_NOTADB`).
    NotAStore,
}

/// The classes of [`StoreError::Backend`] a caller acts on. Every kind but
/// [`BackendErrorKind::Other`] is transient: a daemon backs off and retries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// Another writer holds what the statement needed, beyond the backend's wait
    /// (SQLite `BUSY`/`LOCKED`; PostgreSQL lock timeouts, serialization failures and
    /// deadlocks).
    Busy,
    /// Out of disk space or memory (SQLite `FULL`/`NOMEM`; PostgreSQL `disk_full`,
    /// `out_of_memory`, too many connections).
    Full,
    /// An I/O error, or a database that cannot be opened or reached (SQLite
    /// `IOERR`/`CANTOPEN`; a lost PostgreSQL connection).
    Io,
    /// A statement met a store that no longer accepts writes (a file system remounted
    /// read-only; a PostgreSQL server in recovery).
    ReadOnly,
    /// Anything else (a constraint or statement the backend did not expect): not
    /// retried.
    Other,
}

impl BackendErrorKind {
    /// Whether errors of this kind go away by themselves.
    pub fn is_transient(self) -> bool {
        !matches!(self, BackendErrorKind::Other)
    }
}

fn corrupt_message(path: &str, kind: CorruptKind, source: &BoxError) -> String {
    let what = if path.is_empty() {
        "the loops database".to_owned()
    } else {
        path.to_owned()
    };
    match kind {
        CorruptKind::Damaged => format!(
            "{what} is corrupt ({source}); nothing was written: restore it from a backup, \
             or move it away to start with an empty store"
        ),
        CorruptKind::NotAStore => {
            format!("{what} is not a loops database (or is corrupt): {source}")
        }
    }
}

impl StoreError {
    /// A [`StoreError::Backend`] of `kind` whose message is `source`'s.
    pub fn backend(kind: BackendErrorKind, source: impl Into<BoxError>) -> Self {
        let source = source.into();
        StoreError::Backend {
            kind,
            message: source.to_string(),
            source,
        }
    }

    /// Errors about one row's state (it is missing or no longer running): in a batch
    /// they fail that row alone.
    pub fn is_per_row(&self) -> bool {
        matches!(self, StoreError::NotRunning(_) | StoreError::RunNotFound(_))
    }

    /// A damaged database: fatal, never retried (the caller stops and says so).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }

    /// Errors that go away by themselves (a full disk, a busy or locked database, an
    /// I/O error, a file system remounted read-only): a daemon backs off and retries
    /// them, keeping what it has not yet recorded, instead of giving up on it.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Backend { kind, .. } => kind.is_transient(),
            StoreError::ReadOnly { .. } | StoreError::DataDir { .. } => true,
            _ => false,
        }
    }

    /// Names the database in a [`StoreError::Corrupt`] that did not know it.
    pub fn with_path(self, db: &std::path::Path) -> Self {
        match self {
            StoreError::Corrupt { path, kind, source } if path.is_empty() => StoreError::Corrupt {
                path: db.display().to_string(),
                kind,
                source,
            },
            other => other,
        }
    }
}

/// The input errors of an import's history rows ([`crate::ImportLoop::history`]), worded
/// once for both backends.
impl StoreError {
    /// The history of the loop named `loop_name` holds a `running` run.
    pub fn running_history(loop_name: &str) -> Self {
        StoreError::InvalidArgument(format!(
            "history of loop {loop_name:?}: a running run cannot be imported"
        ))
    }

    /// The history of the loop named `loop_name` holds a second run of `run`'s slot
    /// attempt.
    pub fn duplicate_history_slot(loop_name: &str, run: &loops_core::Run) -> Self {
        StoreError::InvalidArgument(format!(
            "history of loop {loop_name:?}: two runs of slot {} attempt {}",
            loops_core::format_instant(&run.scheduled_for),
            run.attempt
        ))
    }
}

/// A backend's internal error type, the same shape on every backend: the enum `Error`
/// (a [`StoreError`] already decided, or the database library's own error as the
/// variant `$native`), its `Result` and `StoreResult` aliases, the conversions in, and
/// the way out through `$classify` (the backend's mapping of its library's errors).
/// A macro because each backend's enum holds a different library's error type.
#[macro_export]
macro_rules! backend_error {
    ($(#[$doc:meta])* $native:ident($lib:ty), $classify:path) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) enum Error {
            Store($crate::StoreError),
            $native($lib),
        }

        /// Result of the backend's internal functions.
        pub(crate) type Result<T> = std::result::Result<T, Error>;

        /// Result of what the backend hands back through the trait.
        pub(crate) type StoreResult<T> = $crate::Result<T>;

        impl From<$lib> for Error {
            fn from(e: $lib) -> Self {
                Error::$native(e)
            }
        }

        impl From<$crate::StoreError> for Error {
            fn from(e: $crate::StoreError) -> Self {
                Error::Store(e)
            }
        }

        impl From<Error> for $crate::StoreError {
            fn from(e: Error) -> Self {
                match e {
                    Error::Store(e) => e,
                    Error::$native(e) => $classify(e),
                }
            }
        }

        impl Error {
            /// `StoreError::Decode`.
            pub(crate) fn decode(message: impl Into<String>) -> Self {
                Error::Store($crate::StoreError::Decode(message.into()))
            }

            /// `StoreError::InvalidArgument`.
            pub(crate) fn invalid(message: impl Into<String>) -> Self {
                Error::Store($crate::StoreError::InvalidArgument(message.into()))
            }

            /// How a write of a batch failed, decided alike on every backend: `Ok` with the
            /// error the batch records for that write when it fails alone (its row is no
            /// longer running, an outcome that cannot end a run), `Err` with any other
            /// error, which fails the whole batch.
            pub(crate) fn alone_in_batch(self) -> std::result::Result<$crate::StoreError, Self> {
                match self {
                    Error::Store(e)
                        if e.is_per_row() || matches!(e, $crate::StoreError::InvalidArgument(_)) =>
                    {
                        Ok(e)
                    }
                    other => Err(other),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_kinds_and_messages() {
        for kind in [
            BackendErrorKind::Busy,
            BackendErrorKind::Full,
            BackendErrorKind::Io,
            BackendErrorKind::ReadOnly,
        ] {
            assert!(StoreError::backend(kind, "x").is_transient(), "{kind:?}");
        }
        let other = StoreError::backend(BackendErrorKind::Other, "no such table: loops");
        assert!(!other.is_transient());
        assert_eq!(other.to_string(), "database error: no such table: loops");
        let corrupt = StoreError::Corrupt {
            path: String::new(),
            kind: CorruptKind::Damaged,
            source: "database disk image is malformed".into(),
        };
        assert!(corrupt.is_corrupt() && !corrupt.is_transient());
        assert!(corrupt
            .with_path(std::path::Path::new("/d/loops.db"))
            .to_string()
            .starts_with(
                "/d/loops.db is corrupt (database disk image is malformed); nothing was written"
            ));
    }
}
