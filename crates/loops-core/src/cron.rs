//! Five-field cron expressions evaluated in an IANA time zone.
//!
//! # Syntax
//!
//! Exactly five whitespace-separated fields: `minute hour day-of-month month
//! day-of-week`, the portable subset that system cron (Vixie cron, cronie) accepts:
//!
//! - `*`, numbers, ranges `a-b`, lists `a,b,c`, steps `*/n` and `a-b/n`;
//! - month names `JAN`–`DEC` and weekday names `SUN`–`SAT` (any case), also in ranges
//!   (`MON-FRI`; `FRI-SUN` ends on Sunday);
//! - day-of-week `0`–`7`, where both `0` and `7` are Sunday;
//! - the Vixie day rule: when both day fields are restricted (neither starts with
//!   `*`), a day matches if *either* matches; otherwise both must match (so
//!   `0 0 */2 * MON` means odd-numbered days that are Mondays, as in cronie);
//! - the aliases `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
//!   `@midnight` and `@hourly` (cronie's list; `@reboot` is not a schedule and is
//!   rejected).
//!
//! Rejected with a specific message: any other field count (no seconds or years),
//! values out of range, reversed ranges, a step of zero, a bare `n/step` (ambiguous
//! between cron dialects; the message suggests `n-max/step`), and croner's extensions
//! `L`, `W`, `#` and `?` (so expressions stay portable to system cron). An expression whose
//! days can never occur (`0 0 30 2 *`) is rejected at parse time instead of
//! producing a loop that never runs; `0 0 29 2 *` is fine and fires in leap years.
//!
//! # Evaluation and daylight saving time
//!
//! The fields are validated here and handed to `croner` in a canonical numeric form;
//! croner finds matches on the *wall clock* (a [`NaiveDateTime`]), and this module
//! maps each wall-clock match to real instants itself, because the DST rules we need
//! are cronie's and differ from croner's own:
//!
//! - **Fixed-hour expressions** (the hour field does not start with `*`, e.g.
//!   `30 2 * * *`, `*/15 1 * * *`, `0 9,17 * * 1-5`): a wall-clock time skipped by a
//!   spring-forward gap fires once, at the first real instant after the gap
//!   (`30 2 * * *` in America/New_York on 2026-03-08 fires at 03:00 EDT); a
//!   wall-clock time that happens twice in a fall-back fires once, at its first
//!   occurrence (`30 1 * * *` on 2026-11-01 fires at 01:30 EDT only).
//! - **Wildcard-hour expressions** (the hour field starts with `*`, e.g. `0 * * * *`,
//!   `*/5 * * * *`, `@hourly`): they follow real time. A skipped wall-clock time does
//!   not fire (the job still runs every real hour: 01:00 EST is followed by 03:00
//!   EDT, one hour later), and a repeated wall-clock time fires on both occurrences
//!   (01:00 EDT and 01:00 EST are distinct instants an hour apart).
//!
//! This is cronie's behaviour (wildcard jobs run by real time, fixed-time jobs
//! neither skip nor repeat), decided by the hour field alone: an expression that
//! names its hours says "once at this time of day", one that does not says "every
//! hour". (cronie also counts a `*` minute field as wildcard; here `*/15 1 * * *`
//! stays fixed-hour, so a repeated 01:00 hour runs once and a skipped 02:00 hour
//! still runs once after the gap, as the README's "Scheduling contract" promises
//! under "Daylight saving".)
//!
//! [`CronSchedule`] parses once; [`CronSchedule::next_after`] costs a croner search
//! plus one or two time zone lookups, about 1–2 µs (see `benches/cron_next.rs`).
//! croner alone walks non-matching days one at a time (≈10 µs for `0 0 29 2 *`), so
//! a month-at-a-time bit-mask scan over our own copy of the fields starts it on the
//! first day that can match; croner still computes every answer.

use crate::Instant;
use chrono::{
    Datelike, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta, TimeZone,
    Timelike, Utc,
};
use chrono_tz::{GapInfo, Tz};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// Why a cron expression or time zone was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// The expression is malformed or can never match; `reason` says which part.
    #[error("invalid cron expression {expression:?}: {reason}")]
    Expression { expression: String, reason: String },
    /// The time zone is not an IANA name known to the bundled database.
    #[error(
        "unknown time zone {0:?}: expected an IANA name such as Europe/Berlin or America/New_York"
    )]
    TimeZone(String),
}

/// Resolves an IANA time zone name (`Europe/Berlin`, `UTC`). An exact match is
/// preferred; a case-insensitive match is accepted as a convenience.
pub fn parse_timezone(name: &str) -> Result<Tz, CronError> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    chrono_tz::TZ_VARIANTS
        .iter()
        .copied()
        .find(|tz| tz.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| CronError::TimeZone(name.to_owned()))
}

/// The canonical IANA spelling of a zone name accepted by [`parse_timezone`]
/// (`europe/berlin` → `Europe/Berlin`), the form loops store.
pub fn canonical_timezone(name: &str) -> Result<&'static str, CronError> {
    parse_timezone(name).map(|tz| tz.name())
}

/// A parsed cron expression bound to its time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSchedule {
    expression: String,
    timezone: Tz,
    /// Evaluates the validated fields on the wall clock only.
    cron: Cron,
    /// The hour field starts with `*`: follow real time across DST changes.
    wildcard_hour: bool,
    /// Our own copy of the fields, used only to start croner on a matching day.
    skip: DaySkip,
}

/// Upper bound on wall-clock candidates examined by one search. A candidate is only
/// rejected inside a DST gap or repeated hour, so real searches stop after a few
/// dozen at most; the bound only guarantees termination.
const MAX_CANDIDATES: u32 = 100_000;

impl CronSchedule {
    /// Parses a five-field expression (or alias) in the IANA zone `timezone`.
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, CronError> {
        let tz = parse_timezone(timezone)?;
        let fields = Fields::parse(expression).map_err(|reason| CronError::Expression {
            expression: expression.to_owned(),
            reason,
        })?;
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .dom_and_dow(fields.days_and)
            .build()
            .parse(&fields.canonical())
            .map_err(|e| CronError::Expression {
                expression: expression.to_owned(),
                // Unreachable for validated fields; kept as an error, not a panic.
                reason: format!("rejected by the cron evaluator: {e}"),
            })?;
        Ok(Self {
            expression: expression.to_owned(),
            timezone: tz,
            cron,
            wildcard_hour: fields.wildcard_hour,
            skip: DaySkip::new(&fields),
        })
    }

    /// The expression as given to [`CronSchedule::parse`].
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone the expression is evaluated in.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// Whether the hour field starts with `*`, which selects the real-time DST
    /// behaviour described in the module documentation.
    pub fn is_wildcard_hour(&self) -> bool {
        self.wildcard_hour
    }

    /// The first matching instant strictly after `after`, with the DST rules of the
    /// module documentation. `None` only past croner's search horizon (year 5000).
    pub fn next_after(&self, after: Instant) -> Option<Instant> {
        let local_after = after.with_timezone(&self.timezone).naive_local();
        // The second half of a repeated hour lies ahead in real time but behind on
        // the wall clock, so the forward wall-clock walk below cannot see it.
        let mut best = if self.wildcard_hour {
            self.later_half_after(after, local_after)
        } else {
            None
        };
        let mut cursor = local_after;
        for _ in 0..MAX_CANDIDATES {
            let Some(local) = self.next_local(cursor) else {
                break;
            };
            if let Some(found) = self.instant_of(local, after) {
                best = Some(best.map_or(found, |b| b.min(found)));
                break;
            }
            cursor = local;
        }
        best
    }

    /// The latest matching instant at or before `at`, with the same DST rules as
    /// [`CronSchedule::next_after`] (it is defined through it: the last instant of
    /// the forward sequence that is `<= at`).
    pub fn last_at_or_before(&self, at: Instant) -> Option<Instant> {
        let local = at.with_timezone(&self.timezone);
        let offset = TimeDelta::seconds(i64::from(local.offset().fix().local_minus_utc()));
        // The previous wall-clock match, read with today's offset, is a close guess
        // of where the forward walk should start; no match at all means none exists.
        let previous = self
            .cron
            .find_previous_occurrence(&local.naive_local(), true)
            .ok()?;
        let guess = previous.and_utc().checked_sub_signed(offset)?.min(at);
        let mut start = guess.checked_sub_signed(TimeDelta::seconds(1))?;
        let mut widen = TimeDelta::hours(3);
        // Any start works as long as the window (start, at] holds at least one slot:
        // the forward walk then ends on the latest one. Widen until it does.
        for _ in 0..32 {
            let mut last = None;
            let mut cursor = start;
            while let Some(slot) = self.next_after(cursor) {
                if slot > at {
                    break;
                }
                last = Some(slot);
                cursor = slot;
            }
            if last.is_some() {
                return last;
            }
            start = start.checked_sub_signed(widen)?;
            widen = widen.checked_mul(2)?;
        }
        None
    }

    /// The matching instants strictly after `after`, in order.
    pub fn iter_after(&self, after: Instant) -> impl Iterator<Item = Instant> + '_ {
        std::iter::successors(self.next_after(after), move |t| self.next_after(*t))
    }

    /// The first wall-clock match strictly after `local`.
    fn next_local(&self, local: NaiveDateTime) -> Option<NaiveDateTime> {
        // croner walks day by day through non-matching days (four years of them for
        // `0 0 29 2 *`), which costs microseconds; starting it on the first matching
        // day keeps every search well under the 10 µs budget. croner still decides
        // the answer: the skip never passes a day that could match.
        match self.skip.first_day_after(local) {
            Some(day) if day > local.date() => self
                .cron
                .find_next_occurrence(&day.and_time(NaiveTime::MIN), true)
                .ok(),
            _ => self.cron.find_next_occurrence(&local, false).ok(),
        }
    }

    /// The instant at which the wall-clock match `local` fires, if it fires strictly
    /// after `after` on the forward walk.
    fn instant_of(&self, local: NaiveDateTime, after: Instant) -> Option<Instant> {
        let found = match self.timezone.from_local_datetime(&local) {
            LocalResult::Single(t) => t.with_timezone(&Utc),
            LocalResult::Ambiguous(earlier, later) => {
                let earlier = earlier.with_timezone(&Utc);
                let later = later.with_timezone(&Utc);
                if earlier > after || !self.wildcard_hour {
                    // A fixed-hour job fires on the first occurrence only.
                    earlier
                } else {
                    later
                }
            }
            LocalResult::None if self.wildcard_hour => return None,
            // A fixed-hour job whose time was skipped fires when the gap ends.
            LocalResult::None => GapInfo::new(&local, &self.timezone)?
                .end?
                .with_timezone(&Utc),
        };
        (found > after).then_some(found)
    }

    /// When `after` lies on the first half of a repeated hour, the earliest match on
    /// the second half (all of which is still ahead).
    fn later_half_after(&self, after: Instant, local_after: NaiveDateTime) -> Option<Instant> {
        let LocalResult::Ambiguous(_, later) = self.timezone.from_local_datetime(&local_after)
        else {
            return None;
        };
        let later = later.with_timezone(&Utc);
        if after >= later {
            return None;
        }
        // `later - after` is the size of the clock change: wall-clock times within
        // that distance before `local_after` map, on the second half, past `after`.
        let mut cursor = local_after.checked_sub_signed(later - after)?;
        for _ in 0..MAX_CANDIDATES {
            let local = self.next_local(cursor)?;
            if local > local_after {
                return None;
            }
            if let LocalResult::Ambiguous(_, second) = self.timezone.from_local_datetime(&local) {
                let second = second.with_timezone(&Utc);
                if second > after {
                    return Some(second);
                }
            }
            cursor = local;
        }
        None
    }
}

/// The date and time-of-day fields as bit sets, to find the first day on which the
/// expression can fire without croner's day-by-day walk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DaySkip {
    minutes: u64,
    hours: u64,
    months: u64,
    /// Bit `d` for day-of-month `d`.
    days: u64,
    /// For each weekday of the 1st of a month (0 = Sunday), the days-of-month whose
    /// weekday matches.
    weekday_days: [u64; 7],
    days_and: bool,
}

/// Months scanned before leaving the search to croner alone; covers the eight-year
/// gap between leap days around 2100 and every common expression.
const SKIP_MONTHS: u32 = 12 * 9;

impl DaySkip {
    fn new(fields: &Fields) -> Self {
        let mut weekday_days = [0u64; 7];
        for (first, mask) in weekday_days.iter_mut().enumerate() {
            for day in 1..=31u32 {
                let weekday = (first as u32 + day - 1) % 7;
                if fields.weekdays & (1 << weekday) != 0 {
                    *mask |= 1 << day;
                }
            }
        }
        Self {
            minutes: fields.minutes,
            hours: fields.hours,
            months: fields.months,
            days: fields.days,
            weekday_days,
            days_and: fields.days_and,
        }
    }

    /// The first day on which a match strictly after `local` can fall: today if a
    /// matching time of day is still ahead on a matching day, else the next matching
    /// day. `None` when none is found within [`SKIP_MONTHS`].
    fn first_day_after(&self, local: NaiveDateTime) -> Option<NaiveDate> {
        let today = local.date();
        let (hour, minute) = (local.hour(), local.minute());
        // Fire times are whole minutes, so one is still ahead today when a later
        // hour matches, or this hour matches and a later minute does.
        let time_left = self.hours >> (hour + 1) != 0
            || (self.hours & (1 << hour) != 0 && self.minutes >> (minute + 1) != 0);
        let from = if time_left { today } else { today.succ_opt()? };
        self.first_day_from(from)
    }

    /// The first matching day at or after `from`, scanning whole months with masks.
    fn first_day_from(&self, from: NaiveDate) -> Option<NaiveDate> {
        let (mut year, mut month, mut min_day) = (from.year(), from.month(), from.day());
        for _ in 0..SKIP_MONTHS {
            if self.months & (1 << month) != 0 {
                let first = NaiveDate::from_ymd_opt(year, month, 1)?;
                let length = days_in_month(year, month);
                let by_weekday = self.weekday_days[first.weekday().num_days_from_sunday() as usize];
                let matching = if self.days_and {
                    self.days & by_weekday
                } else {
                    self.days | by_weekday
                };
                // Days min_day..=length of this month.
                let allowed = ((1u64 << (length + 1)) - 1) & !((1u64 << min_day) - 1);
                let candidates = matching & allowed;
                if candidates != 0 {
                    return NaiveDate::from_ymd_opt(year, month, candidates.trailing_zeros());
                }
            }
            min_day = 1;
            if month == 12 {
                (year, month) = (year.checked_add(1)?, 1);
            } else {
                month += 1;
            }
        }
        None
    }
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// One field's bounds and names.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    /// Three-letter names, the first standing for `names_from`.
    names: &'static [&'static str],
    names_from: u32,
}

const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    names_from: 0,
};
const DAY_OF_MONTH: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    names_from: 0,
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    names_from: 1,
};
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    names_from: 0,
};

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
/// Longest length of each month (February in a leap year).
const MONTH_MAX_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// The five fields as bit sets (bit `v` set when value `v` matches).
struct Fields {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    /// Sunday is bit 0 only (`7` is folded into it).
    weekdays: u64,
    /// Vixie rule: both day fields must match when either starts with `*`.
    days_and: bool,
    wildcard_hour: bool,
}

impl Fields {
    fn parse(expression: &str) -> Result<Self, String> {
        let trimmed = expression.trim();
        if trimmed.is_empty() {
            return Err("expression is empty".to_owned());
        }
        let expanded = if trimmed.starts_with('@') {
            expand_alias(trimmed)?
        } else {
            trimmed
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = parts[..] else {
            return Err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                parts.len()
            ));
        };
        let mut weekdays = parse_field(&DAY_OF_WEEK, dow)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let fields = Self {
            minutes: parse_field(&MINUTE, minute)?,
            hours: parse_field(&HOUR, hour)?,
            days: parse_field(&DAY_OF_MONTH, dom)?,
            months: parse_field(&MONTH, month)?,
            weekdays,
            days_and: dom.starts_with('*') || dow.starts_with('*'),
            wildcard_hour: hour.starts_with('*'),
        };
        fields.check_days_exist()?;
        Ok(fields)
    }

    /// With the AND rule, some selected day must exist in some selected month (every
    /// date falls on every weekday over the years, so weekdays cannot empty it).
    /// With the OR rule the weekdays alone always match some day.
    fn check_days_exist(&self) -> Result<(), String> {
        if !self.days_and {
            return Ok(());
        }
        let months: Vec<u32> = values(self.months).collect();
        if months
            .iter()
            .any(|&m| values(self.days).any(|d| d <= MONTH_MAX_DAYS[m as usize - 1]))
        {
            return Ok(());
        }
        let days: Vec<String> = values(self.days).map(|d| d.to_string()).collect();
        let names: Vec<&str> = months
            .iter()
            .map(|&m| MONTH_NAMES[m as usize - 1])
            .collect();
        Err(format!(
            "day-of-month {} never occurs in {}",
            days.join(","),
            join_or(&names)
        ))
    }

    /// A numeric five-field form croner parses unambiguously.
    fn canonical(&self) -> String {
        [
            self.minutes,
            self.hours,
            self.days,
            self.months,
            self.weekdays,
        ]
        .iter()
        .map(|&bits| {
            values(bits)
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(" ")
    }
}

/// The values whose bits are set, ascending.
fn values(bits: u64) -> impl Iterator<Item = u32> {
    (0..64u32).filter(move |v| bits & (1 << v) != 0)
}

fn join_or(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn expand_alias(alias: &str) -> Result<&'static str, String> {
    Ok(match alias.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@reboot" => {
            return Err("@reboot is not a schedule; run the loop once with --at instead".to_owned())
        }
        _ => {
            return Err(format!(
                "unknown alias {alias}: expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"
            ))
        }
    })
}

/// Parses one field into a bit set, with messages that name the field and the value.
fn parse_field(spec: &FieldSpec, text: &str) -> Result<u64, String> {
    let name = spec.name;
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("{name} field {text:?} has an empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(parse_step(spec, step)?)),
            None => (item, None),
        };
        let (start, end) = if range == "*" {
            (spec.min, spec.max)
        } else if let Some((a, b)) = range.split_once('-') {
            if a.is_empty() || b.is_empty() {
                return Err(format!("{name} range {range:?} is missing a bound"));
            }
            let start = parse_value(spec, a)?;
            // `FRI-SUN` means Friday through Sunday, so a closing SUN is 7.
            let end = if spec.max == 7 && b.eq_ignore_ascii_case("SUN") {
                7
            } else {
                parse_value(spec, b)?
            };
            if start > end {
                return Err(format!(
                    "{name} range {range} is reversed (the start must not exceed the end)"
                ));
            }
            (start, end)
        } else {
            let value = parse_value(spec, range)?;
            if let Some(step) = step {
                return Err(format!(
                    "{name} step {item:?} needs a range: write \"{value}-{}/{step}\" or \"*/{step}\"",
                    spec.max
                ));
            }
            (value, value)
        };
        let step = step.unwrap_or(1);
        let mut value = start;
        while value <= end {
            bits |= 1 << value;
            value += step;
        }
    }
    Ok(bits)
}

fn parse_step(spec: &FieldSpec, text: &str) -> Result<u32, String> {
    let name = spec.name;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{name} step {text:?} is not a number"));
    }
    match text.parse::<u32>() {
        Ok(0) => Err(format!("{name} step must be at least 1")),
        Ok(step) if step <= spec.max => Ok(step),
        _ => Err(format!("{name} step {text} out of range 1-{}", spec.max)),
    }
}

fn parse_value(spec: &FieldSpec, text: &str) -> Result<u32, String> {
    let name = spec.name;
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<u32>() {
            Ok(v) if (spec.min..=spec.max).contains(&v) => Ok(v),
            _ => Err(format!(
                "{name} value {text} out of range {}-{}",
                spec.min, spec.max
            )),
        };
    }
    if let Some(index) = spec.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(spec.names_from + index as u32);
    }
    // croner's extensions (`L`, `5L`, `15W`, `LW`, `5#3`, `?`) get a message of their
    // own: they are valid somewhere, just not here.
    let suffix = text
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect::<String>()
        .to_ascii_uppercase();
    if text.contains(['#', '?']) || matches!(suffix.as_str(), "L" | "W" | "LW") {
        return Err(format!(
            "{name} value {text:?} uses an unsupported extension (L, W, # and ? are not supported)"
        ));
    }
    Err(match spec.names.first() {
        Some(first) => format!(
            "{name} value {text:?} is not a number or a name ({}-{} or {first}-{})",
            spec.min,
            spec.max,
            spec.names.last().copied().unwrap_or(first)
        ),
        None => format!("{name} value {text:?} is not a number"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, Timelike, Weekday};

    fn utc(text: &str) -> Instant {
        text.parse().unwrap()
    }

    fn schedule(expression: &str, timezone: &str) -> CronSchedule {
        CronSchedule::parse(expression, timezone).unwrap()
    }

    /// The first `n` fires strictly after `after`, as RFC 3339 UTC strings.
    fn fires(expression: &str, timezone: &str, after: &str, n: usize) -> Vec<String> {
        schedule(expression, timezone)
            .iter_after(utc(after))
            .take(n)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect()
    }

    fn error(expression: &str) -> String {
        CronSchedule::parse(expression, "UTC")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn next_is_strictly_after() {
        let s = schedule("30 9 * * *", "UTC");
        assert_eq!(
            s.next_after(utc("2026-01-01T09:30:00Z")),
            Some(utc("2026-01-02T09:30:00Z"))
        );
        assert_eq!(
            s.next_after(utc("2026-01-01T09:29:59.999Z")),
            Some(utc("2026-01-01T09:30:00Z"))
        );
        assert_eq!(
            s.next_after(utc("2026-01-01T09:30:00.001Z")),
            Some(utc("2026-01-02T09:30:00Z"))
        );
    }

    #[test]
    fn new_york_spring_forward_fixed_time_fires_once_at_the_end_of_the_gap() {
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z); 02:30 never happens.
        assert_eq!(
            fires("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 3),
            [
                "2026-03-08T07:00:00Z", // 03:00 EDT, the first instant after the gap
                "2026-03-09T06:30:00Z", // 02:30 EDT
                "2026-03-10T06:30:00Z",
            ]
        );
        // Every skipped time of a fixed-hour job collapses into that one instant.
        assert_eq!(
            fires(
                "*/15 2 * * *",
                "America/New_York",
                "2026-03-08T06:00:00Z",
                2
            ),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]
        );
        // A job at 03:00 and one at the skipped 02:00 coincide; it fires once.
        assert_eq!(
            fires("0 2,3 * * *", "America/New_York", "2026-03-08T06:00:00Z", 2),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]
        );
    }

    #[test]
    fn new_york_fall_back_fixed_time_fires_once_on_the_first_occurrence() {
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST (06:00Z); 01:30 happens twice.
        assert_eq!(
            fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
            ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
        );
        // Starting inside the repeated hour, on either half, never repeats it.
        for after in ["2026-11-01T05:30:00Z", "2026-11-01T06:10:00Z"] {
            assert_eq!(
                fires("30 1 * * *", "America/New_York", after, 1),
                ["2026-11-02T06:30:00Z"],
                "after {after}"
            );
        }
        assert_eq!(
            fires(
                "*/20 1 * * *",
                "America/New_York",
                "2026-11-01T04:59:00Z",
                4
            ),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:20:00Z",
                "2026-11-01T05:40:00Z",
                "2026-11-02T06:00:00Z",
            ]
        );
    }

    #[test]
    fn new_york_wildcard_hour_follows_real_time() {
        // Fall back: 01:00 EDT (05:00Z) and 01:00 EST (06:00Z) are both real hours.
        assert_eq!(
            fires("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", 4),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T08:00:00Z",
            ]
        );
        // From inside the first half, the second half is still ahead.
        assert_eq!(
            fires("0 * * * *", "America/New_York", "2026-11-01T05:30:00Z", 2),
            ["2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"]
        );
        assert_eq!(
            fires(
                "*/30 * * * *",
                "America/New_York",
                "2026-11-01T05:10:00Z",
                4
            ),
            [
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-01T07:00:00Z",
            ]
        );
        // Spring forward: 01:30 EST is followed one real hour later by 03:30 EDT.
        assert_eq!(
            fires("30 * * * *", "America/New_York", "2026-03-08T05:45:00Z", 3),
            [
                "2026-03-08T06:30:00Z",
                "2026-03-08T07:30:00Z",
                "2026-03-08T08:30:00Z",
            ]
        );
    }

    #[test]
    fn berlin_spring_forward_and_fall_back() {
        // 2026-03-29 01:00Z: 02:00 CET jumps to 03:00 CEST.
        assert_eq!(
            fires("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
            ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
        );
        assert_eq!(
            fires("0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z", 3),
            [
                "2026-03-29T00:00:00Z", // 01:00 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST
                "2026-03-29T02:00:00Z",
            ]
        );
        // 2026-10-25 01:00Z: 03:00 CEST falls back to 02:00 CET.
        assert_eq!(
            fires("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
        assert_eq!(
            fires("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", 3),
            [
                "2026-10-25T00:00:00Z", // 02:00 CEST
                "2026-10-25T01:00:00Z", // 02:00 CET
                "2026-10-25T02:00:00Z", // 03:00 CET
            ]
        );
    }

    #[test]
    fn names_ranges_lists_and_steps() {
        assert_eq!(
            fires("0 9 * jan,Jul mon-FRI", "UTC", "2026-06-30T12:00:00Z", 2),
            ["2026-07-01T09:00:00Z", "2026-07-02T09:00:00Z"]
        );
        assert_eq!(
            fires("10-50/20 */6 * * *", "UTC", "2026-01-01T00:00:00Z", 4),
            [
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:30:00Z",
                "2026-01-01T00:50:00Z",
                "2026-01-01T06:10:00Z",
            ]
        );
        // Names equal numbers.
        let by_name = fires("0 0 * FEB SAT", "UTC", "2026-01-01T00:00:00Z", 6);
        let by_number = fires("0 0 * 2 6", "UTC", "2026-01-01T00:00:00Z", 6);
        assert_eq!(by_name, by_number);
    }

    #[test]
    fn seven_is_sunday() {
        let sundays = fires("0 12 * * 0", "UTC", "2026-01-01T00:00:00Z", 5);
        assert_eq!(
            fires("0 12 * * 7", "UTC", "2026-01-01T00:00:00Z", 5),
            sundays
        );
        assert_eq!(
            fires("0 12 * * SUN", "UTC", "2026-01-01T00:00:00Z", 5),
            sundays
        );
        assert_eq!(sundays[0], "2026-01-04T12:00:00Z");
        // A range ending in 7 or SUN includes Sunday.
        let weekend = fires("0 12 * * FRI-SUN", "UTC", "2026-01-01T00:00:00Z", 3);
        assert_eq!(
            weekend,
            [
                "2026-01-02T12:00:00Z",
                "2026-01-03T12:00:00Z",
                "2026-01-04T12:00:00Z",
            ]
        );
        assert_eq!(
            fires("0 12 * * 5-7", "UTC", "2026-01-01T00:00:00Z", 3),
            weekend
        );
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        let s = schedule("15 14 1 * MON", "UTC");
        let mut count = 0;
        for t in s.iter_after(utc("2026-01-01T00:00:00Z")) {
            if t >= utc("2027-01-01T00:00:00Z") {
                break;
            }
            assert!(t.day() == 1 || t.weekday() == Weekday::Mon, "{t}");
            assert_eq!((t.hour(), t.minute()), (14, 15));
            count += 1;
        }
        // 52 Mondays in 2026 plus the first days of months that are not Mondays
        // (June 1st 2026 is a Monday).
        assert_eq!(count, 52 + 11);
        // A `*`-prefixed day field makes both required, as in Vixie cron.
        for t in schedule("0 0 */2 * MON", "UTC")
            .iter_after(utc("2026-01-01T00:00:00Z"))
            .take(20)
        {
            assert!(t.day() % 2 == 1 && t.weekday() == Weekday::Mon, "{t}");
        }
    }

    #[test]
    fn leap_day_finds_the_next_leap_year() {
        assert_eq!(
            fires("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", 3),
            [
                "2028-02-29T00:00:00Z",
                "2032-02-29T00:00:00Z",
                "2036-02-29T00:00:00Z",
            ]
        );
        // 2100 is not a leap year.
        assert_eq!(
            fires("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", 1),
            ["2104-02-29T00:00:00Z"]
        );
        assert_eq!(
            fires("0 0 29 2 *", "America/New_York", "2026-06-01T00:00:00Z", 1),
            ["2028-02-29T05:00:00Z"]
        );
    }

    #[test]
    fn sparse_days_beyond_the_skip_window_are_still_found() {
        // February 1st on a Monday (a `*`-prefixed day field means AND): the gap
        // between such years reaches eleven, longer than the day skip scans.
        let s = schedule("0 0 */29 2 MON", "UTC");
        let mut after = utc("2026-01-01T00:00:00Z");
        for _ in 0..5 {
            let next = s.next_after(after).unwrap();
            let expected = (after.year()..)
                .filter_map(|y| NaiveDate::from_ymd_opt(y, 2, 1))
                .map(|d| d.and_time(NaiveTime::MIN).and_utc())
                .find(|t| *t > after && t.weekday() == Weekday::Mon)
                .unwrap();
            assert_eq!(next, expected);
            after = next;
        }
        assert_eq!(after.year(), 2055); // 2027, 2038, 2044, 2049, 2055
    }

    #[test]
    fn aliases() {
        for (alias, equivalent) in [
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@MIDNIGHT", "0 0 * * *"),
            ("@hourly", "0 * * * *"),
        ] {
            assert_eq!(
                fires(alias, "Europe/Berlin", "2026-01-01T00:00:00Z", 3),
                fires(equivalent, "Europe/Berlin", "2026-01-01T00:00:00Z", 3),
                "{alias}"
            );
        }
        assert!(schedule("@hourly", "UTC").is_wildcard_hour());
        assert!(!schedule("@daily", "UTC").is_wildcard_hour());
    }

    #[test]
    fn every_error_message() {
        let prefix = |e: &str| format!("invalid cron expression {e:?}: ");
        let cases = [
            ("", "expression is empty"),
            ("   ", "expression is empty"),
            (
                "* * * *",
                "expected 5 fields (minute hour day-of-month month day-of-week), got 4",
            ),
            (
                "0 * * * * *",
                "expected 5 fields (minute hour day-of-month month day-of-week), got 6",
            ),
            ("61 * * * *", "minute value 61 out of range 0-59"),
            ("0 24 * * *", "hour value 24 out of range 0-23"),
            ("0 0 0 * *", "day-of-month value 0 out of range 1-31"),
            ("0 0 32 * *", "day-of-month value 32 out of range 1-31"),
            ("0 0 * 13 *", "month value 13 out of range 1-12"),
            ("0 0 * * 8", "day-of-week value 8 out of range 0-7"),
            (
                "99999999999 * * * *",
                "minute value 99999999999 out of range 0-59",
            ),
            ("*/0 * * * *", "minute step must be at least 1"),
            ("0 1-5/0 * * *", "hour step must be at least 1"),
            ("*/60 * * * *", "minute step 60 out of range 1-59"),
            ("*/x * * * *", "minute step \"x\" is not a number"),
            ("*/ * * * *", "minute step \"\" is not a number"),
            (
                "5/10 * * * *",
                "minute step \"5/10\" needs a range: write \"5-59/10\" or \"*/10\"",
            ),
            (
                "30-10 * * * *",
                "minute range 30-10 is reversed (the start must not exceed the end)",
            ),
            (
                "0 0 * * SAT-MON",
                "day-of-week range SAT-MON is reversed (the start must not exceed the end)",
            ),
            ("-5 * * * *", "minute range \"-5\" is missing a bound"),
            ("1,,2 * * * *", "minute field \"1,,2\" has an empty list item"),
            ("x * * * *", "minute value \"x\" is not a number"),
            ("MON * * * *", "minute value \"MON\" is not a number"),
            (
                "0 0 * FOO *",
                "month value \"FOO\" is not a number or a name (1-12 or JAN-DEC)",
            ),
            (
                "0 0 * * FUNDAY",
                "day-of-week value \"FUNDAY\" is not a number or a name (0-7 or SUN-SAT)",
            ),
            (
                "0 0 L * *",
                "day-of-month value \"L\" uses an unsupported extension (L, W, # and ? are not supported)",
            ),
            (
                "0 0 15W * *",
                "day-of-month value \"15W\" uses an unsupported extension (L, W, # and ? are not supported)",
            ),
            (
                "0 0 * * 5#3",
                "day-of-week value \"5#3\" uses an unsupported extension (L, W, # and ? are not supported)",
            ),
            (
                "0 0 * * 5L",
                "day-of-week value \"5L\" uses an unsupported extension (L, W, # and ? are not supported)",
            ),
            (
                "0 0 ? * MON",
                "day-of-month value \"?\" uses an unsupported extension (L, W, # and ? are not supported)",
            ),
            ("0 0 30 2 *", "day-of-month 30 never occurs in February"),
            (
                "0 0 31 4,6,9 *",
                "day-of-month 31 never occurs in April, June or September",
            ),
            (
                "0 0 30,31 FEB *",
                "day-of-month 30,31 never occurs in February",
            ),
            (
                "@reboot",
                "@reboot is not a schedule; run the loop once with --at instead",
            ),
            (
                "@often",
                "unknown alias @often: expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly",
            ),
        ];
        for (expression, reason) in cases {
            assert_eq!(
                error(expression),
                format!("{}{reason}", prefix(expression)),
                "{expression:?}"
            );
        }
        // With a restricted weekday the OR rule makes February 30th harmless.
        assert!(CronSchedule::parse("0 0 30 2 MON", "UTC").is_ok());
    }

    #[test]
    fn time_zones() {
        assert_eq!(
            CronSchedule::parse("* * * * *", "Mars/Olympus")
                .unwrap_err()
                .to_string(),
            "unknown time zone \"Mars/Olympus\": expected an IANA name such as Europe/Berlin or America/New_York"
        );
        assert_eq!(
            parse_timezone("Europe/Berlin").unwrap(),
            chrono_tz::Europe::Berlin
        );
        assert_eq!(
            parse_timezone("america/new_york").unwrap(),
            chrono_tz::America::New_York
        );
        assert_eq!(parse_timezone("UTC").unwrap(), chrono_tz::UTC);
        assert_eq!(parse_timezone(""), Err(CronError::TimeZone(String::new())));
        assert_eq!(canonical_timezone("europe/berlin"), Ok("Europe/Berlin"));
        assert_eq!(canonical_timezone("utc"), Ok("UTC"));
        assert!(canonical_timezone("Mars/Olympus").is_err());
        let s = schedule("0 9 * * *", "Asia/Kolkata");
        assert_eq!(s.timezone(), chrono_tz::Asia::Kolkata);
        assert_eq!(s.expression(), "0 9 * * *");
        assert_eq!(
            s.next_after(utc("2026-01-01T00:00:00Z")),
            Some(utc("2026-01-01T03:30:00Z"))
        );
    }

    #[test]
    fn last_at_or_before() {
        let s = schedule("*/5 * * * *", "America/New_York");
        assert_eq!(
            s.last_at_or_before(utc("2026-01-01T10:07:00Z")),
            Some(utc("2026-01-01T10:05:00Z"))
        );
        assert_eq!(
            s.last_at_or_before(utc("2026-01-01T10:05:00Z")),
            Some(utc("2026-01-01T10:05:00Z"))
        );
        let s = schedule("30 1 * * *", "America/New_York");
        // Inside the repeated hour the only 01:30 was the first one.
        assert_eq!(
            s.last_at_or_before(utc("2026-11-01T06:45:00Z")),
            Some(utc("2026-11-01T05:30:00Z"))
        );
        let s = schedule("30 2 * * *", "America/New_York");
        assert_eq!(
            s.last_at_or_before(utc("2026-03-08T07:30:00Z")),
            Some(utc("2026-03-08T07:00:00Z"))
        );
        let s = schedule("0 0 29 2 *", "UTC");
        assert_eq!(
            s.last_at_or_before(utc("2031-01-01T00:00:00Z")),
            Some(utc("2028-02-29T00:00:00Z"))
        );
    }

    mod properties {
        use super::*;
        use chrono::{NaiveDateTime, TimeDelta};
        use proptest::prelude::*;
        use std::sync::OnceLock;

        type Predicate = fn(&NaiveDateTime) -> bool;

        /// Expressions with an independent matcher written out by hand.
        const EXPRESSIONS: &[(&str, Predicate)] = &[
            ("*/5 * * * *", |n| n.minute() % 5 == 0),
            ("0 * * * *", |n| n.minute() == 0),
            ("45 */2 * * *", |n| n.minute() == 45 && n.hour() % 2 == 0),
            ("30 2 * * *", |n| n.hour() == 2 && n.minute() == 30),
            ("30 1 * * *", |n| n.hour() == 1 && n.minute() == 30),
            ("*/15 1-3 * * *", |n| {
                (1..=3).contains(&n.hour()) && n.minute() % 15 == 0
            }),
            ("0 9 * * 1-5", |n| {
                n.hour() == 9 && n.minute() == 0 && n.weekday().number_from_monday() <= 5
            }),
            ("0,30 2 * * SUN", |n| {
                n.hour() == 2 && n.minute() % 30 == 0 && n.weekday() == Weekday::Sun
            }),
            ("0 0 1 * MON", |n| {
                n.hour() == 0 && n.minute() == 0 && (n.day() == 1 || n.weekday() == Weekday::Mon)
            }),
        ];

        const ZONES: &[&str] = &[
            "America/New_York",
            "Europe/Berlin",
            "Australia/Lord_Howe", // half-hour DST shifts
            "Asia/Kolkata",
            "UTC",
        ];

        fn start() -> Instant {
            utc("2026-01-01T00:00:00Z")
        }
        const SPAN_SECONDS: i64 = 2 * 366 * 86_400;

        /// Offset changes in each zone over the tested span, so half the cases land
        /// within a couple of days of one.
        fn transitions(zone: Tz) -> &'static [Instant] {
            static CACHE: OnceLock<Vec<(Tz, Vec<Instant>)>> = OnceLock::new();
            let all = CACHE.get_or_init(|| {
                ZONES
                    .iter()
                    .map(|name| {
                        let tz: Tz = name.parse().unwrap();
                        let offset = |t: Instant| t.with_timezone(&tz).offset().fix();
                        let mut found = Vec::new();
                        let mut t = start();
                        while t < start() + TimeDelta::seconds(SPAN_SECONDS) {
                            let next = t + TimeDelta::minutes(15);
                            if offset(t) != offset(next) {
                                found.push(next);
                            }
                            t = next;
                        }
                        (tz, found)
                    })
                    .collect()
            });
            all.iter()
                .find(|(tz, _)| *tz == zone)
                .map(|(_, found)| found.as_slice())
                .unwrap()
        }

        /// Whether the wall clock fires at the whole UTC minute `u`, by stepping
        /// minute by minute: a matching local time fires unless a fixed-hour job
        /// already fired on its first occurrence; a fixed-hour job also fires at the
        /// first instant after a gap that skipped a matching local time.
        fn oracle_fires(tz: Tz, matches: Predicate, wildcard: bool, u: Instant) -> bool {
            let local = u.with_timezone(&tz).naive_local();
            if matches(&local) {
                if wildcard {
                    return true;
                }
                return match tz.from_local_datetime(&local) {
                    LocalResult::Ambiguous(_, later) => later.with_timezone(&Utc) != u,
                    _ => true,
                };
            }
            if wildcard {
                return false;
            }
            let before = (u - TimeDelta::minutes(1)).with_timezone(&tz).naive_local();
            let mut skipped = before + TimeDelta::minutes(1);
            while skipped < local {
                if matches(&skipped) {
                    return true;
                }
                skipped += TimeDelta::minutes(1);
            }
            false
        }

        fn case() -> impl Strategy<Value = (usize, usize, u8, usize, i64)> {
            (
                0..EXPRESSIONS.len(),
                0..ZONES.len(),
                0..3u8,
                any::<usize>(),
                0..SPAN_SECONDS * 1000,
            )
        }

        /// `near` 0: anywhere in the span; 1: within two days of a transition;
        /// 2: within three hours of one (inside or next to the gap or repeated hour).
        fn instant(zone: Tz, near: u8, pick: usize, millis: i64) -> Instant {
            let found = transitions(zone);
            let radius_ms = match near {
                _ if found.is_empty() => 0,
                1 => 2 * 86_400_000,
                2 => 3 * 3_600_000,
                _ => 0,
            };
            if radius_ms == 0 {
                return start() + TimeDelta::milliseconds(millis);
            }
            found[pick % found.len()] - TimeDelta::milliseconds(radius_ms)
                + TimeDelta::milliseconds(millis % (2 * radius_ms))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn next_after_is_the_first_oracle_fire(
                (e, z, near, pick, millis) in case()
            ) {
                let (expression, matches) = EXPRESSIONS[e];
                let s = CronSchedule::parse(expression, ZONES[z]).unwrap();
                let tz = s.timezone();
                let t = instant(tz, near, pick, millis);
                let next = s.next_after(t).unwrap();
                prop_assert!(next > t);
                prop_assert!(next - t <= TimeDelta::days(9), "{expression} {t} -> {next}");
                prop_assert_eq!(next.second(), 0);
                prop_assert_eq!(next.nanosecond(), 0);
                // Every whole minute in (t, next) must not fire; `next` must.
                let mut u = t.with_second(0).unwrap().with_nanosecond(0).unwrap()
                    + TimeDelta::minutes(1);
                while u < next {
                    prop_assert!(
                        !oracle_fires(tz, matches, s.is_wildcard_hour(), u),
                        "{} in {}: next_after({}) = {} skipped {}",
                        expression, ZONES[z], t, next, u
                    );
                    u += TimeDelta::minutes(1);
                }
                prop_assert!(
                    oracle_fires(tz, matches, s.is_wildcard_hour(), next),
                    "{} in {}: next_after({}) = {} does not match",
                    expression, ZONES[z], t, next
                );
            }

            #[test]
            fn last_at_or_before_is_the_previous_fire(
                (e, z, near, pick, millis) in case()
            ) {
                let s = CronSchedule::parse(EXPRESSIONS[e].0, ZONES[z]).unwrap();
                let t = instant(s.timezone(), near, pick, millis);
                let last = s.last_at_or_before(t).unwrap();
                prop_assert!(last <= t);
                prop_assert!(s.next_after(last).unwrap() > t);
                prop_assert_eq!(s.next_after(last - TimeDelta::nanoseconds(1)), Some(last));
            }
        }
    }
}
