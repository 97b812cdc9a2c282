//! Why the daemon stopped abnormally.

use super::*;

/// Why the daemon stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    #[error("a daemon is already running for this store: pid {pid} on host {host}, lease held since {since} (stop it with `loops daemon stop`)")]
    AlreadyRunning {
        pid: u32,
        host: String,
        since: String,
    },
    /// Another daemon acquired the store's lease (this one was stalled or cut off past
    /// its TTL): every write of ours is refused from now on.
    #[error("daemon lease lost: {0}; stopped all runs and exiting")]
    LeaseLost(String),
    /// The database file the daemon opened is no longer at its path: deleted, or
    /// another file put in its place. Its writes would go nowhere anyone reads.
    #[error("database file {path} was removed or replaced; exiting ({detail})")]
    StoreGone { path: String, detail: &'static str },
    /// Settings that cannot be honoured (a lease TTL the kill grace does not fit).
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<EngineError> for DaemonError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::LeaseLost => DaemonError::LeaseLost("another daemon holds it".to_owned()),
            e @ EngineError::Busy { .. } => {
                DaemonError::Store(StoreError::InvalidArgument(e.to_string()))
            }
            EngineError::Store(s) => DaemonError::Store(s),
            EngineError::Schedule(s) => DaemonError::Store(StoreError::Decode(s.to_string())),
            EngineError::Thread(source) => DaemonError::Io {
                context: "cannot start the run recorder thread".to_owned(),
                source,
            },
        }
    }
}
