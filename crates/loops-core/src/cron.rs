//! Five-field cron expressions evaluated in an IANA time zone.
//!
//! STUB: to be implemented (see schedule helper brief).

use crate::Instant;

/// Why a cron expression or time zone was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    #[error("invalid cron expression {expression:?}: {reason}")]
    Expression { expression: String, reason: String },
    #[error(
        "unknown time zone {0:?}: expected an IANA name such as Europe/Berlin or America/New_York"
    )]
    TimeZone(String),
}

/// A parsed cron expression bound to its time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    _private: (),
}

impl CronSchedule {
    /// Parses a five-field expression in the IANA zone `timezone`.
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, CronError> {
        let _ = (expression, timezone);
        unimplemented!()
    }
    /// The first matching instant strictly after `after`.
    pub fn next_after(&self, after: Instant) -> Option<Instant> {
        let _ = after;
        unimplemented!()
    }
}
