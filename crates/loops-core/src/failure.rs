//! Why a run failed, read from what its process and (for an agent) its CLI said: the
//! failure classes (`failureClass` on a run), the instant a provider said to come back
//! at (`retryAt`), and what each class means for retries.
//!
//! Pure: the provider adapters (`loops_runtime::providers`) gather the [`Signals`] from a
//! CLI's structured output and stderr; [`classify`] decides. Time-of-day resets ("resets
//! 12:50am (America/Los_Angeles)", "try again at 6:18 AM") are read in the zone the text
//! names, else in the zone the caller passes (the CLI's, i.e. the runner's local zone).
//!
//! The messages recognised here were captured from the real CLIs answering a mock model
//! server (`crates/loops-runtime/tests/fixtures`, see its README).

use crate::Instant;
use chrono::{Datelike, LocalResult, NaiveDate, NaiveTime, TimeDelta, TimeZone};
pub use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

string_enum!(
    /// What kind of failure a failed run was (`failureClass`).
    FailureClass {
        /// The account's usage allowance is spent until a reset (a subscription's
        /// session or weekly limit, a spent quota): the run is held, not failed.
        UsageLimit = "usage_limit",
        /// Too many requests for now (HTTP 429): transient.
        RateLimit = "rate_limit",
        /// The provider has no capacity or is unavailable (HTTP 529, 503, other 5xx).
        Overloaded = "overloaded",
        /// Credentials are missing, wrong or expired (HTTP 401, 403): not retried.
        Auth = "auth",
        /// The prompt and context do not fit the model: not retried.
        ContextLength = "context_length",
        /// The agent was denied a tool it needed (claude's `permission_denials`).
        ToolDenied = "tool_denied",
        /// The run was terminated by its timeout or its idle timeout.
        Timeout = "timeout",
        /// The process died by a signal or the CLI itself crashed (a panic, a stack trace).
        Crash = "crash",
        /// Any other failure.
        Other = "other",
    }
);

impl FailureClass {
    /// Classes that pass by themselves within minutes, so their retries back off harder
    /// (README, "Agent operations").
    pub fn is_transient(self) -> bool {
        matches!(self, Self::RateLimit | Self::Overloaded)
    }

    /// Whether another attempt can help: not for credentials or a prompt that does not
    /// fit (they need a person), not for a usage limit (the loop is held instead).
    pub fn is_retried(self) -> bool {
        !matches!(self, Self::Auth | Self::ContextLength | Self::UsageLimit)
    }
}

/// How much harder a transient failure ([`FailureClass::is_transient`]) backs off.
pub const TRANSIENT_FACTOR: u64 = 4;

/// The delay before retrying attempt `attempt` (1-based) that failed with `class`,
/// under `backoff` with base `base_ms` and cap `max_ms`; `unit` in `[0, 1)` is the
/// jitter's random draw (see [`retry_unit`]).
///
/// - `fixed`: `base_ms` (today's behaviour), ×[`TRANSIENT_FACTOR`] for a transient class;
/// - `exponential`: full jitter over `base_ms · 2^(attempt-1)` (×[`TRANSIENT_FACTOR`]
///   for a transient class), at least 1 s (or the ceiling, when smaller).
///
/// Both are capped at `max_ms` (never below `base_ms`).
pub fn retry_delay_ms(
    backoff: crate::RetryBackoff,
    base_ms: u64,
    max_ms: u64,
    attempt: u32,
    class: Option<FailureClass>,
    unit: f64,
) -> u64 {
    let factor = if class.is_some_and(FailureClass::is_transient) {
        TRANSIENT_FACTOR
    } else {
        1
    };
    let cap = max_ms.max(base_ms);
    match backoff {
        crate::RetryBackoff::Fixed => base_ms.saturating_mul(factor).min(cap),
        crate::RetryBackoff::Exponential => {
            let doublings = attempt.saturating_sub(1).min(40);
            let ceiling = base_ms
                .saturating_mul(factor)
                .saturating_mul(1u64 << doublings)
                .min(cap);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let drawn = (ceiling as f64 * unit.clamp(0.0, 1.0)) as u64;
            drawn.max(ceiling.min(1_000))
        }
    }
}

/// The jitter draw of a retry of `slot`'s attempt `attempt` of loop `id`: a number in
/// `[0, 1)` from the three alone (FNV-1a, stable across builds and restarts), so a
/// store recomputing the retry gets the same instant while many loops spread out.
pub fn retry_unit(id: &crate::LoopId, slot: Instant, attempt: u32) -> f64 {
    let hash = crate::schedule::fnv1a(
        id.as_str()
            .bytes()
            .chain(slot.timestamp_millis().to_le_bytes())
            .chain(attempt.to_le_bytes()),
    );
    // The top 53 bits: every value is exact in an f64.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// How an attempt's process ended, as far as classification cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEnding {
    /// Exited with this status (0 with a reported error is a failure too).
    Exited(i32),
    /// Killed by a signal we did not send.
    Signalled,
    /// Terminated by its timeout or idle timeout.
    TimedOut,
    /// Never started (missing executable, bad working directory, account failure).
    NotStarted,
}

/// What a failed attempt's CLI said, gathered by its provider adapter. Every field is
/// optional: a command has none of them, a CLI that crashed only its stderr.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals<'a> {
    /// The model API's HTTP status, when the CLI reports it (claude's `api_error_status`).
    pub http_status: Option<u16>,
    /// The API's error type or code (`rate_limit_error`, `usage_limit_reached`).
    pub error_type: Option<&'a str>,
    /// The error the CLI reported, in its own words.
    pub message: Option<&'a str>,
    /// A structured reason the CLI stopped (claude's `terminal_reason`: `prompt_too_long`).
    pub stop_reason: Option<&'a str>,
    /// Tools the agent asked for and was denied.
    pub tool_denials: usize,
    /// A `retry-after` the API sent, in seconds.
    pub retry_after_secs: Option<u64>,
    /// The CLI's stderr.
    pub stderr: &'a str,
}

/// A failed attempt's class and, when its provider said when to come back, that instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub class: FailureClass,
    pub retry_at: Option<Instant>,
}

/// How much of a failed run's stderr the classifier reads: its start and its end (a
/// CLI says why it failed first or last), not the megabyte of logs between them. Read
/// whole, a 1 MiB stderr cost 3.8 ms per run to classify (BENCHMARKS.md, issue #20).
pub const STDERR_HEAD_BYTES: usize = 8 * 1024;
pub const STDERR_TAIL_BYTES: usize = 56 * 1024;

/// The first [`STDERR_HEAD_BYTES`] and the last [`STDERR_TAIL_BYTES`] of `stderr`, cut
/// at character boundaries; all of it (and an empty tail) when it is shorter.
fn stderr_window(stderr: &str) -> (&str, &str) {
    if stderr.len() <= STDERR_HEAD_BYTES + STDERR_TAIL_BYTES {
        return (stderr, "");
    }
    let mut head_end = STDERR_HEAD_BYTES;
    while !stderr.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = stderr.len() - STDERR_TAIL_BYTES;
    while !stderr.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    (&stderr[..head_end], &stderr[tail_start..])
}

/// A 429 whose `retry-after` is at least this long is a usage window, not a per-minute
/// rate limit.
const USAGE_WINDOW_SECS: u64 = 15 * 60;

/// Classifies a failed attempt. `zone` reads a reset time of day that names no zone.
pub fn classify(ending: ProcessEnding, s: &Signals<'_>, now: Instant, zone: Tz) -> Failure {
    let plain = |class| Failure {
        class,
        retry_at: None,
    };
    if ending == ProcessEnding::TimedOut {
        return plain(FailureClass::Timeout);
    }
    let (head, tail) = stderr_window(s.stderr);
    let text = format!("{}\n{head}\n{tail}", s.message.unwrap_or_default());
    let lower = text.to_lowercase();
    let kind = s
        .error_type
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let status = s.http_status;
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    let retry_after = s
        .retry_after_secs
        .map(|secs| now + TimeDelta::seconds(i64::try_from(secs).unwrap_or(i64::MAX / 1_000)));

    let usage = kind == "usage_limit_reached"
        || kind == "insufficient_quota"
        || has(&[
            "usage limit",
            "session limit",
            "weekly limit",
            "limit will reset",
            "hit your limit",
            "out of extra usage",
            "exceeded your current quota",
            "credit balance is too low",
        ])
        || (status == Some(429)
            && s.retry_after_secs
                .is_some_and(|secs| secs >= USAGE_WINDOW_SECS));
    if usage {
        return Failure {
            class: FailureClass::UsageLimit,
            retry_at: reset_instant(&text, now, zone).or(retry_after),
        };
    }
    let context = s.stop_reason == Some("prompt_too_long")
        || kind == "context_length_exceeded"
        || has(&[
            "prompt is too long",
            "context length",
            "context_length_exceeded",
            "context window",
            "maximum context",
        ]);
    if context {
        return plain(FailureClass::ContextLength);
    }
    let auth = matches!(status, Some(401 | 403))
        || matches!(
            kind.as_str(),
            "authentication_error" | "permission_error" | "invalid_api_key"
        )
        || has(&[
            "invalid api key",
            "invalid x-api-key",
            "incorrect api key",
            "401 unauthorized",
            "authentication_error",
            "not logged in",
            "please run /login",
            "oauth token has expired",
            "invalid bearer token",
        ]);
    if auth {
        return plain(FailureClass::Auth);
    }
    let rate = status == Some(429)
        || matches!(kind.as_str(), "rate_limit_error" | "rate_limit_exceeded")
        || has(&["rate limit", "too many requests", "status: 429", "(429)"]);
    if rate {
        return Failure {
            class: FailureClass::RateLimit,
            retry_at: retry_after.or_else(|| reset_instant(&text, now, zone)),
        };
    }
    let overloaded = matches!(status, Some(500 | 502 | 503 | 504 | 529))
        || matches!(kind.as_str(), "overloaded_error" | "server_error")
        || has(&[
            "overloaded",
            "service unavailable",
            "server-side issue",
            "capacity",
            "503 service",
            "529 overloaded",
            "bad gateway",
        ]);
    if overloaded {
        return Failure {
            class: FailureClass::Overloaded,
            retry_at: retry_after,
        };
    }
    if s.tool_denials > 0 {
        return plain(FailureClass::ToolDenied);
    }
    let crashed = ending == ProcessEnding::Signalled
        || has(&[
            "panicked at",
            "stack backtrace",
            "segmentation fault",
            "fatal error:",
            "traceback (most recent call last)",
            "unhandled promise rejection",
        ]);
    plain(if crashed {
        FailureClass::Crash
    } else {
        FailureClass::Other
    })
}

/// The instant a provider's message says to come back at, if it says one:
/// - `…|1717622400` after "limit reached" (claude's older form: Unix seconds);
/// - `reset(s) [at] [Dec 5[,]] 9am|12:50am|5:00 PM [(Zone/Name)]` (claude);
/// - `try again at [Dec 5th, 2026 ]6:18 AM` (codex, the CLI's local zone);
/// - `try again in 2 days 3 hours 4 minutes` / `try again in 1.5s` (codex, OpenAI).
///
/// A time of day without a date is its next occurrence after `now`.
pub fn reset_instant(text: &str, now: Instant, zone: Tz) -> Option<Instant> {
    let lower = text.to_lowercase();
    if let Some(at) = epoch_after_pipe(&lower) {
        return Some(at);
    }
    for marker in ["try again in ", "retry in ", "resets in ", "reset in "] {
        if let Some(rest) = after(&lower, marker) {
            if let Some(span) = spoken_duration(rest) {
                return Some(now + span);
            }
        }
    }
    for marker in [
        "will reset at ",
        "resets at ",
        "reset at ",
        "resets ",
        "try again at ",
    ] {
        if let Some(rest) = after(&lower, marker) {
            if let Some(at) = wall_time(rest, now, zone) {
                return Some(at);
            }
        }
    }
    None
}

fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.find(marker).map(|i| &text[i + marker.len()..])
}

/// `limit reached|1717622400`: seconds since the epoch after a `|`.
fn epoch_after_pipe(lower: &str) -> Option<Instant> {
    let rest = after(lower, "limit reached|")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let secs: i64 = digits.parse().ok()?;
    chrono::DateTime::from_timestamp(secs, 0)
}

/// `2 days 3 hours 4 minutes`, `1.5s`, `20ms`, `5 minutes`: the sum of its parts.
fn spoken_duration(text: &str) -> Option<TimeDelta> {
    let mut total_ms: f64 = 0.0;
    let mut parts = 0;
    let mut rest = text.trim_start();
    loop {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            break;
        }
        let Ok(value) = rest[..number_len].parse::<f64>() else {
            break;
        };
        let after_number = rest[number_len..].trim_start();
        let unit_len = after_number
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after_number.len());
        let unit_ms = match &after_number[..unit_len] {
            "ms" | "millisecond" | "milliseconds" => 1.0,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000.0,
            "d" | "day" | "days" => 86_400_000.0,
            _ => break,
        };
        total_ms += value * unit_ms;
        parts += 1;
        rest = after_number[unit_len..].trim_start();
        rest = rest
            .strip_prefix("and ")
            .or_else(|| rest.strip_prefix(", "))
            .unwrap_or(rest)
            .trim_start();
    }
    if parts == 0 || !total_ms.is_finite() || total_ms <= 0.0 || total_ms > 400.0 * 86_400_000.0 {
        return None;
    }
    #[allow(clippy::cast_possible_truncation)]
    Some(TimeDelta::milliseconds(total_ms.ceil() as i64))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// `[Dec 5[th][, 2026] [at] ]9am|12:50am|6:18 pm[ (Zone/Name)]` → the instant (the next
/// occurrence after `now` when no date is given).
fn wall_time(text: &str, now: Instant, zone: Tz) -> Option<Instant> {
    let mut words = text.split_whitespace().peekable();
    let mut date: Option<(u32, u32, Option<i32>)> = None;
    if let Some(first) = words.peek() {
        if let Some(month) = MONTHS.iter().position(|m| first.starts_with(m)) {
            words.next();
            let day_word = words.next()?;
            let day: u32 = day_word
                .trim_end_matches(',')
                .trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse()
                .ok()?;
            let mut year = None;
            if let Some(y) = words.peek().map(|w| w.trim_end_matches(',')) {
                if y.len() == 4 && y.chars().all(|c| c.is_ascii_digit()) {
                    year = y.parse().ok();
                    words.next();
                }
            }
            if words.peek() == Some(&"at") {
                words.next();
            }
            date = Some((u32::try_from(month).ok()? + 1, day, year));
        }
    }
    // The time: `9am`, `12:50am`, `6:18` followed by `am`/`pm`.
    let mut time = words.next()?.trim_end_matches(['.', ',']).to_owned();
    if let Some(next) = words.peek() {
        let next = next.trim_end_matches(['.', ',']);
        if next == "am" || next == "pm" {
            time.push_str(next);
            words.next();
        }
    }
    let (clock, meridiem) = if let Some(c) = time.strip_suffix("am") {
        (c, Some(false))
    } else if let Some(c) = time.strip_suffix("pm") {
        (c, Some(true))
    } else {
        (time.as_str(), None)
    };
    let (hour, minute) = match clock.split_once(':') {
        Some((h, m)) => (h.parse::<u32>().ok()?, m.parse::<u32>().ok()?),
        None => (clock.parse::<u32>().ok()?, 0),
    };
    // Without am/pm only a 24-hour `HH:MM` is a time (a bare number is not).
    let hour = match meridiem {
        Some(pm) if (1..=12).contains(&hour) => hour % 12 + if pm { 12 } else { 0 },
        Some(_) => return None,
        None if clock.contains(':') && hour < 24 => hour,
        None => return None,
    };
    let time = NaiveTime::from_hms_opt(hour, minute, 0)?;
    let zone = words
        .next()
        .and_then(|w| {
            let name = w.trim_start_matches('(');
            let name = name.split(')').next()?;
            crate::cron::parse_timezone(name).ok()
        })
        .unwrap_or(zone);
    let local_now = now.with_timezone(&zone);
    let resolve = |day: NaiveDate| match zone.from_local_datetime(&day.and_time(time)) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => {
            Some(t.with_timezone(&chrono::Utc))
        }
        // Inside a spring-forward gap: an hour later exists.
        LocalResult::None => zone
            .from_local_datetime(&(day.and_time(time) + TimeDelta::hours(1)))
            .earliest()
            .map(|t| t.with_timezone(&chrono::Utc)),
    };
    match date {
        Some((month, day, year)) => {
            let at = resolve(NaiveDate::from_ymd_opt(
                year.unwrap_or(local_now.year()),
                month,
                day,
            )?)?;
            // "Jan 2" read in late December, without a year, is next year's.
            if year.is_none() && now - at > TimeDelta::days(180) {
                return resolve(NaiveDate::from_ymd_opt(local_now.year() + 1, month, day)?);
            }
            Some(at)
        }
        None => {
            let today = local_now.date_naive();
            let at = resolve(today)?;
            if at > now {
                Some(at)
            } else {
                resolve(today.succ_opt()?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(text: &str) -> Instant {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&chrono::Utc)
    }

    fn class_of(message: &str, status: Option<u16>, kind: Option<&str>) -> FailureClass {
        let s = Signals {
            http_status: status,
            error_type: kind,
            message: Some(message),
            ..Signals::default()
        };
        classify(
            ProcessEnding::Exited(1),
            &s,
            at("2026-12-02T04:00:00Z"),
            Tz::UTC,
        )
        .class
    }

    #[test]
    fn the_real_clis_messages_get_their_classes() {
        use FailureClass as C;
        let cases: &[(&str, Option<u16>, Option<&str>, C)] = &[
            // claude 2.1.332's results against a mock answering each status.
            ("API Error: Request rejected (429) · Claude usage limit reached. Your limit will reset at 9am (America/Chicago).", Some(429), Some("rate_limit_error"), C::UsageLimit),
            ("API Error: Request rejected (429) · You've hit your session limit · resets 12:50am (America/Los_Angeles)", Some(429), Some("rate_limit_error"), C::UsageLimit),
            ("API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit", Some(429), Some("rate_limit_error"), C::RateLimit),
            ("API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment.", Some(529), Some("overloaded_error"), C::Overloaded),
            ("API Error: 503 Service Unavailable. This is a server-side issue, usually temporary", Some(503), Some("api_error"), C::Overloaded),
            ("Invalid API key · Fix external API key", Some(401), Some("authentication_error"), C::Auth),
            ("API Error: 400 mock says: bad request", Some(400), Some("invalid_request_error"), C::Other),
            // codex 0.171.0's messages (no status in its JSON).
            ("You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 6:18 AM.", None, None, C::UsageLimit),
            ("You’ve hit your usage limit. Try again later.", None, None, C::UsageLimit),
            ("exceeded retry limit, last status: 429 Too Many Requests", None, None, C::RateLimit),
            ("unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:1/v1/responses", None, None, C::Auth),
            ("unexpected status 503 Service Unavailable: Service Unavailable, url: http://127.0.0.1:1/v1/responses", None, None, C::Overloaded),
            ("Your input exceeds the context window of this model.", None, None, C::ContextLength),
        ];
        for (message, status, kind, class) in cases {
            assert_eq!(class_of(message, *status, *kind), *class, "{message}");
        }
        let s = Signals {
            stop_reason: Some("prompt_too_long"),
            http_status: Some(400),
            message: Some("Prompt is too long · the request is ~250000 tokens"),
            ..Signals::default()
        };
        let now = at("2026-12-02T04:00:00Z");
        assert_eq!(
            classify(ProcessEnding::Exited(1), &s, now, Tz::UTC).class,
            C::ContextLength
        );
    }

    /// A megabyte of logs on stderr: the reason at either end still classifies the run
    /// (and its reset instant is still read); a reason buried in the middle is not
    /// looked for, which is the bound that keeps classification cheap.
    #[test]
    fn a_long_stderr_is_read_at_its_ends() {
        let now = at("2026-12-02T04:00:00Z");
        let logs = "debug: é streaming chunk 0123456789\n".repeat(30_000);
        let limit = "Claude usage limit reached. Your limit will reset at 9am (America/Chicago).\n";
        let ending = ProcessEnding::Exited(1);
        let classify_stderr = |stderr: &str| {
            let s = Signals {
                stderr,
                ..Signals::default()
            };
            classify(ending, &s, now, Tz::UTC)
        };
        let last = classify_stderr(&format!("{logs}{limit}"));
        assert_eq!(last.class, FailureClass::UsageLimit);
        assert_eq!(last.retry_at, Some(at("2026-12-02T15:00:00Z")));
        let first = classify_stderr(&format!("{limit}{logs}"));
        assert_eq!(first.class, FailureClass::UsageLimit);
        let buried = classify_stderr(&format!("{logs}{limit}{logs}"));
        assert_eq!(buried.class, FailureClass::Other);
        // Cut at character boundaries whatever the lengths.
        for extra in 0..4 {
            let odd = format!("{}{logs}", "x".repeat(extra));
            let (head, tail) = stderr_window(&odd);
            assert!(head.len() <= STDERR_HEAD_BYTES && tail.len() <= STDERR_TAIL_BYTES);
            assert!(odd.starts_with(head) && odd.ends_with(tail));
        }
    }

    #[test]
    fn endings_without_words_are_timeouts_crashes_or_other() {
        let now = at("2026-12-02T04:00:00Z");
        let quiet = Signals::default();
        let class = |e| classify(e, &quiet, now, Tz::UTC).class;
        assert_eq!(class(ProcessEnding::TimedOut), FailureClass::Timeout);
        assert_eq!(class(ProcessEnding::Signalled), FailureClass::Crash);
        assert_eq!(class(ProcessEnding::Exited(2)), FailureClass::Other);
        assert_eq!(class(ProcessEnding::NotStarted), FailureClass::Other);
        let panic = Signals {
            stderr: "thread 'main' panicked at src/main.rs:3:5",
            ..Signals::default()
        };
        assert_eq!(
            classify(ProcessEnding::Exited(101), &panic, now, Tz::UTC).class,
            FailureClass::Crash
        );
        let denied = Signals {
            tool_denials: 1,
            message: Some("could not edit"),
            ..Signals::default()
        };
        assert_eq!(
            classify(ProcessEnding::Exited(1), &denied, now, Tz::UTC).class,
            FailureClass::ToolDenied
        );
        // A timeout wins over what the CLI printed before it was stopped.
        let limit = Signals {
            message: Some("usage limit reached"),
            ..Signals::default()
        };
        assert_eq!(
            classify(ProcessEnding::TimedOut, &limit, now, Tz::UTC).class,
            FailureClass::Timeout
        );
    }

    #[test]
    fn reset_instants_are_read_in_the_zone_they_name() {
        let now = at("2026-12-02T04:00:00Z"); // 22:00 in Chicago (Dec 1), 20:00 in LA
        let r = |text: &str| reset_instant(text, now, Tz::UTC);
        assert_eq!(
            r("Claude usage limit reached. Your limit will reset at 9am (America/Chicago)."),
            Some(at("2026-12-02T15:00:00Z"))
        );
        assert_eq!(
            r("You've hit your session limit · resets 12:50am (America/Los_Angeles)"),
            Some(at("2026-12-02T08:50:00Z"))
        );
        // A time of day already past today is tomorrow's.
        assert_eq!(r("resets 3am"), Some(at("2026-12-03T03:00:00Z")));
        assert_eq!(r("resets 5:30pm"), Some(at("2026-12-02T17:30:00Z")));
        // codex: the CLI's local zone, which the caller passes.
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            reset_instant("or try again at 6:18 AM.", now, ny),
            Some(at("2026-12-02T11:18:00Z"))
        );
        assert_eq!(
            r("or try again at Dec 5th, 2026 4:18 AM."),
            Some(at("2026-12-05T04:18:00Z"))
        );
        assert_eq!(
            r("Your weekly limit will reset at Dec 5, 9am (America/Chicago)"),
            Some(at("2026-12-05T15:00:00Z"))
        );
        assert_eq!(
            r("try again in 2 days 3 hours 4 minutes."),
            Some(at("2026-12-04T07:04:00Z"))
        );
        assert_eq!(
            r("Please try again in 1.5s."),
            Some(at("2026-12-02T04:00:01.500Z"))
        );
        assert_eq!(
            r("Claude AI usage limit reached|1796184000"),
            chrono::DateTime::from_timestamp(1_796_184_000, 0)
        );
        assert_eq!(r("You’ve hit your usage limit. Try again later."), None);
        assert_eq!(r("try again at 25:00"), None);
        assert_eq!(r("resets soon"), None);
    }

    #[test]
    fn a_long_retry_after_on_a_429_is_a_usage_window() {
        let now = at("2026-12-02T04:00:00Z");
        let s = |secs| Signals {
            http_status: Some(429),
            retry_after_secs: Some(secs),
            message: Some("429"),
            ..Signals::default()
        };
        let short = classify(ProcessEnding::Exited(1), &s(30), now, Tz::UTC);
        assert_eq!(short.class, FailureClass::RateLimit);
        assert_eq!(short.retry_at, Some(at("2026-12-02T04:00:30Z")));
        let long = classify(ProcessEnding::Exited(1), &s(3_600), now, Tz::UTC);
        assert_eq!(long.class, FailureClass::UsageLimit);
        assert_eq!(long.retry_at, Some(at("2026-12-02T05:00:00Z")));
    }

    #[test]
    fn back_off_is_fixed_or_exponential_with_full_jitter_and_capped() {
        use crate::RetryBackoff::{Exponential, Fixed};
        let m = 60_000;
        let cap = 6 * 60 * m;
        // Fixed: the base, 4× for transient classes, capped.
        assert_eq!(
            retry_delay_ms(Fixed, m, cap, 3, Some(FailureClass::Other), 0.5),
            m
        );
        assert_eq!(
            retry_delay_ms(Fixed, m, cap, 1, Some(FailureClass::RateLimit), 0.5),
            4 * m
        );
        assert_eq!(
            retry_delay_ms(Fixed, m, 2 * m, 1, Some(FailureClass::Overloaded), 0.0),
            2 * m
        );
        // Exponential: a draw under base · 2^(attempt-1).
        let draw = |attempt, class, unit| retry_delay_ms(Exponential, m, cap, attempt, class, unit);
        assert_eq!(draw(1, None, 0.5), m / 2);
        assert_eq!(draw(3, None, 0.5), 2 * m);
        assert_eq!(draw(3, None, 0.999_999), 4 * m - 1);
        assert_eq!(draw(3, Some(FailureClass::RateLimit), 0.5), 8 * m);
        // At least a second, never above the cap.
        assert_eq!(draw(1, None, 0.0), 1_000);
        assert_eq!(draw(30, None, 0.75), cap * 3 / 4);
        assert_eq!(draw(u32::MAX, Some(FailureClass::Overloaded), 1.0), cap);
        // A cap below the base is the base.
        assert_eq!(retry_delay_ms(Exponential, m, 1, 5, None, 1.0), m);
    }

    #[test]
    fn retry_draws_are_stable_and_spread() {
        let at = at("2026-12-02T04:00:00Z");
        let a = crate::LoopId::new("aaaaaaaaaaaa");
        let b = crate::LoopId::new("bbbbbbbbbbbb");
        let u = retry_unit(&a, at, 1);
        assert_eq!(u, retry_unit(&a, at, 1));
        assert!((0.0..1.0).contains(&u));
        assert_ne!(u, retry_unit(&a, at, 2));
        assert_ne!(u, retry_unit(&b, at, 1));
        // Over many loops the draws cover the range.
        let draws: Vec<f64> = (0..1_000)
            .map(|i| retry_unit(&crate::LoopId::new(format!("{i:012x}")), at, 1))
            .collect();
        let low = draws.iter().filter(|d| **d < 0.25).count();
        let high = draws.iter().filter(|d| **d >= 0.75).count();
        assert!(
            (150..350).contains(&low) && (150..350).contains(&high),
            "{low} {high}"
        );
    }

    #[test]
    fn retries_and_transience_by_class() {
        assert!(FailureClass::RateLimit.is_transient());
        assert!(FailureClass::Overloaded.is_transient());
        assert!(!FailureClass::Other.is_transient());
        assert!(!FailureClass::Auth.is_retried());
        assert!(!FailureClass::ContextLength.is_retried());
        assert!(!FailureClass::UsageLimit.is_retried());
        assert!(FailureClass::Timeout.is_retried());
        assert!(FailureClass::Crash.is_retried());
    }
}
