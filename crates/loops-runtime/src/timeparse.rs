//! Parsing of absolute instants given on the command line (`--at`, `--expires-at`).

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone, Utc};
use loops_core::{Duration, Instant};

/// Accepts RFC 3339 (`2026-12-01T09:00:00Z`, `…+01:00`), a local date-time
/// (`2026-12-01 09:00`, `2026-12-01T09:00:30`), a local date (midnight), or a relative
/// `+DURATION` / `in DURATION` (`+10m`, `in 2h`).
pub fn parse_instant(flag: &str, input: &str, now: Instant) -> Result<Instant, String> {
    let text = input.trim();
    let bad = || {
        format!(
            "invalid {flag} {input:?}: expected RFC 3339 (2026-12-01T09:00:00Z), a local time (2026-12-01 09:00), or +DURATION (+10m)"
        )
    };
    if let Some(rel) = text.strip_prefix('+').or_else(|| text.strip_prefix("in ")) {
        let d = Duration::parse(rel).map_err(|e| format!("invalid {flag}: {e}"))?;
        return Ok(now + d.to_chrono());
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, fmt) {
            return local_to_utc(naive).ok_or_else(|| {
                format!("invalid {flag} {input:?}: that local time does not exist (daylight saving gap)")
            });
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(midnight) = date.and_hms_opt(0, 0, 0) {
            return local_to_utc(midnight).ok_or_else(bad);
        }
    }
    Err(bad())
}

/// A point in the past for a filter (`runs --since`, `--until`): a duration ago
/// (`1d`, `90m`), or any instant [`parse_instant`] accepts.
pub fn parse_past(flag: &str, input: &str, now: Instant) -> Result<Instant, String> {
    let text = input.trim();
    if let Ok(d) = Duration::parse(text) {
        return now
            .checked_sub_signed(d.to_chrono())
            .ok_or_else(|| format!("invalid {flag} {input:?}: too far back"));
    }
    parse_instant(flag, input, now).map_err(|_| {
        format!(
            "invalid {flag} {input:?}: expected a duration ago (1d, 2h) or an instant (2026-12-01T09:00:00Z, 2026-12-01 09:00)"
        )
    })
}

fn local_to_utc(naive: NaiveDateTime) -> Option<Instant> {
    Local
        .from_local_datetime(&naive)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        let now: Instant = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            parse_instant("--at", "2026-02-01T10:00:00Z", now).unwrap(),
            "2026-02-01T10:00:00Z".parse::<Instant>().unwrap()
        );
        assert_eq!(
            parse_instant("--at", "+10m", now).unwrap(),
            "2026-01-01T00:10:00Z".parse::<Instant>().unwrap()
        );
        assert!(parse_instant("--at", "2026-02-01 10:00", now).is_ok());
        let err = parse_instant("--at", "not-a-date", now).unwrap_err();
        assert!(err.starts_with("invalid --at \"not-a-date\""), "{err}");
    }

    #[test]
    fn past_points_are_durations_ago_or_instants() {
        let now: Instant = "2026-01-02T00:00:00Z".parse().unwrap();
        assert_eq!(
            parse_past("--since", "1d", now).unwrap(),
            "2026-01-01T00:00:00Z".parse::<Instant>().unwrap()
        );
        assert_eq!(
            parse_past("--since", "2026-01-01T12:00:00Z", now).unwrap(),
            "2026-01-01T12:00:00Z".parse::<Instant>().unwrap()
        );
        let err = parse_past("--since", "garbage", now).unwrap_err();
        assert!(
            err.starts_with("invalid --since \"garbage\": expected a duration ago"),
            "{err}"
        );
    }
}
