//! Exit codes, one per documented meaning (README, "Exit codes"), and the one place
//! where every error kind of the libraries below is given one.

use loops_runtime::client::ClientError;
use loops_runtime::daemon::DaemonError;
use loops_runtime::engine::EngineError;
use loops_runtime::workflow::RecoverError;
use loops_store::StoreError;

/// How the process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `0`: success, and a closed stdout (`loops list | head -1`).
    Success,
    /// `1`: a run failed, or an operation did not succeed in the store's current state
    /// (a run in flight, a stalled daemon, a lost daemon lease, a failing check).
    Failed,
    /// `2`: invalid input: usage, validation, an unknown or ambiguous key, a duplicate
    /// name, a path a service file cannot name.
    Usage,
    /// `3`: the store cannot be used: corrupt, written by a newer loops, read-only, not
    /// the caller's, or removed under the daemon.
    Store,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Store => 3,
        }
    }

    /// A store error: the caller's mistake, a state that did not allow the operation,
    /// or a store that cannot be used at all (corruption included, whichever statement
    /// met it).
    pub fn of_store(err: &StoreError) -> Self {
        use StoreError as E;
        if err.is_corrupt() {
            return Exit::Store;
        }
        match err {
            E::DuplicateName(_)
            | E::DuplicateWorkflow(_)
            | E::LoopNotFound(_)
            | E::WorkflowNotFound(_)
            | E::RunNotFound(_)
            | E::WorkflowRunNotFound(_)
            | E::InvalidArgument(_) => Exit::Usage,
            E::NotRunning(_) | E::LeaseLost => Exit::Failed,
            // Corrupt, too new, not private, data dir, read-only, undecodable rows and
            // other database errors.
            _ => Exit::Store,
        }
    }

    /// A client call: its store's errors as [`Exit::of_store`], a refusal in the
    /// store's state as [`Exit::Failed`], everything else is the caller's input.
    pub fn of_client(err: &ClientError) -> Self {
        if let Some(e) = err.store_error() {
            return Exit::of_store(e);
        }
        if err.is_refused() || err.is_failure() {
            return Exit::Failed;
        }
        Exit::Usage
    }

    /// The engine (`run-now`, `tick`): a store it reached as [`Exit::of_store`] — a
    /// corrupt store exits 3 however it was reached — and the rest did not succeed.
    pub fn of_engine(err: &EngineError) -> Self {
        match err {
            EngineError::Store(e) => Exit::of_store(e),
            _ => Exit::Failed,
        }
    }

    /// A daemon that stopped abnormally: 3 when its store cannot be used (corrupt,
    /// removed or replaced, read-only), else 1.
    pub fn of_daemon(err: &DaemonError) -> Self {
        match err {
            DaemonError::Store(e) => Exit::of_store(e),
            DaemonError::StoreGone { .. } => Exit::Store,
            DaemonError::Config(_) => Exit::Usage,
            _ => Exit::Failed,
        }
    }

    /// `workflows recover`: asking to recover a run whose step processes still live is
    /// a request to make again later (exit 2, as since `recover` exists).
    pub fn of_recover(err: &RecoverError) -> Self {
        match err {
            RecoverError::Store(e) => Exit::of_store(e),
            _ => Exit::Usage,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_its_documented_code() {
        let corrupt = || StoreError::Corrupt {
            path: String::new(),
            kind: loops_store::CorruptKind::Damaged,
            source: "database disk image is malformed".into(),
        };
        let cases: Vec<(Exit, u8)> = vec![
            (Exit::of_store(&StoreError::DuplicateName("a".into())), 2),
            (Exit::of_store(&StoreError::LoopNotFound("a".into())), 2),
            (Exit::of_store(&StoreError::NotRunning("r".into())), 1),
            (Exit::of_store(&StoreError::LeaseLost), 1),
            (Exit::of_store(&corrupt()), 3),
            (Exit::of_client(&ClientError::NotFound("x".into())), 2),
            (Exit::of_client(&ClientError::Refused("busy".into())), 1),
            (Exit::of_client(&ClientError::Store(corrupt())), 3),
            (
                Exit::of_client(&ClientError::Engine(EngineError::Store(corrupt()))),
                3,
            ),
            (
                Exit::of_client(&ClientError::Engine(EngineError::LeaseLost)),
                1,
            ),
            (Exit::of_engine(&EngineError::Store(corrupt())), 3),
            (Exit::of_engine(&EngineError::LeaseLost), 1),
            (Exit::of_daemon(&DaemonError::Store(corrupt())), 3),
            (
                Exit::of_daemon(&DaemonError::StoreGone {
                    path: "/x/loops.db".into(),
                    detail: "it no longer exists",
                }),
                3,
            ),
            (Exit::of_daemon(&DaemonError::LeaseLost("taken".into())), 1),
            (
                Exit::of_recover(&RecoverError::Alive("a (pid 1)".into())),
                2,
            ),
            (Exit::of_recover(&RecoverError::Store(corrupt())), 3),
        ];
        for (i, (exit, code)) in cases.into_iter().enumerate() {
            assert_eq!(exit.code(), code, "case {i}: {exit:?}");
        }
    }
}
