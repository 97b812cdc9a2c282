//! The concurrency caps this runner counts against, recorded in the store (so runners
//! sharing a PostgreSQL store honour each other's) and forgotten when it stops.

use super::*;

/// Records this daemon's caps in the store (none: removes its record); failing only
/// costs `show` and `daemon status` their word on them.
pub(super) fn record_caps(
    store: &dyn Store,
    runner_id: &str,
    caps: &loops_core::caps::Caps,
    now: Instant,
) {
    // A daemon without caps writes nothing: a row of its runner id exists only while
    // one with caps runs (a clean stop of that daemon removes it).
    if caps.is_empty() {
        return;
    }
    if let Err(e) = store.record_caps(runner_id, &caps.to_flag(), now) {
        tracing::warn!(error = %e, "cannot record the daemon's concurrency caps");
    }
}

/// Removes this daemon's caps record at a clean stop.
pub(super) fn forget_caps(store: &dyn Store, runner_id: &str, now: Instant) {
    if let Err(e) = store.record_caps(runner_id, "", now) {
        tracing::warn!(error = %e, "cannot remove the daemon's concurrency caps record");
    }
}

/// How often a daemon with loops waiting for a concurrency cap looks at what else is
/// due (a run that ends wakes it at once): a loop that became due meanwhile starts at
/// most this late.
pub(super) const CAP_RECHECK: Duration = Duration::from_secs(1);
