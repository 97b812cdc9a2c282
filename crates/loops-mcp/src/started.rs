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
