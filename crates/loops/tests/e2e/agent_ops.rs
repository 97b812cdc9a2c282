//! Agent operations (issue #20) through the real binary, with fake provider CLIs that
//! print what the real ones print (`crates/loops-runtime/tests/fixtures`): failure
//! classes, usage-limit holds, back-off, the circuit breaker, idle timeouts, stop
//! conditions, sessions, provider options, caps and budgets.

use crate::agents::{create_agent, fixture, run_now, Fakes};
use crate::util::{wait_for, World};
use std::time::Duration;

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

/// The loop as `show --json` prints it.
fn shown(w: &World, name: &str) -> serde_json::Value {
    w.json(&["show", name])
}

/// Item 3: a failed attempt retries its slot after the back-off — fixed (4× for a
/// rate limit) or exponential (full jitter under the doubled delay) — and an `auth`
/// failure is not retried at all.
#[test]
fn retries_back_off_by_kind_and_class() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &fixture("claude_rate_limit.json"), 1);
    fakes.canned("codex", &fixture("codex_auth.jsonl"), 1);
    let retry = |name: &str| -> i64 {
        w.make_due(name);
        w.ok(&["tick"]);
        let lp = shown(&w, name);
        let run = &w.runs(name)[0];
        assert_eq!(lp["retryScheduledFor"], run["scheduledFor"], "{lp:#}");
        (crate::util::instant(&lp["nextRunAt"]) - crate::util::instant(&run["finishedAt"]))
            .num_milliseconds()
    };
    create_agent(
        &w,
        "fixed",
        "claude",
        &["--prompt", "hi", "--attempts", "3", "--retry-delay", "10s"],
    );
    assert_eq!(
        retry("fixed"),
        40_000,
        "a rate limit waits 4× the retry delay"
    );
    create_agent(
        &w,
        "expo",
        "claude",
        &[
            "--prompt",
            "hi",
            "--attempts",
            "3",
            "--retry-delay",
            "10s",
            "--retry-backoff",
            "exponential",
            "--retry-delay-max",
            "30s",
        ],
    );
    let lp = shown(&w, "expo");
    assert_eq!(lp["retryBackoff"], "exponential");
    assert_eq!(lp["retryDelayMaxMs"], 30_000);
    let delay = retry("expo");
    assert!(
        (1_000..=30_000).contains(&delay),
        "jittered, capped at 30s: {delay}"
    );

    create_agent(
        &w,
        "badkey",
        "codex",
        &["--prompt", "hi", "--attempts", "3"],
    );
    w.make_due("badkey");
    w.ok(&["tick"]);
    let lp = shown(&w, "badkey");
    assert!(
        lp["retryScheduledFor"].is_null(),
        "auth is not retried: {lp:#}"
    );
    assert_eq!(w.runs("badkey").len(), 1);

    let (code, err) = w.fail(&[
        "create",
        "command",
        "x",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--retry-delay",
        "1m",
        "--retry-delay-max",
        "30s",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--retry-delay-max 30s is shorter than --retry-delay 1m"),
        "{err}"
    );
    let (code, err) = w.fail(&[
        "create",
        "command",
        "x",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--retry-backoff",
        "linear",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid --retry-backoff \"linear\": expected one of fixed, exponential"),
        "{err}"
    );
}

/// Item 4: after `--max-failures` consecutive failed slots the loop is parked — paused
/// with the reason, in `show`, `health` and one `parked` notification — and `resume`
/// starts a fresh streak.
#[test]
fn the_circuit_breaker_parks_a_failing_loop_once() {
    let w = World::new();
    let hits = w.root.path().join("events");
    let hook = format!(
        "cat >/dev/null; echo \"$LOOPS_EVENT\" >> {}",
        hits.display()
    );
    w.json(&[
        "create",
        "command",
        "broken",
        "--every",
        "1h",
        "--cmd",
        "exit 1",
        "--max-failures",
        "2",
        "--notify-cmd",
        &hook,
    ]);
    w.make_due("broken");
    w.ok(&["tick"]);
    let lp = shown(&w, "broken");
    assert_eq!(lp["status"], "active");
    assert_eq!(lp["failureStreak"], 1);
    w.make_due("broken");
    w.ok(&["tick"]);
    let lp = shown(&w, "broken");
    assert_eq!(lp["status"], "paused", "{lp:#}");
    assert_eq!(lp["failureStreak"], 2);
    let reason = lp["statusReason"].as_str().unwrap();
    assert!(
        reason.starts_with("circuit breaker: 2 consecutive failed slots"),
        "{reason}"
    );
    let text = w.ok(&["show", "broken"]);
    assert!(text.contains("paused by"), "{text}");
    // One failure notification per failed slot, and one `parked`.
    // (Deliveries run concurrently: their order is not fixed.)
    let events = std::fs::read_to_string(&hits).unwrap();
    let mut lines: Vec<&str> = events.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["failure", "failure", "parked"], "{events}");
    let out = w.run(&["--json", "health"]);
    let health: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = &health["loops"][0];
    assert_eq!(line["parked"], true, "{health:#}");
    assert!(
        line["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("parked: circuit breaker"),
        "{health:#}"
    );

    w.ok(&["resume", "broken"]);
    let lp = shown(&w, "broken");
    assert_eq!(lp["status"], "active");
    assert_eq!(lp["failureStreak"], 0, "{lp:#}");
    assert!(lp["statusReason"].is_null(), "{lp:#}");
}

/// Item 5: `--idle-timeout` ends an agent (or command) that went quiet: `timed_out`,
/// "no output for …", class `timeout`; it is shown and editable, and refused on a
/// workflow loop.
#[test]
fn an_agent_that_goes_quiet_is_ended_by_its_idle_timeout() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    // The fake prints one line, then hangs without a word.
    let quiet = w.root.path().join("quiet-claude");
    crate::util::write_script(
        &quiet,
        "#!/bin/sh\ncat >/dev/null\necho thinking\nexec sleep 60\n",
    );
    std::fs::copy(&quiet, fakes.bin.join("claude")).unwrap();
    create_agent(
        &w,
        "hung",
        "claude",
        &[
            "--prompt",
            "hi",
            "--idle-timeout",
            "500ms",
            "--timeout",
            "30s",
        ],
    );
    let started = std::time::Instant::now();
    let (code, run) = run_now(&w, "hung");
    assert_eq!(code, 1, "{run}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(run["status"], "timed_out", "{run}");
    assert_eq!(run["error"], "no output for 500ms", "{run}");
    assert_eq!(run["failureClass"], "timeout", "{run}");
    let lp = shown(&w, "hung");
    assert_eq!(lp["target"]["idleTimeoutMs"], 500, "{lp:#}");
    assert!(w.ok(&["show", "hung"]).contains("idle timeout  500ms"));
    w.ok(&["edit", "hung", "--clear", "idle-timeout"]);
    assert!(shown(&w, "hung")["target"].get("idleTimeoutMs").is_none());

    // Commands too.
    w.json(&[
        "create",
        "command",
        "silent",
        "--every",
        "1h",
        "--cmd",
        "sleep 30",
        "--idle-timeout",
        "300ms",
    ]);
    let (_, run) = run_now(&w, "silent");
    assert_eq!(run["error"], "no output for 300ms", "{run}");

    let spec = w.root.path().join("wf.json");
    std::fs::write(
        &spec,
        r#"{"name": "wf", "steps": [{"id": "a", "target": {"type": "command", "command": "true"}}]}"#,
    )
    .unwrap();
    w.ok(&["workflows", "create", spec.to_str().unwrap()]);
    let (code, err) = w.fail(&[
        "create",
        "workflow",
        "flow",
        "--every",
        "1h",
        "--workflow",
        "wf",
        "--idle-timeout",
        "1m",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--idle-timeout is for command and agent loops"),
        "{err}"
    );
}

/// Item 2: a usage limit holds every agent loop of its provider and account. Two
/// claude loops on account `work` meet the limit (the exact result the real claude
/// prints, reset at 9am Chicago; `LOOPS_TEST_HOLD_CAP_MS` shortens the hold to
/// seconds), a loop on `home` is not held; `list`, `show`, `holds` and `health` show
/// the hold; once it ends both resume by themselves under the daemon — the
/// one-attempt loop too, its held attempt not counted — with one `held` and one
/// `resumed` notification for the account (the loops share their hook) and no failure
/// notification.
#[test]
fn a_usage_limit_holds_the_accounts_loops_until_it_resets() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let root = w.root.path().to_owned();
    for profile in ["work", "home"] {
        std::fs::create_dir_all(root.join("profiles").join(profile)).unwrap();
    }
    // `accounts env PROFILE --tool claude`: the profile's config dir.
    crate::util::write_script(
        &fakes.bin.join("accounts"),
        &format!(
            "#!/bin/sh\necho \"export CLAUDE_CONFIG_DIR={}/profiles/$2\"\n",
            root.display()
        ),
    );
    // claude on `work` meets the limit while the file `limited` exists.
    let limited = root.join("limited");
    std::fs::write(&limited, "").unwrap();
    let (limit_out, ok_out) = (root.join("limit.json"), root.join("ok.json"));
    std::fs::write(&limit_out, fixture("claude_usage_limit.json")).unwrap();
    std::fs::write(&ok_out, fixture("claude_success.json")).unwrap();
    crate::util::write_script(
        &fakes.bin.join("claude"),
        &format!(
            "#!/bin/sh\ncat >/dev/null\n\
             if [ \"$LOOPS_ACCOUNT_PROFILE\" = work ] && [ -f {limited} ]; then cat {limit}; exit 1; fi\n\
             cat {ok}\n",
            limited = limited.display(),
            limit = limit_out.display(),
            ok = ok_out.display()
        ),
    );
    let events = root.join("events");
    let hook = format!(
        "cat >/dev/null; echo \"$LOOPS_EVENT\" >> {}",
        events.display()
    );
    for (name, account, attempts) in [("a", "work", "1"), ("b", "work", "2"), ("c", "home", "1")] {
        create_agent(
            &w,
            name,
            "claude",
            &[
                "--prompt",
                "hi",
                "--account",
                account,
                "--attempts",
                attempts,
                "--notify-cmd",
                &hook,
            ],
        );
        w.make_due(name);
    }
    w.extra_env
        .push(("LOOPS_TEST_HOLD_CAP_MS".into(), "10000".into()));
    let mut d = w.daemon_ready(&[]);

    // Held: both work loops, in every view; home ran.
    let listed = wait_for("the work account held", Duration::from_secs(30), || {
        let loops = w.json(&["list"]);
        let held = loops
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["heldUntil"].is_string())
            .count();
        (held == 2).then_some(loops)
    });
    let of = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap()
    };
    assert!(of("c")["heldUntil"].is_null(), "{listed:#}");
    assert!(
        of("a")["heldReason"]
            .as_str()
            .unwrap()
            .starts_with("usage limit reached, resets at "),
        "{listed:#}"
    );
    let holds = w.json(&["holds"]);
    assert_eq!(holds.as_array().unwrap().len(), 1, "{holds:#}");
    assert_eq!(holds[0]["provider"], "claude");
    assert_eq!(holds[0]["account"], "work");
    assert!(w.ok(&["list"]).contains("held "));
    assert!(w.ok(&["show", "a"]).contains("held until"));
    assert!(w.ok(&["holds"]).contains("work"));
    let health: serde_json::Value =
        serde_json::from_slice(&w.run(&["--json", "health"]).stdout).unwrap();
    let line = health["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["loopName"] == "a")
        .cloned()
        .unwrap();
    assert_eq!(line["verdict"], "warn", "{health:#}");
    assert!(
        line["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("held until"),
        "{health:#}"
    );
    let first = w.runs("a");
    assert_eq!(first[0]["failureClass"], "usage_limit", "{first:?}");
    assert_eq!(shown(&w, "a")["failureStreak"], 0);
    wait_for("c on home ran", Duration::from_secs(30), || {
        w.runs("c").into_iter().find(|r| r["status"] == "succeeded")
    });

    // The limit is lifted; the hold ends by itself and both loops run their slot.
    std::fs::remove_file(&limited).unwrap();
    for name in ["a", "b"] {
        wait_for(&format!("{name} resumed"), Duration::from_secs(30), || {
            w.runs(name)
                .into_iter()
                .find(|r| r["status"] == "succeeded")
        });
    }
    let runs = w.runs("a");
    let ok = runs.iter().find(|r| r["status"] == "succeeded").unwrap();
    assert_eq!(ok["attempt"], 2, "the held attempt did not count: {runs:?}");
    assert_eq!(
        ok["scheduledFor"], first[0]["scheduledFor"],
        "the same slot"
    );
    assert!(w.json(&["holds"]).as_array().unwrap().is_empty());
    let text = wait_for("the resumed notification", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&events).unwrap_or_default();
        text.contains("resumed").then_some(text)
    });
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
    let text = std::fs::read_to_string(&events).unwrap_or(text);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        ["held", "resumed"],
        "one of each, no failure: {text}"
    );
}
