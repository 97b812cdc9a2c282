//! What the pages say in words: schedules ("every 30s", "at 02:00 Europe/Berlin"),
//! durations, instants and relative times, and each status's marker (a shape and a
//! word beside its colour: status is never shown by colour alone).

use loops_core::{Anchor, Instant, RunStatus, Schedule, StepStatus, WorkflowRunStatus};

/// A schedule in words: `every 30s`, `every 5m after each finish`, `at 02:00
/// Europe/Berlin`, `at 09:30 on Mon–Fri UTC`, `hourly at :15`, `every 10 minutes`,
/// `once at 2026-12-01 14:00 UTC`, `dynamic, at least 1m apart`; other cron
/// expressions as `cron EXPR (ZONE)`.
pub fn schedule(s: &Schedule) -> String {
    match s {
        Schedule::Once { at } => format!("once at {} UTC", at.format("%Y-%m-%d %H:%M")),
        Schedule::Interval { every_ms, anchor } => match anchor {
            Anchor::FixedRate => format!("every {}", duration_ms(*every_ms)),
            Anchor::FixedDelay => format!("every {} after each finish", duration_ms(*every_ms)),
        },
        Schedule::Cron {
            expression,
            timezone,
        } => cron(expression, timezone),
        Schedule::Dynamic { min_interval_ms } => {
            format!("dynamic, at least {} apart", duration_ms(*min_interval_ms))
        }
    }
}

fn number(field: &str, max: u32) -> Option<u32> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok().filter(|n| *n <= max)
}

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

fn weekdays(field: &str) -> Option<String> {
    if field == "*" {
        return Some(String::new());
    }
    if field.eq_ignore_ascii_case("1-5") || field.eq_ignore_ascii_case("mon-fri") {
        return Some(" on Mon–Fri".to_owned());
    }
    if field.eq_ignore_ascii_case("0,6") || field.eq_ignore_ascii_case("6,0") {
        return Some(" on Sat and Sun".to_owned());
    }
    let days: Option<Vec<&str>> = field
        .split(',')
        .map(|d| {
            if let Some(n) = number(d, 7) {
                return Some(DAYS[(n % 7) as usize]);
            }
            DAYS.iter()
                .find(|name| name.eq_ignore_ascii_case(d))
                .copied()
        })
        .collect();
    days.map(|d| format!(" on {}", d.join(", ")))
}

fn cron(expression: &str, timezone: &str) -> String {
    let fallback = || format!("cron {expression} ({timezone})");
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let [min, hour, dom, month, dow] = fields.as_slice() else {
        return fallback();
    };
    if *dom != "*" || *month != "*" {
        return fallback();
    }
    // `*/N * * * *`, `* * * * *`.
    if *hour == "*" && *dow == "*" {
        if *min == "*" {
            return "every minute".to_owned();
        }
        if let Some(n) = min.strip_prefix("*/").and_then(|n| number(n, 59)) {
            return if n == 1 {
                "every minute".to_owned()
            } else {
                format!("every {n} minutes")
            };
        }
        if let Some(m) = number(min, 59) {
            return format!("hourly at :{m:02}");
        }
        return fallback();
    }
    let (Some(m), Some(days)) = (number(min, 59), weekdays(dow)) else {
        return fallback();
    };
    let hours: Option<Vec<u32>> = hour.split(',').map(|h| number(h, 23)).collect();
    match hours {
        Some(hours) if !hours.is_empty() => {
            let times: Vec<String> = hours.iter().map(|h| format!("{h:02}:{m:02}")).collect();
            format!("at {}{days} {timezone}", times.join(", "))
        }
        _ => fallback(),
    }
}

/// Milliseconds as the shortest exact duration (`30s`, `90m`, `250ms`).
pub fn duration_ms(ms: u64) -> String {
    loops_core::Duration::from_millis(ms).map_or_else(|| format!("{ms}ms"), |d| d.to_string())
}

/// An elapsed time as it is read: `340ms`, `1.2s`, `2m05s`, `3h04m`.
pub fn elapsed(ms: u64) -> String {
    if ms < 3_600_000 {
        loops_core::duration::elapsed_text(ms)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms % 3_600_000) / 60_000)
    }
}

/// An instant in UTC, to the second (`2026-12-01 14:00:05`).
pub fn instant(t: &Instant) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// An instant as RFC 3339 (for `<time datetime>` and our JavaScript).
pub fn iso(t: &Instant) -> String {
    loops_core::format_instant(t)
}

/// `in 4m`, `3h ago`, `now`.
pub fn relative(t: Instant, now: Instant) -> String {
    loops_core::format_relative(t, now)
}

/// The first 8 characters of an id, as pages show it in a list.
pub fn short_id(id: &str) -> String {
    id.chars().take(8).collect()
}

/// How a status is shown: its CSS class, its marker (a shape) and its word (the
/// templates draw it as `<span class="badge CLASS">MARKER WORD</span>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Badge {
    pub class: &'static str,
    pub marker: &'static str,
    pub word: &'static str,
}

/// How a status of a run, a step or a workflow run is shown, by its stored form. One
/// table, so a status looks the same wherever it stands.
fn status_look(status: &'static str) -> Badge {
    let (class, marker, word) = match status {
        "pending" => ("pending", "○", "pending"),
        "running" => ("running", "▶", "running"),
        "succeeded" => ("ok", "✓", "succeeded"),
        "failed" => ("fail", "✕", "failed"),
        "timed_out" => ("fail", "⧗", "timed out"),
        "abandoned" => ("fail", "!", "abandoned"),
        "skipped" => ("skip", "–", "skipped"),
        "cancelled" => ("skip", "⊘", "cancelled"),
        other => ("skip", "?", other),
    };
    Badge {
        class,
        marker,
        word,
    }
}

/// How a run status is shown.
pub fn run_status(s: RunStatus) -> Badge {
    status_look(s.as_str())
}

/// How a step status is shown.
pub fn step_status(s: StepStatus) -> Badge {
    status_look(s.as_str())
}

/// How a workflow run's status is shown: class, marker, word.
pub fn workflow_run_status(s: WorkflowRunStatus) -> Badge {
    status_look(s.as_str())
}

/// The one-letter class of a strip cell (kept short: a thousand loops' strips are
/// twenty thousand cells).
pub fn cell_class(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Running => "r",
        RunStatus::Succeeded => "s",
        RunStatus::Failed => "f",
        RunStatus::TimedOut => "t",
        RunStatus::Abandoned => "a",
        RunStatus::Skipped => "k",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_look() {
        let stored = RunStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .chain(StepStatus::ALL.iter().map(|s| s.as_str()))
            .chain(WorkflowRunStatus::ALL.iter().map(|s| s.as_str()));
        for status in stored {
            assert_ne!(status_look(status).marker, "?", "{status}");
        }
    }

    fn cron_words(e: &str, tz: &str) -> String {
        schedule(&Schedule::Cron {
            expression: e.to_owned(),
            timezone: tz.to_owned(),
        })
    }

    #[test]
    fn schedules_in_words() {
        let every = |ms, anchor| {
            schedule(&Schedule::Interval {
                every_ms: ms,
                anchor,
            })
        };
        assert_eq!(every(30_000, Anchor::FixedRate), "every 30s");
        assert_eq!(every(5_400_000, Anchor::FixedRate), "every 90m");
        assert_eq!(
            every(300_000, Anchor::FixedDelay),
            "every 5m after each finish"
        );
        assert_eq!(
            cron_words("0 2 * * *", "Europe/Berlin"),
            "at 02:00 Europe/Berlin"
        );
        assert_eq!(cron_words("30 9 * * 1-5", "UTC"), "at 09:30 on Mon–Fri UTC");
        assert_eq!(cron_words("0 8,20 * * *", "UTC"), "at 08:00, 20:00 UTC");
        assert_eq!(cron_words("0 6 * * 1,3", "UTC"), "at 06:00 on Mon, Wed UTC");
        assert_eq!(cron_words("*/10 * * * *", "UTC"), "every 10 minutes");
        assert_eq!(cron_words("15 * * * *", "UTC"), "hourly at :15");
        assert_eq!(cron_words("* * * * *", "UTC"), "every minute");
        assert_eq!(cron_words("0 0 1 * *", "UTC"), "cron 0 0 1 * * (UTC)");
        assert_eq!(cron_words("0 */2 * * *", "UTC"), "cron 0 */2 * * * (UTC)");
        assert_eq!(
            schedule(&Schedule::Dynamic {
                min_interval_ms: 60_000
            }),
            "dynamic, at least 1m apart"
        );
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T14:00:00Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            schedule(&Schedule::Once { at }),
            "once at 2026-12-01 14:00 UTC"
        );
    }

    #[test]
    fn elapsed_times_read_naturally() {
        assert_eq!(elapsed(340), "340ms");
        assert_eq!(elapsed(1_250), "1.2s");
        assert_eq!(elapsed(125_000), "2m05s");
        assert_eq!(elapsed(3_840_000), "1h04m");
    }
}
