//! `Duration::parse`: never panics; a parsed duration is positive, at most 100 years,
//! converts to chrono, and its `Display` form parses back to the same milliseconds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loops_core::Duration;

/// The documented ceiling of `Duration::parse` (100 × 365 days).
const MAX_MS: u64 = 100 * 365 * 86_400_000;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(duration) = Duration::parse(text) else {
        return;
    };
    let ms = duration.as_millis();
    assert!(ms > 0 && ms <= MAX_MS, "{text:?} parsed to {ms} ms");
    assert_eq!(duration.to_chrono().num_milliseconds(), ms as i64);
    let shown = duration.to_string();
    assert_eq!(
        Duration::parse(&shown).map(Duration::as_millis),
        Ok(ms),
        "{text:?} → {shown:?}"
    );
});
