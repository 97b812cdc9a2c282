//! PostgreSQL's errors as store errors. Inside the backend a statement's error stays a
//! `tokio_postgres::Error` ([`Error::Pg`]) until it leaves through the [`Store`] trait,
//! where [`from_pg`] classifies it by SQLSTATE: damaged data becomes
//! [`StoreError::Corrupt`], lock timeouts, serialization failures and deadlocks are
//! `Busy`, a full disk or too many connections `Full`, a lost or refused connection
//! `Io`, a server in recovery `ReadOnly` — all transient, so a daemon backs off and
//! retries them, as it does on SQLite.
//!
//! [`Store`]: loops_store::Store

use loops_store::{BackendErrorKind, CorruptKind, StoreError};
use tokio_postgres::error::SqlState;

loops_store::backend_error!(
    /// An error inside the backend: a store error already decided, or PostgreSQL's own.
    Pg(tokio_postgres::Error),
    from_pg
);

impl Error {
    /// No free id after `ID_ATTEMPTS` random draws.
    pub(crate) fn ids_exhausted(what: &str) -> Self {
        Error::Store(StoreError::backend(
            BackendErrorKind::Other,
            format!("could not allocate a unique {what} id"),
        ))
    }

    /// The SQLSTATE of a server error, if this is one.
    pub(crate) fn code(&self) -> Option<&SqlState> {
        match self {
            Error::Pg(e) => e.code(),
            Error::Store(_) => None,
        }
    }
}

/// A transient I/O failure (the server cannot be reached, a call timed out).
pub(crate) fn io(message: impl Into<String>) -> StoreError {
    StoreError::backend(BackendErrorKind::Io, message.into())
}

/// Every PostgreSQL error leaves the backend here.
pub(crate) fn from_pg(e: tokio_postgres::Error) -> StoreError {
    let Some(code) = e.code().cloned() else {
        // No SQLSTATE: the connection failed or closed, or a value did not convert.
        let kind = if e.is_closed() || is_connection_error(&e) {
            BackendErrorKind::Io
        } else {
            BackendErrorKind::Other
        };
        return StoreError::backend(kind, describe(&e));
    };
    let kind = if code == SqlState::DATA_CORRUPTED || code == SqlState::INDEX_CORRUPTED {
        return StoreError::Corrupt {
            path: String::new(),
            kind: CorruptKind::Damaged,
            source: Box::new(e),
        };
    } else if code == SqlState::T_R_SERIALIZATION_FAILURE
        || code == SqlState::T_R_DEADLOCK_DETECTED
        || code == SqlState::LOCK_NOT_AVAILABLE
        || code == SqlState::QUERY_CANCELED
    {
        BackendErrorKind::Busy
    } else if code == SqlState::DISK_FULL
        || code == SqlState::OUT_OF_MEMORY
        || code == SqlState::TOO_MANY_CONNECTIONS
        || code == SqlState::INSUFFICIENT_RESOURCES
    {
        BackendErrorKind::Full
    } else if code == SqlState::ADMIN_SHUTDOWN
        || code == SqlState::CRASH_SHUTDOWN
        || code == SqlState::CANNOT_CONNECT_NOW
        || code.code().starts_with("08")
    {
        BackendErrorKind::Io
    } else if code == SqlState::READ_ONLY_SQL_TRANSACTION {
        BackendErrorKind::ReadOnly
    } else {
        BackendErrorKind::Other
    };
    StoreError::backend(kind, describe(&e))
}

/// The server's message (with its detail) rather than tokio-postgres' generic "db
/// error", so one line says what went wrong.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {} ({detail})", db.severity(), db.message()),
            None => format!("{}: {}", db.severity(), db.message()),
        },
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        }
    }
}

/// A failure to reach or keep the server (no SQLSTATE, an I/O cause).
fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    e.to_string().contains("connection")
}

pub(crate) fn is_unique_violation(e: &Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// The name of the constraint a unique violation broke.
pub(crate) fn violated_constraint(e: &Error) -> Option<String> {
    match e {
        Error::Pg(pg) => pg
            .as_db_error()
            .and_then(|db| db.constraint().map(str::to_owned)),
        Error::Store(_) => None,
    }
}
