//! The lease a daemon holds on its store — SQLite's one fenced daemon lease, or a
//! runner lease of its own on a store shared by runners — and registering as a runner.

use super::DaemonConfig;
use loops_core::Instant;
use loops_store::{Fence, LeaseHolder, Store, StoreError};

/// The lease a daemon holds: the store's one daemon lease, or its own runner lease.
pub(super) enum Held {
    Daemon(Fence),
    Runner(Fence),
}

impl Held {
    pub(super) fn fence(&self) -> &Fence {
        match self {
            Held::Daemon(f) | Held::Runner(f) => f,
        }
    }

    /// Renews it; false when it is no longer ours.
    pub(super) fn renew(
        &self,
        store: &dyn Store,
        ttl_ms: u64,
        now: Instant,
    ) -> Result<bool, StoreError> {
        match self {
            Held::Daemon(f) => store.renew_daemon_lease(f, ttl_ms, now),
            Held::Runner(f) => store.renew_runner(f, ttl_ms).map(|l| l.is_some()),
        }
    }

    pub(super) fn release_checked(&self, store: &dyn Store) -> Result<(), StoreError> {
        match self {
            Held::Daemon(f) => store.release_daemon_lease(f),
            Held::Runner(f) => store.release_runner(f),
        }
    }

    /// Gives it up on a path that already fails for another reason.
    pub(super) fn release(&self, store: &dyn Store) {
        if let Err(e) = self.release_checked(store) {
            tracing::warn!(error = %e, "cannot release the lease");
        }
    }
}

/// Registers this daemon as a runner of the store.
pub(super) fn register(
    store: &dyn Store,
    holder: &LeaseHolder,
    cfg: &DaemonConfig,
    ttl_ms: u64,
) -> Result<Held, StoreError> {
    let mut labels = cfg.runner_labels.clone();
    labels.sort();
    labels.dedup();
    let registration = loops_store::RunnerRegistration {
        runner_id: holder.runner_id.clone(),
        host: holder.host.clone(),
        pid: holder.pid,
        pid_start_time: holder.pid_start_time,
        labels,
        capacity: cfg.max_concurrent.get(),
    };
    let lease = store.register_runner(&registration, ttl_ms)?;
    Ok(Held::Runner(lease.fence))
}
