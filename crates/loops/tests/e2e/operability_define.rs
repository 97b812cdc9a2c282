//! Issue #11's definitions at create: labels, jitter, notification settings — stored,
//! shown, validated like every other flag (one line, exit 2, nothing written).

use crate::util::{instant, wait_for, World};
use serde_json::Value;
use std::time::Duration;

fn loops(w: &World) -> Vec<Value> {
    w.json(&["list"]).as_array().cloned().unwrap_or_default()
}

#[test]
fn labels_are_stored_sorted_once_and_shown() {
    let w = World::new();
    let lp = w.json(&[
        "create", "command", "tagged", "--every", "1h", "--cmd", "true", "--label", "nightly",
        "--label", "ci", "--label", "nightly",
    ]);
    assert_eq!(lp["labels"], serde_json::json!(["ci", "nightly"]));
    let shown = w.ok(&["show", "tagged"]);
    assert!(
        shown.contains("labels") && shown.contains("ci, nightly"),
        "{shown}"
    );
    let listed = w.ok(&["list"]);
    assert!(
        listed.contains("LABELS") && listed.contains("ci,nightly"),
        "{listed}"
    );
    let plain = w.create_cmd("plain", &["--every", "1h"], "true");
    assert_eq!(plain["labels"], serde_json::json!([]));
}

#[test]
fn bad_definitions_are_refused_and_write_nothing() {
    let w = World::new();
    for (args, needle) in [
        (vec!["--label", "Bad Label"], "invalid label \"Bad Label\""),
        (vec!["--label", &"a".repeat(65)], "longer than 64 bytes"),
        (
            vec!["--jitter", "1h"],
            "--jitter 1h must be shorter than its --every",
        ),
        (
            vec!["--notify-url", "ftp://example.com/x"],
            "is not an http:// or https:// URL",
        ),
        (vec!["--notify-url", "https://"], "has no host"),
        (
            vec!["--notify-on", "recovery"],
            "--notify-on needs --notify-cmd or --notify-url",
        ),
        (
            vec!["--notify-cmd", "x", "--notify-on", "sometimes"],
            "invalid --notify-on",
        ),
    ] {
        let mut all = vec!["create", "command", "x", "--every", "1h", "--cmd", "true"];
        all.extend(args.iter().copied());
        let (code, err) = w.fail(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(loops(&w).is_empty(), "nothing written for {args:?}");
    }
}

#[test]
fn notify_settings_are_stored_and_a_webhook_url_is_redacted_in_listings() {
    let w = World::new();
    let lp = w.json(&[
        "create",
        "command",
        "watched",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--notify-url",
        "https://hooks.example.com/services/T0/B0/secret",
        "--notify-cmd",
        "logger loops",
        "--notify-on",
        "always",
    ]);
    assert_eq!(lp["notify"]["on"], "always");
    assert_eq!(lp["notify"]["cmd"], "logger loops");
    let url = lp["notify"]["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://hooks.example.com/[redacted"),
        "{url}"
    );
    assert!(!url.contains("secret"));
    let revealed = w.json(&["show", "watched", "--show-output"]);
    assert_eq!(
        revealed["notify"]["url"],
        "https://hooks.example.com/services/T0/B0/secret"
    );
    let defaulted = w.json(&[
        "create",
        "command",
        "w2",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--notify-cmd",
        "true",
    ]);
    assert_eq!(defaulted["notify"]["on"], "failure");
}

#[test]
fn jittered_slots_start_after_their_stable_delay_and_record_it() {
    let w = World::new();
    let lp = w.json(&[
        "create", "command", "spread", "--every", "1s", "--jitter", "900ms", "--cmd", "true",
    ]);
    assert_eq!(lp["jitterMs"], 900);
    let next = instant(&lp["nextRunAt"]);
    let due = instant(&lp["dueAt"]);
    let delay = (due - next).num_milliseconds();
    assert!((0..900).contains(&delay), "delay {delay}");
    let shown = w.ok(&["show", "spread"]);
    assert!(
        shown.contains("jitter") && shown.contains("up to 900ms"),
        "{shown}"
    );
    let mut d = w.daemon_ready(&[]);
    let runs = wait_for("three runs", Duration::from_secs(30), || {
        let runs = w.runs("spread");
        (runs.iter().filter(|r| r["status"] == "succeeded").count() >= 3).then_some(runs)
    });
    assert_eq!(d.stop(), Some(0));
    for r in runs.iter().filter(|r| r["status"] == "succeeded") {
        let slot = instant(&r["scheduledFor"]);
        let due = instant(&r["dueAt"]);
        let started = instant(&r["startedAt"]);
        let jitter = (due - slot).num_milliseconds();
        assert!((0..900).contains(&jitter), "jitter {jitter}: {r}");
        assert!(started >= due, "started before its jittered instant: {r}");
    }
    // Stable per slot: the same slot always gets the same delay (here, across slots
    // they differ — the point of jitter).
    let jitters: std::collections::BTreeSet<i64> = runs
        .iter()
        .filter(|r| r["status"] == "succeeded")
        .map(|r| (instant(&r["dueAt"]) - instant(&r["scheduledFor"])).num_milliseconds())
        .collect();
    assert!(jitters.len() >= 2, "delays spread: {jitters:?}");
}
