//! `loops::timeparse::parse_instant`, the `--at` / `--expires-at` parser.
//!
//! Input: bytes 0–3 pick `now` (seconds after 2000-01-01, up to 2136), the rest is
//! the flag value as UTF-8. The local zone is the process's (`scripts/fuzz.sh` sets
//! `TZ=America/New_York`, so DST gaps and repeated hours are reachable). Checks:
//! nothing panics; a relative value (`+10m`, `in 2h`) lands strictly after `now`, by
//! exactly the duration `Duration::parse` reads; an error names the flag.
#![no_main]

use chrono::TimeDelta;
use libfuzzer_sys::fuzz_target;
use loops::timeparse::parse_instant;
use loops_core::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let [a, b, c, d, rest @ ..] = data else {
        return;
    };
    let Ok(input) = std::str::from_utf8(rest) else {
        return;
    };
    let base: Instant = "2000-01-01T00:00:00Z".parse().unwrap();
    let now = base + TimeDelta::seconds(i64::from(u32::from_le_bytes([*a, *b, *c, *d])));
    match parse_instant("--at", input, now) {
        Ok(at) => {
            let text = input.trim();
            if let Some(rel) = text.strip_prefix('+').or_else(|| text.strip_prefix("in ")) {
                let duration = Duration::parse(rel).unwrap();
                assert_eq!(at, now + duration.to_chrono(), "{input:?}");
                assert!(at > now, "{input:?}");
            }
        }
        Err(message) => assert!(message.starts_with("invalid --at"), "{message}"),
    }
});
