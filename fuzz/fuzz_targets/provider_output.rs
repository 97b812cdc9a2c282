//! Provider output parsers: `parse_output` for every provider in `Provider::ALL`,
//! `bounded_summary`, and `interpret` (which reads stdout and stderr of a finished
//! agent run).
//!
//! Input: the captured stdout, lossily decoded as the capture does; after a NUL byte,
//! the captured stderr (else stderr is the same text); the input's length picks the
//! finished run's status for `interpret`. Checks: nothing panics; a summary is at most
//! `SUMMARY_MAX_BYTES` plus its `[truncated N bytes]` marker and is a prefix of the
//! trimmed text; `interpret` fails an exit-0 run exactly when the report has an error,
//! and keeps the report's usage.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loops_core::{AgentTarget, Instant, Provider, RunOutcome, RunStatus};
use loops_runtime::providers::{bounded_summary, interpret, parse_output, SUMMARY_MAX_BYTES};

fuzz_target!(|data: &[u8]| {
    let (out, err) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, data),
    };
    let stdout = String::from_utf8_lossy(out);
    let stderr = String::from_utf8_lossy(err);
    check_summary(&stdout);
    // One finished-run shape per input (each `interpret` parses the output again).
    let (status, exit_code) = [
        (RunStatus::Succeeded, Some(0)),
        (RunStatus::Failed, Some(1)),
        (RunStatus::Failed, None),
        (RunStatus::TimedOut, None),
    ][data.len() % 4];
    for &provider in Provider::ALL {
        let report = parse_output(provider, &stdout);
        if let Some(text) = &report.text {
            check_summary(text);
        }
        let target: AgentTarget =
            serde_json::from_value(serde_json::json!({ "provider": provider.as_str() })).unwrap();
        let mut outcome = RunOutcome::new(status, Instant::UNIX_EPOCH);
        outcome.exit_code = exit_code;
        outcome.stdout = stdout.clone().into_owned();
        outcome.stderr = stderr.clone().into_owned();
        interpret(&target, &mut outcome);
        if let Some(summary) = &outcome.summary {
            assert!(within_bound(summary), "summary of {} bytes", summary.len());
        }
        if status == RunStatus::Succeeded {
            // Exit 0 fails exactly when the provider reported an error.
            assert_eq!(outcome.status == RunStatus::Failed, report.error.is_some());
            // The report's words are output: quoted apart from our own message.
            assert_eq!(outcome.error_output.is_some(), report.error.is_some());
            assert_eq!(outcome.error.is_some(), report.error.is_some());
        } else {
            assert_eq!(outcome.status, status);
        }
        assert_eq!(outcome.usage, report.usage);
    }
});

/// `bounded_summary(text)` is `text` trimmed, or its first at most
/// `SUMMARY_MAX_BYTES` bytes followed by the marker.
fn check_summary(text: &str) {
    let summary = bounded_summary(text);
    let trimmed = text.trim();
    if trimmed.len() <= SUMMARY_MAX_BYTES {
        assert_eq!(summary, trimmed);
        return;
    }
    assert!(within_bound(&summary), "summary of {} bytes", summary.len());
    let (kept, marker) = summary.rsplit_once("\n[truncated ").unwrap();
    assert!(trimmed.starts_with(kept));
    assert_eq!(marker, format!("{} bytes]", trimmed.len() - kept.len()));
}

fn within_bound(summary: &str) -> bool {
    // The marker: "\n[truncated N bytes]" with N below 2^64.
    summary.len() <= SUMMARY_MAX_BYTES + "\n[truncated  bytes]".len() + 20
}
