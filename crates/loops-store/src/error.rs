//! Store errors.

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
    /// SQLite reported `SQLITE_CORRUPT` or `SQLITE_NOTADB`: on opening (`path` set) or
    /// on any later statement (`path` empty when the caller did not know it). Never
    /// retried: the write it interrupted rolled back, and nothing else is attempted.
    #[error("{}", corrupt_message(path, source))]
    Corrupt {
        path: String,
        #[source]
        source: rusqlite::Error,
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
    /// The database file, its directory or the file system does not accept writes.
    #[error("{path} is read-only (file, directory or file system not writable): {source}")]
    ReadOnly {
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("invalid stored data: {0}")]
    Decode(String),
    /// A caller passed a value the store cannot record (e.g. finalizing as `running`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
}

/// Every SQLite error enters the store's errors here, so a corrupt database is
/// recognised whichever statement met it.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        if is_corruption(&e) {
            StoreError::Corrupt {
                path: String::new(),
                source: e,
            }
        } else {
            StoreError::Sqlite(e)
        }
    }
}

/// Whether SQLite says the file is damaged or is not a database at all.
pub fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

fn corrupt_message(path: &str, source: &rusqlite::Error) -> String {
    let what = if path.is_empty() {
        "the loops database".to_owned()
    } else {
        path.to_owned()
    };
    match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => format!(
            "{what} is corrupt ({source}); nothing was written: restore it from a backup, \
             or move it away to start with an empty store"
        ),
        _ => format!("{what} is not a loops database (or is corrupt): {source}"),
    }
}

impl StoreError {
    /// Errors about one row's state (it is missing or no longer running): in a batch
    /// they fail that row alone.
    pub fn is_per_row(&self) -> bool {
        matches!(self, StoreError::NotRunning(_) | StoreError::RunNotFound(_))
    }

    /// A damaged database: fatal, never retried (the caller stops and says so).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }

    /// [`StoreError::with_path`] with the store's own file.
    pub(crate) fn with_path_of(self, store: &crate::SqliteStore) -> Self {
        match store.path() {
            Some(path) => self.with_path(path),
            None => self,
        }
    }

    /// Names the database file in a [`StoreError::Corrupt`] that did not know it.
    pub fn with_path(self, db: &std::path::Path) -> Self {
        match self {
            StoreError::Corrupt { path, source } if path.is_empty() => StoreError::Corrupt {
                path: db.display().to_string(),
                source,
            },
            other => other,
        }
    }
}

impl StoreError {
    /// Errors that go away by themselves (a full disk, a busy or locked database, an
    /// I/O error, a file system remounted read-only): a daemon backs off and retries
    /// them, keeping what it has not yet recorded, instead of giving up on it.
    pub fn is_transient(&self) -> bool {
        use rusqlite::ErrorCode;
        match self {
            StoreError::Sqlite(e) => matches!(
                e.sqlite_error_code(),
                Some(
                    ErrorCode::DiskFull
                        | ErrorCode::DatabaseBusy
                        | ErrorCode::DatabaseLocked
                        | ErrorCode::SystemIoFailure
                        | ErrorCode::OutOfMemory
                        | ErrorCode::CannotOpen
                        | ErrorCode::ReadOnly
                )
            ),
            StoreError::ReadOnly { .. } | StoreError::DataDir { .. } => true,
            _ => false,
        }
    }
}
