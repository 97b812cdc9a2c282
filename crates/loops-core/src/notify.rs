//! Notifications (README, "Notifications"): which settings apply to a loop, whether a
//! finished run calls for a notification, and the bounded output tails a hook gets.
//!
//! The store decides in the transaction that finalizes the run (it has the loop as
//! stored, the store-wide default and the loop's previous slot at hand); the runtime
//! delivers. Nothing here performs I/O.

use crate::{Notify, NotifyChannel, NotifyEvent, NotifyOn, Run, RunSource, RunStatus};

/// The settings that apply to a loop: its own when it has them, else the store-wide
/// default. A loop's own settings replace the default as a whole (no merging of
/// channels or of `on`), so what `show` prints for a loop is all that fires for it.
pub fn effective<'a>(own: Option<&'a Notify>, default: Option<&'a Notify>) -> Option<&'a Notify> {
    own.or(default)
}

/// Whether `run` is the last attempt of its slot: it succeeded (or was skipped), used
/// the loop's `max_attempts`, failed in a way that is not retried, or is ad hoc (one
/// attempt).
pub fn ends_slot(run: &Run, max_attempts: u32) -> bool {
    run.source == RunSource::AdHoc
        || matches!(run.status, RunStatus::Succeeded | RunStatus::Skipped)
        || run.attempt >= max_attempts
        // A failure another attempt cannot help is not retried (`auth`, …).
        || run.failure_class.is_some_and(|c| !c.is_retried())
}

/// Whether `on` asks for failure notifications.
pub fn fires_on_failure(on: NotifyOn) -> bool {
    matches!(on, NotifyOn::Failure | NotifyOn::Changes | NotifyOn::Always)
}

/// Whether `on` asks for recovery notifications.
pub fn fires_on_recovery(on: NotifyOn) -> bool {
    matches!(
        on,
        NotifyOn::Recovery | NotifyOn::Changes | NotifyOn::Always
    )
}

/// Whether `on` asks for a notification of every success.
pub fn fires_on_success(on: NotifyOn) -> bool {
    on == NotifyOn::Always
}

/// The notification a finished `run` calls for under `on`, if any:
///
/// - [`NotifyEvent::Failure`] when the run failed, timed out or was abandoned on the
///   last attempt of its slot ([`ends_slot`]) — once per slot, never per retry;
/// - [`NotifyEvent::Recovery`] when the run succeeded and the loop's previous finished
///   slot (the newest other slot whose last attempt is known: a success, or a failure
///   on its last attempt) failed. `previous_slot_failed` looks that up; it is only
///   called for a success under `recovery` / `changes` / `always`, so the common case
///   costs nothing;
/// - [`NotifyEvent::Success`] for any other success under `always`.
///
/// Skipped runs never notify.
pub fn decide<E>(
    on: NotifyOn,
    run: &Run,
    max_attempts: u32,
    previous_slot_failed: impl FnOnce() -> Result<bool, E>,
) -> Result<Option<NotifyEvent>, E> {
    if run.status.is_failure() {
        let due = fires_on_failure(on) && ends_slot(run, max_attempts);
        return Ok(due.then_some(NotifyEvent::Failure));
    }
    if run.status != RunStatus::Succeeded {
        return Ok(None);
    }
    if fires_on_recovery(on) && previous_slot_failed()? {
        return Ok(Some(NotifyEvent::Recovery));
    }
    Ok(fires_on_success(on).then_some(NotifyEvent::Success))
}

/// The channels of `n` with their targets, command first.
pub fn channels(n: &Notify) -> Vec<(NotifyChannel, &str)> {
    let mut out = Vec::with_capacity(2);
    if let Some(cmd) = n.cmd.as_deref() {
        out.push((NotifyChannel::Cmd, cmd));
    }
    if let Some(url) = n.url.as_deref() {
        out.push((NotifyChannel::Url, url));
    }
    out
}

/// Bytes of stdout and of stderr a notification carries (each stream's tail).
pub const PAYLOAD_OUTPUT_BYTES: usize = 4 * 1024;

/// Version of the notification payload's JSON shape (`version` in the document).
pub const PAYLOAD_VERSION: u32 = 1;

/// Splits captured output into the count of bytes dropped before it (its
/// `[truncated N bytes]` marker, 0 without one) and the kept tail.
pub fn split_marker(text: &str) -> (u64, &str) {
    let parsed = text
        .strip_prefix("[truncated ")
        .and_then(|rest| rest.split_once(" bytes]\n"))
        .and_then(|(n, tail)| n.parse::<u64>().ok().map(|n| (n, tail)));
    parsed.unwrap_or((0, text))
}

/// The last `max` bytes of captured output (cut at a character boundary), with a
/// `[truncated N bytes]` marker counting everything dropped — including what the
/// capture had dropped already.
pub fn tail(text: &str, max: usize) -> String {
    let (dropped, body) = split_marker(text);
    if body.len() <= max {
        return text.to_owned();
    }
    let mut start = body.len() - max;
    while !body.is_char_boundary(start) {
        start += 1;
    }
    format!(
        "[truncated {} bytes]\n{}",
        dropped + start as u64,
        &body[start..]
    )
}

/// The first non-empty line of captured output (after its truncation marker), cut to
/// `max` characters: the hint a failed run's line shows (`exited with status 3: boom`).
pub fn first_line(text: &str, max: usize) -> Option<String> {
    let (_, body) = split_marker(text);
    let line = body.lines().map(str::trim).find(|l| !l.is_empty())?;
    if line.chars().count() <= max {
        return Some(line.to_owned());
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    Some(cut)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{LoopId, RunId};

    fn run(status: RunStatus, attempt: u32, source: RunSource) -> Run {
        let t = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        Run {
            id: RunId::new("aaaaaaaaaaaa"),
            loop_id: LoopId::new("bbbbbbbbbbbb"),
            loop_name: "l".into(),
            source,
            started_at: Some(t),
            finished_at: Some(t),
            ..Run::history(t, attempt, status, t)
        }
    }

    fn decided(on: NotifyOn, r: &Run, max: u32, previous_failed: bool) -> Option<NotifyEvent> {
        decide::<()>(on, r, max, || Ok(previous_failed)).unwrap()
    }

    #[test]
    fn failure_fires_once_per_slot_after_the_last_attempt() {
        use RunStatus::*;
        for status in [Failed, TimedOut, Abandoned] {
            let first = run(status, 1, RunSource::Scheduled);
            assert_eq!(decided(NotifyOn::Failure, &first, 3, false), None);
            let last = run(status, 3, RunSource::RetrySlot);
            assert_eq!(
                decided(NotifyOn::Failure, &last, 3, false),
                Some(NotifyEvent::Failure)
            );
            for on in [NotifyOn::Changes, NotifyOn::Always] {
                assert_eq!(decided(on, &last, 3, false), Some(NotifyEvent::Failure));
                assert_eq!(decided(on, &first, 3, false), None, "never per retry");
            }
            assert_eq!(decided(NotifyOn::Recovery, &last, 3, true), None);
            // An ad-hoc run has one attempt.
            let ad_hoc = run(status, 1, RunSource::AdHoc);
            assert_eq!(
                decided(NotifyOn::Failure, &ad_hoc, 3, false),
                Some(NotifyEvent::Failure)
            );
        }
        assert_eq!(
            decided(
                NotifyOn::Always,
                &run(Skipped, 1, RunSource::Scheduled),
                1,
                true
            ),
            None
        );
    }

    #[test]
    fn recovery_fires_on_a_success_after_a_failed_slot_and_looks_up_only_then() {
        let ok = run(RunStatus::Succeeded, 1, RunSource::Scheduled);
        assert_eq!(
            decided(NotifyOn::Recovery, &ok, 1, true),
            Some(NotifyEvent::Recovery)
        );
        for on in [NotifyOn::Changes, NotifyOn::Always] {
            assert_eq!(decided(on, &ok, 1, true), Some(NotifyEvent::Recovery));
        }
        assert_eq!(decided(NotifyOn::Recovery, &ok, 1, false), None);
        assert_eq!(decided(NotifyOn::Changes, &ok, 1, false), None);
        // Under `failure`, a success never looks at the previous slot.
        let looked = decide(NotifyOn::Failure, &ok, 1, || Err("looked up"));
        assert_eq!(looked, Ok(None));
        let failed = run(RunStatus::Failed, 1, RunSource::Scheduled);
        let looked = decide(NotifyOn::Always, &failed, 1, || Err("looked up"));
        assert_eq!(looked, Ok(Some(NotifyEvent::Failure)));
    }

    /// `always` is every finished slot, as CI systems mean it: each success too.
    #[test]
    fn always_means_every_finished_slot() {
        let ok = run(RunStatus::Succeeded, 1, RunSource::Scheduled);
        assert_eq!(
            decided(NotifyOn::Always, &ok, 1, false),
            Some(NotifyEvent::Success)
        );
        for on in [NotifyOn::Failure, NotifyOn::Recovery, NotifyOn::Changes] {
            assert_eq!(decided(on, &ok, 1, false), None, "{on}");
        }
        let retried = run(RunStatus::Succeeded, 2, RunSource::RetrySlot);
        assert_eq!(
            decided(NotifyOn::Always, &retried, 3, false),
            Some(NotifyEvent::Success)
        );
        let names: Vec<&str> = NotifyOn::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names, ["failure", "recovery", "changes", "always"]);
    }

    #[test]
    fn a_loops_own_settings_replace_the_default() {
        let n = |cmd: &str, on| Notify {
            cmd: Some(cmd.into()),
            url: None,
            on,
        };
        let own = n("own", NotifyOn::Recovery);
        let default = n("default", NotifyOn::Failure);
        assert_eq!(effective(Some(&own), Some(&default)), Some(&own));
        assert_eq!(effective(None, Some(&default)), Some(&default));
        assert_eq!(effective(None, None), None);
        let both = Notify {
            cmd: Some("c".into()),
            url: Some("http://h/".into()),
            on: NotifyOn::Always,
        };
        assert_eq!(
            channels(&both),
            vec![(NotifyChannel::Cmd, "c"), (NotifyChannel::Url, "http://h/")]
        );
    }

    #[test]
    fn tails_keep_the_end_and_count_every_dropped_byte() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("0123456789", 4), "[truncated 6 bytes]\n6789");
        assert_eq!(
            tail("[truncated 100 bytes]\n0123456789", 4),
            "[truncated 106 bytes]\n6789"
        );
        // Never inside a character.
        assert_eq!(tail("aé", 1), "[truncated 3 bytes]\n");
        assert_eq!(split_marker("[truncated 7 bytes]\nrest"), (7, "rest"));
        assert_eq!(split_marker("[truncated x bytes]\nrest").0, 0);
        assert_eq!(split_marker("plain"), (0, "plain"));
    }

    #[test]
    fn first_line_skips_the_marker_and_blank_lines() {
        assert_eq!(
            first_line("[truncated 5 bytes]\n\n  boom: bad\nmore", 80).as_deref(),
            Some("boom: bad")
        );
        assert_eq!(first_line("", 80), None);
        assert_eq!(first_line("abcdef", 4).as_deref(), Some("abc…"));
    }
}
