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
    #[error("{path} is not a loops database (or is corrupt): {source}")]
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
    Sqlite(#[from] rusqlite::Error),
}

impl StoreError {
    /// Errors about one row's state (it is missing or no longer running): in a batch
    /// they fail that row alone.
    pub fn is_per_row(&self) -> bool {
        matches!(self, StoreError::NotRunning(_) | StoreError::RunNotFound(_))
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
