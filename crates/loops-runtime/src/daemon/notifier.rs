//! The daemon's notifier task: delivers the notifications its engine's finalizations
//! queue, off the scheduling path, and sweeps the store for pending ones.

use super::DaemonConfig;
use crate::engine::Engine;
use crate::targets::ExecSettings;
use loops_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Longest the notifier gets at shutdown for deliveries in flight (what is left stays
/// pending and the next daemon resumes it).
const NOTIFY_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The daemon's notifier task ([`crate::notify::Notifier`]) and its stop switch.
pub(super) struct NotifierTask {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl NotifierTask {
    /// Stops taking new deliveries and waits (bounded) for those in flight.
    pub(super) async fn stop(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the notifier task failed");
        }
    }
}

/// Starts delivering the notifications the engine's finalizations queue, and sweeping
/// the store for pending ones (left by `tick`, `run-now` or a daemon that died).
pub(super) fn start_notifier(
    engine: &Arc<Engine>,
    store: &Arc<dyn Store>,
    cfg: &DaemonConfig,
    runner_id: String,
) -> NotifierTask {
    let deliverer = crate::notify::Deliverer::new(
        Arc::clone(store),
        runner_id,
        crate::notify::DeliveryPolicy::with_timeout(cfg.notify_timeout),
        ExecSettings {
            kill_grace: cfg.kill_grace,
            ..ExecSettings::for_this_process()
        },
    );
    let notifier = crate::notify::Notifier::new(deliverer, Arc::clone(engine.deliveries()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let grace = cfg.shutdown_grace.min(NOTIFY_SHUTDOWN_GRACE);
    let task = tokio::spawn(notifier.run(
        async move {
            let _ = stopped.await;
        },
        grace,
    ));
    NotifierTask { stop, task }
}
