//! Runs the server started and let go on (`loops_run_now`, `workflow_run`): each is a
//! task of this process that executes the run to its end and records it. They
//! outlive the tool call, so the server keeps them here: when its client goes away it
//! waits for them to finish, and when it is told to stop (SIGTERM, Ctrl-C) it
//! interrupts them, so no run is left to the daemon's recovery by a server exiting.

use loops_runtime::client::Interrupter;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The runs in flight that this server started.
#[derive(Default)]
pub struct StartedRuns {
    state: Mutex<State>,
    ended: Notify,
}

#[derive(Default)]
struct State {
    next: u64,
    runs: HashMap<u64, Interrupter>,
}

/// Forgets a run when its task ends, however it ends.
struct Forget {
    runs: Arc<StartedRuns>,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.runs.lock().runs.remove(&self.id);
        self.runs.ended.notify_waiters();
    }
}

impl StartedRuns {
    /// Spawns `execution`, a started run's execution to its end, and keeps it (with
    /// how to interrupt it) until it has ended.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        execution: impl Future<Output = ()> + Send + 'static,
        interrupter: Interrupter,
    ) {
        let id = {
            let mut state = self.lock();
            state.next += 1;
            let id = state.next;
            state.runs.insert(id, interrupter);
            id
        };
        let forget = Forget {
            runs: Arc::clone(self),
            id,
        };
        tokio::spawn(async move {
            let _forget = forget;
            execution.await;
        });
    }

    /// [`StartedRuns::spawn`]s `execution` and, given `wait`, waits at most that long
    /// for its end: `Some` of what it ended with, `None` without `wait` or while it is
    /// still going when `wait` has passed; an execution that failed is the error
    /// (its message), and is logged whether it was waited for or not (`what` names
    /// the run: "run", "workflow run").
    pub(crate) async fn spawn_and_wait<T, E>(
        self: &Arc<Self>,
        what: &'static str,
        interrupter: Interrupter,
        execution: impl Future<Output = Result<T, E>> + Send + 'static,
        wait: Option<std::time::Duration>,
    ) -> Result<Option<T>, String>
    where
        T: Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        self.spawn(
            async move {
                let end = execution.await;
                if let Err(e) = &end {
                    tracing::warn!(error = %e, "a {what} started over MCP did not complete");
                }
                let _ = done_tx.send(end);
            },
            interrupter,
        );
        let Some(limit) = wait else {
            return Ok(None);
        };
        match tokio::time::timeout(limit, done_rx).await {
            Ok(Ok(Ok(end))) => Ok(Some(end)),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(_)) => Err("the run's task ended abnormally".to_owned()),
            // Still going.
            Err(_) => Ok(None),
        }
    }

    /// How many are still going on.
    pub fn in_flight(&self) -> usize {
        self.lock().runs.len()
    }

    /// Asks every one to stop, recording `reason` (their process groups are
    /// terminated); returns at once.
    pub fn interrupt_all(&self, reason: &str) {
        for interrupter in self.lock().runs.values() {
            interrupter.interrupt(reason);
        }
    }

    /// Waits until every one has ended and been recorded.
    pub async fn finish_all(&self) {
        loop {
            let ended = self.ended.notified();
            if self.in_flight() == 0 {
                return;
            }
            ended.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
