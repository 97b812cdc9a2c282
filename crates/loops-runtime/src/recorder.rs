//! Group commit of run writes. Every claimed run causes two writes after its claim:
//! its child's pid (right after spawn) and its finalization with the loop transition
//! (when it ends). At hundreds of runs a second, one SQLite transaction each makes the
//! commits themselves the bottleneck (locks, WAL frames for the same pages written over
//! and over). The recorder is one thread that takes every write queued since its last
//! commit and applies them in a single transaction, in the order they were sent.
//!
//! Latency is not traded for it: an idle recorder commits a lone write at once; writes
//! only share a transaction when they arrive while the previous one is committing.
//!
//! A batch that fails for a reason that passes (a full disk, a store locked by another
//! process; [`StoreError::is_transient`]) is kept and retried with capped exponential
//! back-off, so a finished run's outcome is recorded once the store accepts writes
//! again instead of being lost.

use crate::backoff::Backoff;
use crate::clock::Clock;
use loops_store::{Fence, RunWrite, RunWritten, Store, StoreError};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Most writes committed in one transaction (bounds the time the store lock is held).
const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<RunWritten, StoreError>>;

struct Job {
    write: RunWrite,
    reply: Option<Reply>,
}

/// Handle to the recorder thread; the thread ends when the last handle is dropped,
/// after committing everything queued.
pub(crate) struct Recorder {
    jobs: mpsc::Sender<Job>,
}

impl Recorder {
    pub(crate) fn start(
        store: Arc<dyn Store>,
        fence: Option<Fence>,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("loops-recorder".into())
            .spawn(move || commit_loop(&queue, store.as_ref(), fence.as_ref(), clock.as_ref()))?;
        Ok(Self { jobs })
    }

    /// Queues a write without waiting for it (a pid record).
    pub(crate) fn send(&self, write: RunWrite) {
        if self.jobs.send(Job { write, reply: None }).is_err() {
            tracing::warn!("run recorder is gone; a pid record was dropped");
        }
    }

    /// Queues a write and waits until its transaction committed (or failed).
    pub(crate) async fn write(&self, write: RunWrite) -> Result<RunWritten, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                write,
                reply: Some(reply),
            })
            .map_err(|_| recorder_gone())?;
        answer.await.map_err(|_| recorder_gone())?
    }
}

fn recorder_gone() -> StoreError {
    StoreError::InvalidArgument("the run recorder stopped".to_owned())
}

/// Delays between tries of a batch that failed for a reason that passes (a full disk, a
/// database locked by another process): nothing queued is dropped meanwhile.
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(50);
const RETRY_CAP: std::time::Duration = std::time::Duration::from_secs(5);

fn commit_loop(
    queue: &mpsc::Receiver<Job>,
    store: &dyn Store,
    fence: Option<&Fence>,
    clock: &dyn Clock,
) {
    let mut writes: Vec<RunWrite> = Vec::new();
    let mut replies: Vec<Option<Reply>> = Vec::new();
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    loop {
        if writes.is_empty() {
            let Ok(job) = queue.recv() else { return };
            writes.push(job.write);
            replies.push(job.reply);
        }
        while writes.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => {
                    writes.push(job.write);
                    replies.push(job.reply);
                }
                Err(_) => break,
            }
        }
        // A panic in one batch (a bug) must not take every later finalization with it:
        // the batch fails like a store error and the thread goes on.
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.record_run_writes(&writes, clock.now(), fence)
        }))
        .unwrap_or_else(|_| {
            Err(StoreError::InvalidArgument(
                "recording run writes panicked".to_owned(),
            ))
        });
        match results {
            Err(e) if e.is_transient() => {
                // Keep every write (a finished run's outcome exists nowhere else) and try
                // again, more slowly each time, with whatever is queued meanwhile.
                let delay = backoff.fail();
                if backoff.failures() == 1 {
                    tracing::warn!(error = %e, writes = writes.len(), "cannot record run writes; retrying with back-off until the store accepts them");
                }
                std::thread::sleep(delay);
                continue;
            }
            Ok(results) => {
                let failures = backoff.succeed();
                if failures > 0 {
                    tracing::info!(failures, writes = writes.len(), "run writes recorded again");
                }
                for ((write, reply), result) in writes.iter().zip(replies.drain(..)).zip(results) {
                    deliver(write, reply, result);
                }
            }
            Err(e) => {
                backoff.succeed();
                if !matches!(e, StoreError::LeaseLost) {
                    tracing::warn!(error = %e, writes = writes.len(), "could not record run writes");
                }
                for (write, reply) in writes.iter().zip(replies.drain(..)) {
                    deliver(write, reply, Err(copy_error(&e)));
                }
            }
        }
        writes.clear();
    }
}

fn deliver(write: &RunWrite, reply: Option<Reply>, result: Result<RunWritten, StoreError>) {
    match reply {
        // The waiter may have gone away (its task was aborted); nothing to tell then.
        Some(reply) => {
            let _ = reply.send(result);
        }
        None => {
            if let (Err(e), RunWrite::Spawned { run, .. }) = (&result, write) {
                tracing::warn!(run = %run, error = %e, "could not record pid");
            }
        }
    }
}

/// A batch failure is reported to every writer in it; `StoreError` is not `Clone`
/// (it carries SQLite and I/O errors), so each gets an equivalent copy.
fn copy_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::LeaseLost => StoreError::LeaseLost,
        StoreError::NotRunning(id) => StoreError::NotRunning(id.clone()),
        StoreError::RunNotFound(id) => StoreError::RunNotFound(id.clone()),
        other => StoreError::InvalidArgument(format!("batch write failed: {other}")),
    }
}
