//! Agent operations (issue #20) through the real binary, with fake provider CLIs that
//! print what the real ones print (`crates/loops-runtime/tests/fixtures`): failure
//! classes, usage-limit holds, back-off, the circuit breaker, idle timeouts, stop
//! conditions, sessions, provider options, caps and budgets.

use crate::agents::{create_agent, fixture, run_now, Fakes};
use crate::util::World;

/// Item 1: a failed agent run carries its class (and its provider's reset instant) in
/// `runs --json`, the `runs` table and `show`; `health` names the class and fails a
/// loop at once on a failure another attempt cannot fix (auth).
#[test]
fn failed_agent_runs_carry_their_failure_class() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_usage_limit.json"), 1);
    create_agent(&w, "limited", "claude", &["--prompt", "hi"]);
    let (code, run) = run_now(&w, "limited");
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["failureClass"], "usage_limit", "{run}");
    let retry_at = crate::util::instant(&run["retryAt"]);
    assert!(retry_at > chrono::Utc::now(), "{run}");

    fakes.canned("codex", &fixture("codex_auth.jsonl"), 1);
    create_agent(&w, "badkey", "codex", &["--prompt", "hi"]);
    let (_, run) = run_now(&w, "badkey");
    assert_eq!(run["failureClass"], "auth", "{run}");
    assert!(run.get("retryAt").is_none(), "{run}");

    fakes.canned("claude", &fixture("claude_success.json"), 0);
    create_agent(&w, "fine", "claude", &["--prompt", "hi"]);
    let (_, run) = run_now(&w, "fine");
    assert!(run.get("failureClass").is_none(), "{run}");

    // A command's failure has a class too: how its process ended.
    w.create_cmd("cmd", &["--every", "1h"], "exit 3");
    let (_, run) = run_now(&w, "cmd");
    assert_eq!(run["failureClass"], "other", "{run}");

    let table = w.ok(&["runs"]);
    assert!(table.contains("CLASS"), "{table}");
    assert!(table.contains("usage_limit (retry in"), "{table}");
    assert!(table.contains("auth"), "{table}");
    let shown = w.ok(&["show", "badkey"]);
    assert!(shown.contains("failed (auth)"), "{shown}");

    // `health` exits 1 when a loop fails, with its JSON on stdout.
    let out = w.run(&["--json", "health"]);
    assert_eq!(out.status.code(), Some(1));
    let health: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let of = |name: &str| {
        health["loops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["loopName"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {health:#}"))
    };
    let bad = of("badkey");
    assert_eq!(bad["verdict"], "fail", "{bad:#}");
    assert_eq!(bad["lastFailureClass"], "auth", "{bad:#}");
    let reasons = bad["reasons"].to_string();
    assert!(reasons.contains("last run failed (auth)"), "{reasons}");
    let limited = of("limited");
    assert_eq!(limited["lastFailureClass"], "usage_limit", "{limited:#}");
}
