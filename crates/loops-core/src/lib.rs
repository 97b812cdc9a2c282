//! Pure domain of `loops`: what a loop, a run, a schedule and a target are, and the
//! schedule math that decides when slots are due.
//!
//! Invariants: nothing here performs I/O, reads the clock or spawns anything. Every
//! function that depends on time takes `now` (and a time zone, where relevant) as an
//! argument, so scheduling is testable with plain unit tests.

pub mod bundle;
pub mod caps;
pub mod cron;
pub mod duration;
pub mod ids;
pub mod limits;
// `string_enum!` is defined there and used by the modules declared after it.
#[macro_use]
pub mod model;
pub mod budget;
pub mod event;
pub mod failure;
pub mod health;
pub mod hold;
pub mod notify;
pub mod openloops;
pub mod provider_options;
pub mod redact;
pub mod schedule;
pub mod session;
pub mod stop;
pub mod text;
pub mod timefmt;
pub mod transitions;
pub mod usage;
pub mod validate;
pub mod workflow;
pub mod workflow_params;

pub use duration::Duration;
pub use ids::{LoopId, RunId, StepId, StepRunId, WorkflowId, WorkflowRunId};
pub use model::*;

/// Timestamps throughout the domain: UTC instants.
pub type Instant = chrono::DateTime<chrono::Utc>;

/// Formats an instant as RFC 3339 with milliseconds and a `Z` suffix, the one textual
/// form used in JSON output and storage.
pub fn format_instant(t: &Instant) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// How far `t` is from `now`, in the largest unit that fits: `in 4m`, `3h ago`,
/// `1h30m ago`, `now`.
pub fn format_relative(t: Instant, now: Instant) -> String {
    let secs = (t - now).num_seconds();
    let (abs, future) = (secs.unsigned_abs(), secs > 0);
    if abs < 1 {
        return "now".into();
    }
    let text = if abs < 60 {
        format!("{abs}s")
    } else if abs < 3_600 {
        format!("{}m", abs / 60)
    } else if abs < 86_400 {
        let (h, m) = (abs / 3_600, (abs % 3_600) / 60);
        if m == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{m}m")
        }
    } else {
        format!("{}d", abs / 86_400)
    };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}
