//! The prune policy's cut-offs as stored values, the same for runs and workflow runs on every backend.

use crate::codec::{ms, sat_i64};
use crate::PrunePolicy;

/// What a policy's run rules delete, as the values the prune queries bind: finished
/// before `finished_before` (milliseconds), or ranked beyond the newest `keep` of their
/// loop (workflow: of their workflow). A finished row goes when either rule says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCutoffs {
    /// `older_than` in milliseconds.
    pub finished_before: Option<i64>,
    /// `keep_per_loop`, saturated at `i64::MAX`.
    pub keep: Option<i64>,
}

impl RunCutoffs {
    /// The cut-offs of `policy`, or `None` when it sets neither run rule (nothing of
    /// runs or workflow runs is deleted).
    pub fn of(policy: &PrunePolicy) -> Option<Self> {
        let cuts = RunCutoffs {
            finished_before: policy.older_than.as_ref().map(ms),
            keep: policy.keep_per_loop.map(|n| sat_i64(n as u64)),
        };
        (cuts.finished_before.is_some() || cuts.keep.is_some()).then_some(cuts)
    }
}

/// The event log's size to trim to before pruning, unless this is a dry run (which
/// deletes nothing).
pub fn events_to_keep(policy: &PrunePolicy, dry_run: bool) -> Option<usize> {
    policy.keep_events.filter(|_| !dry_run)
}

/// A counted number of rows (a dry run's `COUNT(*)`) as a `usize`.
pub fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoffs_are_milliseconds_and_saturated_counts() {
        let none = PrunePolicy::default();
        assert_eq!(RunCutoffs::of(&none), None);
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let both = PrunePolicy {
            older_than: Some(at),
            keep_per_loop: Some(usize::MAX),
            keep_events: Some(5),
        };
        assert_eq!(
            RunCutoffs::of(&both),
            Some(RunCutoffs {
                finished_before: Some(1_700_000_000_123),
                keep: Some(i64::MAX),
            })
        );
        assert_eq!(events_to_keep(&both, false), Some(5));
        assert_eq!(events_to_keep(&both, true), None);
        assert_eq!(count(-1), 0);
        assert_eq!(count(7), 7);
    }
}
