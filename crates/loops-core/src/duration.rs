//! Human durations: `500ms`, `30s`, `15m`, `1.5h`, `2d`; and how long something took,
//! for people ([`elapsed_text`]: `340ms`, `1.2s`, `2m05s`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How long something took, in milliseconds, as people read it: `340ms`, `1.2s`,
/// `2m05s`.
pub fn elapsed_text(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1_000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000)
    }
}

/// A strictly positive span of time with millisecond resolution. In JSON it is its
/// number of milliseconds (`timeoutMs: 1500`); zero is refused there too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Duration(u64);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ms = u64::deserialize(d)?;
        Self::from_millis(ms)
            .ok_or_else(|| serde::de::Error::custom("a duration must be greater than zero"))
    }
}

/// Why a duration string was rejected. The message always quotes the bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    #[error("invalid duration {0:?}: expected a number and a unit (ms, s, m, h, d), e.g. 500ms, 30s, 15m, 1.5h, 2d")]
    Syntax(String),
    #[error("invalid duration {0:?}: must be greater than zero")]
    NotPositive(String),
    /// Positive but shorter than the 1 ms resolution (`0.0001s`).
    #[error("invalid duration {0:?}: the smallest duration is 1ms")]
    BelowResolution(String),
    #[error("invalid duration {0:?}: too large")]
    TooLarge(String),
}

impl Duration {
    /// Builds a duration from milliseconds; `None` for zero.
    pub fn from_millis(ms: u64) -> Option<Self> {
        (ms > 0).then_some(Self(ms))
    }
    /// The span in milliseconds (always > 0).
    pub fn as_millis(self) -> u64 {
        self.0
    }
    /// The span as a `std` duration, for timers and process limits.
    pub fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0)
    }
    /// The span as a chrono duration for instant arithmetic.
    pub fn to_chrono(self) -> chrono::TimeDelta {
        chrono::TimeDelta::milliseconds(i64::try_from(self.0).unwrap_or(i64::MAX))
    }
    /// Parses `500ms`, `30s`, `15m`, `1.5h`, `2d` (case-insensitive units, optional
    /// whitespace between number and unit).
    ///
    /// Every rejection says why: zero or a negative number (with or without a unit, so
    /// `0` reads as zero rather than as a missing unit) is "must be greater than
    /// zero", a positive span under 1 ms is "the smallest duration is 1ms", anything
    /// else that is not a number and a unit is a syntax error.
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let text = input.trim();
        let syntax = || DurationError::Syntax(input.to_owned());
        let Some(split) = text.find(|c: char| c.is_ascii_alphabetic()) else {
            return match text.parse::<f64>() {
                Ok(n) if n <= 0.0 => Err(DurationError::NotPositive(input.to_owned())),
                _ => Err(syntax()),
            };
        };
        let (number, unit) = text.split_at(split);
        let number = number.trim();
        if number.is_empty() {
            return Err(syntax());
        }
        let value: f64 = number.parse().map_err(|_| syntax())?;
        if !value.is_finite() {
            return Err(syntax());
        }
        let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
            "ms" => 1.0,
            "s" | "sec" | "secs" => 1_000.0,
            "m" | "min" | "mins" => 60_000.0,
            "h" | "hr" | "hrs" => 3_600_000.0,
            "d" | "day" | "days" => 86_400_000.0,
            _ => return Err(syntax()),
        };
        if value <= 0.0 {
            return Err(DurationError::NotPositive(input.to_owned()));
        }
        let exact = value * multiplier;
        if exact < 1.0 {
            return Err(DurationError::BelowResolution(input.to_owned()));
        }
        let ms = exact.round();
        // 100 years is far beyond any sensible schedule and keeps i64 math safe.
        if ms > 100.0 * 365.0 * 86_400_000.0 {
            return Err(DurationError::TooLarge(input.to_owned()));
        }
        Ok(Self(ms as u64))
    }
}

impl FromStr for Duration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Duration {
    /// Shortest exact rendering: `1500ms` → `1500ms`, `90000` → `90s`, `3600000` → `1h`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1_000, "s"),
        ];
        for (size, unit) in UNITS {
            if self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        let cases = [
            ("500ms", 500),
            ("30s", 30_000),
            ("15m", 900_000),
            ("1.5h", 5_400_000),
            ("2d", 172_800_000),
            ("1h", 3_600_000),
            (" 10 s ", 10_000),
        ];
        for (text, ms) in cases {
            assert_eq!(
                Duration::parse(text).map(Duration::as_millis),
                Ok(ms),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_zero_negative_and_garbage_naming_the_value() {
        for bad in [
            "0s", "0", "-5m", "abc", "", "5", "5x", "1.2.3s", "nan s", "0.0001ms",
        ] {
            let err = Duration::parse(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert_eq!(
            Duration::parse("-5m").unwrap_err().to_string(),
            "invalid duration \"-5m\": must be greater than zero"
        );
    }

    #[test]
    fn zero_without_a_unit_is_zero_and_sub_millisecond_names_the_resolution() {
        for zero in ["0", " 0 ", "0.0", "-1"] {
            assert_eq!(
                Duration::parse(zero),
                Err(DurationError::NotPositive(zero.to_owned())),
                "{zero:?}"
            );
        }
        assert_eq!(
            Duration::parse("5"),
            Err(DurationError::Syntax("5".to_owned())),
            "a bare positive number still needs a unit"
        );
        for tiny in ["0.0001s", "0.5ms", "0.0001ms"] {
            assert_eq!(
                Duration::parse(tiny).unwrap_err().to_string(),
                format!("invalid duration {tiny:?}: the smallest duration is 1ms")
            );
        }
        assert_eq!(Duration::parse("1ms").map(Duration::as_millis), Ok(1));
        assert_eq!(Duration::parse("1.4ms").map(Duration::as_millis), Ok(1));
        assert_eq!(Duration::parse("0.001s").map(Duration::as_millis), Ok(1));
    }

    #[test]
    fn json_is_milliseconds_and_refuses_zero() {
        let d: Duration = serde_json::from_str("1500").unwrap();
        assert_eq!(d.as_millis(), 1500);
        assert_eq!(serde_json::to_string(&d).unwrap(), "1500");
        assert_eq!(d.to_std(), std::time::Duration::from_millis(1500));
        let err = serde_json::from_str::<Duration>("0").unwrap_err();
        assert!(err.to_string().contains("greater than zero"), "{err}");
    }

    #[test]
    fn displays_shortest_exact_form() {
        for (ms, text) in [
            (500, "500ms"),
            (90_000, "90s"),
            (3_600_000, "1h"),
            (5_400_000, "90m"),
        ] {
            assert_eq!(Duration::from_millis(ms).unwrap().to_string(), text);
        }
    }
}
