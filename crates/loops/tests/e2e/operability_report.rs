//! Issue #11 item 6: `loops health` through the real binary — one line per active
//! loop with a verdict and its reasons, label filters, and exit 1 when any loop fails
//! (the rules themselves are table-tested in `loops_core::health`).

use crate::util::World;
use serde_json::Value;

fn health(w: &World, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json", "health"];
    all.extend_from_slice(args);
    let out = w.run(&all);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad health json ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), doc)
}

fn line<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["loopName"] == name)
        .unwrap_or_else(|| panic!("no line for {name} in {doc}"))
}

fn run_now(w: &World, name: &str) {
    let out = w.run(&["run-now", name]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "run-now {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn health_judges_each_active_loop_and_exits_1_when_one_fails() {
    let w = World::new();
    // Nothing yet: healthy, and says so.
    let (code, doc) = health(&w, &[]);
    assert_eq!((code, &doc["verdict"]), (0, &Value::from("ok")), "{doc}");
    assert_eq!(doc["loops"], serde_json::json!([]));
    assert!(w.ok(&["health"]).contains("no active loops"));

    w.create_cmd("good", &["--every", "1h", "--label", "team-a"], "true");
    w.create_cmd(
        "flaky",
        &["--every", "1h", "--label", "team-a"],
        "echo disk full >&2; exit 3",
    );
    w.create_cmd(
        "broken",
        &["--every", "1h", "--label", "team-b"],
        "echo no route >&2; exit 4",
    );
    w.create_cmd("idle", &["--every", "1h"], "true");
    w.ok(&["pause", "idle"]);
    run_now(&w, "good");
    run_now(&w, "good");
    run_now(&w, "flaky");
    run_now(&w, "good");
    run_now(&w, "flaky");
    for _ in 0..3 {
        run_now(&w, "broken");
    }

    let (code, doc) = health(&w, &[]);
    assert_eq!(code, 1, "a failing loop makes health exit 1: {doc}");
    assert_eq!(doc["verdict"], "fail");
    assert_eq!(
        doc["counts"],
        serde_json::json!({"ok": 1, "warn": 1, "fail": 1})
    );
    let names: Vec<&str> = doc["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["loopName"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"idle"),
        "a paused loop is not judged: {names:?}"
    );

    let good = line(&doc, "good");
    assert_eq!(good["verdict"], "ok", "{good}");
    assert_eq!(good["reasons"], serde_json::json!([]));
    assert_eq!(good["lastStatus"], "succeeded");
    assert_eq!(good["successRate"], 1.0);
    assert_eq!(good["ratedRuns"], 3);
    assert!(good["lastSuccessAt"].is_string(), "{good}");

    // The newest flaky run failed, after a success: warn, with the cause.
    let flaky = line(&doc, "flaky");
    assert_eq!(flaky["verdict"], "warn", "{flaky}");
    assert_eq!(flaky["consecutiveFailures"], 2);
    assert_eq!(flaky["successRate"], 0.0);
    assert_eq!(flaky["lastSuccessAt"], Value::Null);
    let reasons = flaky["reasons"].to_string();
    assert!(reasons.contains("last 2 runs failed"), "{reasons}");

    // Three failed attempts in a row: fail.
    let broken = line(&doc, "broken");
    assert_eq!(broken["verdict"], "fail", "{broken}");
    assert_eq!(broken["consecutiveFailures"], 3);
    assert!(
        broken["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("last 3 runs failed"),
        "{broken}"
    );

    // The table: a line per loop, the reason, and a summary.
    let out = w.run(&["health"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "LOOP",
        "HEALTH",
        "broken",
        "fail",
        "last 3 runs failed",
        "fail: 1 ok, 1 warn, 1 fail",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }

    // Labels: only the loops with all of them; team-a has no failing loop.
    let (code, doc) = health(&w, &["--label", "team-a"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["verdict"], "warn");
    assert_eq!(doc["loops"].as_array().unwrap().len(), 2);
    let (code, doc) = health(&w, &["--label", "team-a", "--label", "team-b"]);
    assert_eq!((code, doc["loops"].as_array().unwrap().len()), (0, 0));
    let (code, err) = w.fail(&["health", "--label", "Team A"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid label \"Team A\""), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Paused by its user, the broken loop is no longer judged.
    w.ok(&["pause", "broken"]);
    let (code, doc) = health(&w, &[]);
    assert_eq!(code, 0, "a paused loop no longer fails health: {doc}");
}
