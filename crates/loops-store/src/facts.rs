//! The health roll-up's arithmetic over the runs a backend has already read, the same
//! on every backend: each backend keeps its queries and hands the rows' briefs in.

use loops_core::health::{RecentRun, RunBrief, RunFacts};

/// Fills `facts.last_success` and `facts.failures_since_success` from its newest rows
/// (`facts.recent`, at most `recent` asked for) and the newest success among them (its
/// index there and its brief). Returns `false` when those rows do not tell — only
/// failures (and skips) among a full page of them — and the backend must look further
/// back.
pub fn success_from_recent(
    facts: &mut RunFacts,
    newest_success: Option<(usize, RunBrief)>,
    recent: usize,
) -> bool {
    let count_failures =
        |runs: &[RecentRun]| runs.iter().filter(|r| r.status.is_failure()).count() as u64;
    match newest_success {
        // The newest success is among the newest rows: so are the failures after it.
        Some((i, success)) => {
            facts.failures_since_success = count_failures(&facts.recent[..i]);
            facts.last_success = Some(success);
            true
        }
        // Fewer rows than asked for: that is the whole history, without a success.
        None if facts.recent.len() < recent => {
            facts.failures_since_success = count_failures(&facts.recent);
            true
        }
        // Only failures (and skips) among the newest rows.
        None => false,
    }
}
