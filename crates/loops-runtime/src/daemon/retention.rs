//! The daemon's retention: prunes runs and workflow runs at start and every
//! `prune_every`, on a thread and a store connection of its own. Ranking millions of
//! runs takes seconds; on the scheduling loop's connection it held up every pass (and
//! so every due slot) for as long.

use super::DaemonConfig;
use crate::clock::Clock;
use loops_store::Store;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

/// The retention thread; dropping it stops the thread after the prune in progress, if
/// any (its deletes are bounded transactions, so what it leaves is consistent).
pub(super) struct Retention {
    _stop: Sender<()>,
}

/// Starts pruning with `store`'s policy of `cfg`: now, then every `cfg.prune_every`.
/// The thread opens a connection of its own ([`Store::open_another`]); where the store
/// has none to give, it shares `store`'s, still off the scheduling loop.
pub(super) fn start_retention(
    store: &Arc<dyn Store>,
    cfg: &DaemonConfig,
    clock: &Arc<dyn Clock>,
) -> Retention {
    let (stop, stopped) = channel::<()>();
    let own: Arc<dyn Store> = match store.open_another() {
        Ok(Some(another)) => Arc::from(another),
        Ok(None) => Arc::clone(store),
        Err(e) => {
            tracing::warn!(error = %e, "cannot open a connection for retention; sharing the daemon's");
            Arc::clone(store)
        }
    };
    let (cfg, clock) = (cfg.clone(), Arc::clone(clock));
    let started = std::thread::Builder::new()
        .name("loops-retention".to_owned())
        .spawn(move || {
            let mut wait = Duration::ZERO;
            loop {
                match stopped.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    // Dropped (or, never sent, a stop): the daemon is stopping.
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                prune_once(own.as_ref(), &cfg, clock.as_ref());
                wait = cfg.prune_every;
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the retention thread; runs are not pruned");
    }
    Retention { _stop: stop }
}

/// One retention pass: runs first, then workflow runs; a failure is said and left for
/// the next pass.
fn prune_once(store: &dyn Store, cfg: &DaemonConfig, clock: &dyn Clock) {
    let policy = cfg.prune_policy(clock.now());
    let pruned = store
        .prune_runs(&policy, false)
        .and_then(|runs| Ok((runs, store.prune_workflow_runs(&policy, false)?)));
    match pruned {
        Ok((runs, workflow_runs)) if runs + workflow_runs > 0 => {
            tracing::info!(runs, workflow_runs, "retention")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "retention failed"),
    }
}
