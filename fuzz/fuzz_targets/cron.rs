//! `CronSchedule::parse(expression, zone)` and the next few fire instants.
//!
//! Input: byte 0 picks the zone (a DST-heavy few, else any IANA zone), bytes 1–2 an
//! offset in hours from 2026-01-01T00:00:00Z (up to ~7.5 years, so DST days are
//! reached), the rest is the expression as UTF-8. Checks: nothing panics; every next
//! fire instant is strictly after the previous one; `last_at_or_before` of a fire
//! instant is that instant.
#![no_main]

use chrono::TimeDelta;
use libfuzzer_sys::fuzz_target;
use loops_core::cron::CronSchedule;
use loops_core::Instant;

/// Zones with unusual DST rules: 30-minute shifts, southern hemisphere, removed DST.
const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Tehran",
    "Pacific/Chatham",
    "Africa/Casablanca",
];

fuzz_target!(|data: &[u8]| {
    let [zone, h0, h1, rest @ ..] = data else {
        return;
    };
    let Ok(expression) = std::str::from_utf8(rest) else {
        return;
    };
    let zone = match ZONES.get(usize::from(*zone)) {
        Some(name) => *name,
        None => chrono_tz::TZ_VARIANTS[usize::from(*zone) % chrono_tz::TZ_VARIANTS.len()].name(),
    };
    let Ok(schedule) = CronSchedule::parse(expression, zone) else {
        return;
    };
    assert_eq!(schedule.expression(), expression);
    let base: Instant = "2026-01-01T00:00:00Z".parse().unwrap();
    let mut previous = base + TimeDelta::hours(i64::from(u16::from_le_bytes([*h0, *h1])));
    for _ in 0..4 {
        let Some(next) = schedule.next_after(previous) else {
            break;
        };
        assert!(
            next > previous,
            "{expression:?} in {zone}: next_after({previous}) = {next}"
        );
        assert_eq!(
            schedule.last_at_or_before(next),
            Some(next),
            "{expression:?} in {zone}: last_at_or_before({next})"
        );
        previous = next;
    }
});
