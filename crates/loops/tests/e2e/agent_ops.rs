//! Agent operations (issue #20) through the real binary, with fake provider CLIs that
//! print what the real ones print (`crates/loops-runtime/tests/fixtures`): failure
//! classes, usage-limit holds, back-off, the circuit breaker, idle timeouts, stop
//! conditions, sessions, provider options, caps and budgets.

use crate::agents::{create_agent, fixture, real_cli, real_world, run_now, Fakes, RealCli};
use crate::mock_model::{MockModel, Mode};
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
    for (name, account, attempts) in [
        ("work-a", "work", "1"),
        ("work-b", "work", "2"),
        ("home-c", "home", "1"),
    ] {
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
    assert!(of("home-c")["heldUntil"].is_null(), "{listed:#}");
    assert!(
        of("work-a")["heldReason"]
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
    assert!(w.ok(&["show", "work-a"]).contains("held until"));
    assert!(w.ok(&["holds"]).contains("work"));
    let health: serde_json::Value =
        serde_json::from_slice(&w.run(&["--json", "health"]).stdout).unwrap();
    let line = health["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["loopName"] == "work-a")
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
    let first = w.runs("work-a");
    assert_eq!(first[0]["failureClass"], "usage_limit", "{first:?}");
    assert_eq!(shown(&w, "work-a")["failureStreak"], 0);
    wait_for("c on home ran", Duration::from_secs(30), || {
        w.runs("home-c")
            .into_iter()
            .find(|r| r["status"] == "succeeded")
    });

    // The limit is lifted; the hold ends by itself and both loops run their slot.
    std::fs::remove_file(&limited).unwrap();
    for name in ["work-a", "work-b"] {
        wait_for(&format!("{name} resumed"), Duration::from_secs(30), || {
            w.runs(name)
                .into_iter()
                .find(|r| r["status"] == "succeeded")
        });
    }
    let runs = w.runs("work-a");
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

/// The claude fixture's success, its final text (the run's summary) replaced.
fn claude_saying(summary: &str) -> String {
    fixture("claude_success.json").replace(
        "\"result\":\"Hello from the mock model.\"",
        &format!("\"result\":{}", serde_json::Value::from(summary)),
    )
}

/// A notification hook appending `$LOOPS_EVENT` to `file`.
fn event_hook(file: &std::path::Path) -> String {
    format!(
        "cat >/dev/null; echo \"$LOOPS_EVENT\" >> {}",
        file.display()
    )
}

/// `make_due` then `tick`: one more slot of `name` (if it is still scheduled).
fn tick_once(w: &World, name: &str) {
    w.make_due(name);
    w.ok(&["tick"]);
}

/// Item 8: a command loop every second whose `--until-cmd 'test -e marker'` becomes
/// true on its third run (the run creates the marker) is done after exactly three
/// runs, with the reason and one `done` notification, and never runs again: a witness
/// loop of the same daemon runs two more slots meanwhile.
#[test]
fn until_cmd_ends_a_loop_after_the_run_that_made_it_true() {
    let w = World::new();
    let work = w.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let hits = w.root.path().join("events");
    let hook = event_hook(&hits);
    let script = "n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count; \
                  if [ $n -ge 3 ]; then touch marker; fi";
    w.json(&[
        "create",
        "command",
        "tests",
        "--every",
        "1s",
        "--cmd",
        script,
        "--cwd",
        work.to_str().unwrap(),
        "--until-cmd",
        "test -e marker",
        "--notify-cmd",
        &hook,
    ]);
    w.create_cmd("witness", &["--every", "1s"], "true");
    let mut d = w.daemon_ready(&[]);
    let lp = wait_for("tests to be done", Duration::from_secs(60), || {
        let lp = shown(&w, "tests");
        (lp["status"] == "done").then_some(lp)
    });
    let runs = w.runs("tests");
    assert_eq!(runs.len(), 3, "{runs:#?}");
    assert!(runs.iter().all(|r| r["status"] == "succeeded"), "{runs:#?}");
    let newest = runs[0]["id"].as_str().unwrap();
    assert_eq!(
        lp["statusReason"],
        format!("--until-cmd exited 0 after run 3 ({newest})"),
        "{lp:#}"
    );
    assert_eq!(lp["runCount"], 3, "{lp:#}");
    wait_for("the done notification", Duration::from_secs(30), || {
        std::fs::read_to_string(&hits)
            .ok()
            .filter(|t| t.contains("done"))
    });
    // Two more slots of the witness: the done loop is not scheduled meanwhile.
    let seen = w.runs("witness").len();
    wait_for("two more witness runs", Duration::from_secs(30), || {
        (w.runs("witness").len() >= seen + 2).then_some(())
    });
    assert_eq!(w.runs("tests").len(), 3);
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    assert_eq!(std::fs::read_to_string(&hits).unwrap(), "done\n");
    let text = w.ok(&["show", "tests"]);
    assert!(text.contains("done because"), "{text}");
    assert!(text.contains("until cmd"), "{text}");
    let listed = w.ok(&["list"]);
    assert!(listed.contains("done"), "{listed}");
    assert_eq!(w.json(&["list", "--status", "done"])[0]["name"], "tests");

    // `resume` starts it again with a fresh count.
    w.ok(&["resume", "tests"]);
    let lp = shown(&w, "tests");
    assert_eq!(lp["status"], "active", "{lp:#}");
    assert!(lp.get("runCount").is_none(), "{lp:#}");
    assert!(lp["statusReason"].is_null(), "{lp:#}");
}

/// Item 8: `--until-output` ends an agent loop whose summary matches (on its second
/// run here), and a command loop whose stdout does; the reason names the pattern and
/// the run, never the text; `--max-runs` ends a loop after N ended slots, failed ones
/// too; `edit` sets and `edit --clear` removes each; a bad regex is refused at create
/// with one line and nothing written.
#[test]
fn until_output_and_max_runs_end_loops() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &claude_saying("2 tests failed"), 0);
    create_agent(
        &w,
        "fixer",
        "claude",
        &[
            "--prompt",
            "fix the tests",
            "--until-output",
            "ALL TESTS PASS",
        ],
    );
    tick_once(&w, "fixer");
    assert_eq!(shown(&w, "fixer")["status"], "active");
    fakes.canned("claude", &claude_saying("Done: ALL TESTS PASS"), 0);
    tick_once(&w, "fixer");
    let lp = shown(&w, "fixer");
    assert_eq!(lp["status"], "done", "{lp:#}");
    let runs = w.runs("fixer");
    assert_eq!(runs.len(), 2);
    let reason = lp["statusReason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!(
            "summary matched /ALL TESTS PASS/ in run 2 ({})",
            runs[0]["id"].as_str().unwrap()
        )
    );
    assert!(!reason.contains("Done:"), "{reason}");
    tick_once(&w, "fixer");
    assert_eq!(w.runs("fixer").len(), 2, "a done loop is not scheduled");

    w.json(&[
        "create",
        "command",
        "printer",
        "--every",
        "1h",
        "--cmd",
        "echo PASS",
        "--until-output",
        "^PASS$",
    ]);
    tick_once(&w, "printer");
    assert_eq!(
        shown(&w, "printer")["status"],
        "active",
        "no multi-line mode"
    );
    w.ok(&["edit", "printer", "--until-output", "(?m)^PASS$"]);
    tick_once(&w, "printer");
    assert_eq!(shown(&w, "printer")["status"], "done");

    w.json(&[
        "create",
        "command",
        "bounded",
        "--every",
        "1h",
        "--cmd",
        "exit 1",
        "--max-runs",
        "2",
    ]);
    tick_once(&w, "bounded");
    let lp = shown(&w, "bounded");
    assert_eq!(
        (&lp["status"], &lp["runCount"]),
        (&"active".into(), &1.into())
    );
    tick_once(&w, "bounded");
    let lp = shown(&w, "bounded");
    assert_eq!(lp["status"], "done", "{lp:#}");
    assert!(
        lp["statusReason"]
            .as_str()
            .unwrap()
            .starts_with("--max-runs 2 reached (run 2, "),
        "{lp:#}"
    );
    assert!(w.ok(&["show", "bounded"]).contains("max runs"));

    // edit sets and --clear removes each condition.
    w.ok(&[
        "edit",
        "bounded",
        "--until-cmd",
        "true",
        "--until-output",
        "x",
        "--max-runs",
        "9",
    ]);
    let lp = shown(&w, "bounded");
    assert_eq!(
        (&lp["untilCmd"], &lp["untilOutput"], &lp["maxRuns"]),
        (&"true".into(), &"x".into(), &9.into())
    );
    w.ok(&[
        "edit",
        "bounded",
        "--clear",
        "until-cmd",
        "--clear",
        "until-output",
        "--clear",
        "max-runs",
    ]);
    let lp = shown(&w, "bounded");
    for field in ["untilCmd", "untilOutput", "maxRuns"] {
        assert!(lp.get(field).is_none(), "{field}: {lp:#}");
    }

    // A regex that does not compile: one line, nothing written.
    let (code, err) = w.fail(&[
        "create",
        "command",
        "badre",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--until-output",
        "(unclosed",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("--until-output \"(unclosed\" is not a valid regex"),
        "{err}"
    );
    let names: Vec<String> = w
        .json(&["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(!names.contains(&"badre".to_owned()), "{names:?}");
    let (code, err) = w.fail(&["edit", "printer", "--until-output", "a{99999}{99999}"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a valid regex"), "{err}");
}

/// Item 8: the stop conditions travel in a bundle (settings), their count does not
/// (state); MCP takes `untilOutput` and `maxRuns` with `--allow-mutations` but refuses
/// an `untilCmd` (it defines what runs) without `--allow-code`.
#[test]
fn stop_conditions_travel_in_bundles_and_untilcmd_over_mcp_needs_code() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "tests",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--until-cmd",
        "test -e marker",
        "--until-output",
        "PASS",
        "--max-runs",
        "4",
    ]);
    tick_once(&w, "tests");
    assert_eq!(shown(&w, "tests")["runCount"], 1);
    let out = w.run(&["export"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = &doc["loops"][0];
    assert_eq!(entry["untilCmd"], "test -e marker", "{entry:#}");
    assert!(entry.get("runCount").is_none(), "{entry:#}");
    let other = World::new();
    let bundle = other.root.path().join("bundle.json");
    std::fs::write(&bundle, &out.stdout).unwrap();
    other.json(&["import", bundle.to_str().unwrap(), "--apply"]);
    let here = shown(&other, "tests");
    let there = shown(&w, "tests");
    for field in ["untilCmd", "untilOutput", "maxRuns"] {
        assert_eq!(here[field], there[field], "{field}");
    }
    assert!(here.get("runCount").is_none(), "{here:#}");
    // A bundle with a pattern that does not compile is refused.
    let mut bad = doc.clone();
    bad["loops"][0]["untilOutput"] = "(".into();
    std::fs::write(&bundle, bad.to_string()).unwrap();
    let third = World::new();
    let (code, err) = third.fail(&["import", bundle.to_str().unwrap(), "--apply"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("is not a valid regex"), "{err}");

    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations"]);
    let refused = mcp.err(
        "loops_edit",
        serde_json::json!({"loop": "tests", "untilCmd": "make check"}),
    );
    assert!(refused.contains("--allow-code"), "{refused}");
    let edited = mcp.ok(
        "loops_edit",
        serde_json::json!({"loop": "tests", "untilOutput": "OK", "maxRuns": 7}),
    );
    assert_eq!(edited["untilOutput"], "OK");
    assert_eq!(edited["maxRuns"], 7);
    assert!(mcp.close().success());
    let mcp = crate::mcp::Mcp::start(&w, &["--allow-code"]);
    let edited = mcp.ok(
        "loops_edit",
        serde_json::json!({"loop": "tests", "untilCmd": "make check"}),
    );
    assert_eq!(edited["untilCmd"], "make check");
    assert!(mcp.close().success());
}

/// Item 8 with a real CLI against the mock model server: the model answers "2 tests
/// failed", then "ALL TESTS PASS"; `--until-output 'ALL TESTS PASS'` ends the loop
/// after that second run.
fn real_runs_until_its_summary_says_all_tests_pass(cli: &RealCli) {
    use crate::mock_model::{MockModel, Mode};
    let Some(bin) = crate::agents::real_cli(cli.cli) else {
        return;
    };
    let mock = MockModel::start(Mode::Reply("2 tests failed".into()));
    let (w, work) = crate::agents::real_world(&bin);
    let mut args: Vec<String> = [
        "--prompt",
        "Run the tests and fix them",
        "--cwd",
        work.to_str().unwrap(),
        "--timeout",
        "60s",
        "--until-output",
        "ALL TESTS PASS",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend((cli.flags)(&mock.url()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let name = format!("real-fixer-{}", cli.cli);
    create_agent(&w, &name, cli.cli, &args);
    tick_once(&w, &name);
    let first = &w.runs(&name)[0];
    assert_eq!(first["status"], "succeeded", "{first:#}");
    assert_eq!(shown(&w, &name)["status"], "active");
    mock.answer(Mode::Reply("ALL TESTS PASS".into()));
    tick_once(&w, &name);
    let lp = shown(&w, &name);
    assert_eq!(lp["status"], "done", "{lp:#}");
    assert_eq!(w.runs(&name).len(), 2);
    assert!(lp["statusReason"]
        .as_str()
        .unwrap()
        .starts_with("summary matched /ALL TESTS PASS/ in run 2 "));
}

#[test]
fn real_claude_runs_until_its_summary_says_all_tests_pass() {
    real_runs_until_its_summary_says_all_tests_pass(&crate::agents::CLAUDE);
}

#[test]
fn real_codex_runs_until_its_summary_says_all_tests_pass() {
    real_runs_until_its_summary_says_all_tests_pass(&crate::agents::CODEX);
}

/// Item 9: with `--session continue` each run resumes the conversation its previous
/// run reported — claude `--resume ID`, codex `exec … resume ID -`, opencode
/// `--session ID` — and keeps its session on disk (no `--no-session-persistence`, no
/// `--ephemeral`); `fresh` (the default) never resumes. The id is on the run
/// (`sessionId`), the resume in its note (`sessionNote`).
#[test]
fn continued_sessions_resume_the_previous_runs_conversation() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    const CLAUDE_ID: &str = "d8279595-ecaf-46b2-973e-1b8f2e1dc49e";
    const CODEX_ID: &str = "01a2291f-be55-7b91-a33e-96ce97a0310f";
    const OPENCODE_ID: &str = "ses_dd6dfff06ffe8b1Hs0VleCu8RP";
    let cases = [
        ResumeCase {
            provider: "claude",
            output: "claude_success.json",
            extra: &[],
            id: CLAUDE_ID,
            resume: &["--resume", CLAUDE_ID],
            ephemeral: "--no-session-persistence",
        },
        ResumeCase {
            provider: "codex",
            output: "codex_success.jsonl",
            extra: &[],
            id: CODEX_ID,
            resume: &["resume", CODEX_ID, "-"],
            ephemeral: "--ephemeral",
        },
        ResumeCase {
            provider: "opencode",
            output: "opencode_success.jsonl",
            extra: &["--model", "p/m"],
            id: OPENCODE_ID,
            resume: &["--session", OPENCODE_ID],
            ephemeral: "",
        },
    ];
    for ResumeCase {
        provider,
        output,
        extra,
        id,
        resume,
        ephemeral,
    } in cases
    {
        fakes.canned(provider, &fixture(output), 0);
        let name = format!("{provider}-continued");
        let mut args = vec!["--prompt", "keep going", "--session", "continue"];
        args.extend_from_slice(extra);
        let lp = create_agent(&w, &name, provider, &args);
        assert_eq!(lp["target"]["session"], "continue", "{lp:#}");

        // Run 1: nothing to resume yet; the session is kept for the next run.
        let (code, first) = run_now(&w, &name);
        assert_eq!(code, 0, "{first:#}");
        assert_eq!(first["sessionId"], id, "{first:#}");
        assert!(first.get("sessionNote").is_none(), "{first:#}");
        let argv = fakes.argv(provider);
        assert!(!contains_run(&argv, resume), "{provider}: {argv:?}");
        assert!(!argv.iter().any(|a| a == ephemeral), "{provider}: {argv:?}");

        // Run 2 resumes run 1's session.
        let (code, second) = run_now(&w, &name);
        assert_eq!(code, 0, "{second:#}");
        let argv = fakes.argv(provider);
        assert!(contains_run(&argv, resume), "{provider}: {argv:?}");
        assert_eq!(
            second["sessionNote"],
            format!("resumed session {id}"),
            "{second:#}"
        );
        assert_eq!(second["sessionId"], id, "{second:#}");
        // The prompt still goes to stdin only.
        assert!(!argv.iter().any(|a| a.contains("keep going")), "{argv:?}");
        assert_eq!(fakes.stdin(provider), "keep going");

        // Fresh (the default): never resumed, no session left behind.
        let fresh = format!("{provider}-fresh");
        let mut args = vec!["--prompt", "once"];
        args.extend_from_slice(extra);
        let lp = create_agent(&w, &fresh, provider, &args);
        assert!(lp["target"].get("session").is_none(), "{lp:#}");
        for _ in 0..2 {
            let (code, run) = run_now(&w, &fresh);
            assert_eq!(code, 0, "{run:#}");
            assert_eq!(run["sessionId"], id, "{run:#}");
            assert!(run.get("sessionNote").is_none(), "{run:#}");
            let argv = fakes.argv(provider);
            assert!(!contains_run(&argv, resume), "{provider}: {argv:?}");
            assert!(
                ephemeral.is_empty() || argv.iter().any(|a| a == ephemeral),
                "{provider}: {argv:?}"
            );
        }
    }
    // The session shows in `show`, the run's in `runs --show-output`.
    let shown_text = w.ok(&["show", "claude-continued"]);
    assert!(
        shown_text
            .lines()
            .any(|l| l.split_whitespace().eq(["session", "continue"])),
        "{shown_text}"
    );
    let text = w.ok(&["runs", "claude-continued", "--limit", "1", "--show-output"]);
    assert!(
        text.contains(&format!(
            "[session] {CLAUDE_ID} (resumed session {CLAUDE_ID})"
        )),
        "{text}"
    );
}

/// One provider of [`continued_sessions_resume_the_previous_runs_conversation`].
struct ResumeCase {
    provider: &'static str,
    /// The fixture the fake CLI prints.
    output: &'static str,
    extra: &'static [&'static str],
    /// The session id in that fixture.
    id: &'static str,
    /// The argv words that resume it.
    resume: &'static [&'static str],
    /// The flag that keeps a fresh run's session off disk ("" for none).
    ephemeral: &'static str,
}

/// Whether `want` appears in `argv` as consecutive words.
fn contains_run(argv: &[String], want: &[&str]) -> bool {
    argv.windows(want.len())
        .any(|w| w.iter().zip(want).all(|(a, b)| a == b))
}

/// Item 9: when the CLI says the session does not exist (claude's own words, exit 1,
/// nothing on stdout), the same attempt runs again fresh and the run says so.
#[test]
fn a_session_that_cannot_be_resumed_falls_back_to_a_fresh_run() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let calls = w.root.path().join("claude-calls");
    let success = w.root.path().join("claude-success.json");
    std::fs::write(&success, fixture("claude_success.json")).unwrap();
    // A claude whose session store was wiped: every --resume is refused, as the real
    // claude 2.1 refuses an unknown id.
    crate::util::write_script(
        &fakes.bin.join("claude"),
        &format!(
            r#"#!/bin/sh
cat >/dev/null
echo "$*" >> "{calls}"
prev=""
for a in "$@"; do
  if [ "$prev" = "--resume" ]; then
    echo "No conversation found with session ID: $a" >&2
    exit 1
  fi
  prev="$a"
done
cat "{success}"
"#,
            calls = calls.display(),
            success = success.display()
        ),
    );
    create_agent(
        &w,
        "forgetful",
        "claude",
        &["--prompt", "hi", "--session", "continue"],
    );
    let (code, first) = run_now(&w, "forgetful");
    assert_eq!(code, 0, "{first:#}");
    let id = first["sessionId"].as_str().unwrap().to_owned();
    let (code, second) = run_now(&w, "forgetful");
    assert_eq!(code, 0, "{second:#}");
    assert_eq!(second["status"], "succeeded", "{second:#}");
    assert_eq!(second["attempt"], 1, "{second:#}");
    assert_eq!(
        second["sessionNote"],
        format!("session {id} could not be resumed; started fresh"),
        "{second:#}"
    );
    assert!(second.get("error").is_none_or(serde_json::Value::is_null));
    let calls = std::fs::read_to_string(&calls).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 3, "{calls}");
    assert!(!lines[0].contains("--resume"), "{calls}");
    assert!(lines[1].ends_with(&format!("--resume {id}")), "{calls}");
    assert!(!lines[2].contains("--resume"), "{calls}");
}

/// Item 9: providers without a resume option we could check refuse `--session
/// continue` with one line at create and edit; a workflow step refuses it too; `edit`
/// switches a loop to `continue` and `--clear session` back to `fresh`.
#[test]
fn session_continue_is_refused_where_it_cannot_work_and_edited_where_it_can() {
    let mut w = World::new();
    let _fakes = Fakes::install(&mut w);
    for provider in ["cursor", "codewith", "aicopilot"] {
        let (code, err) = w.fail(&[
            "create",
            "agent",
            provider,
            "--provider",
            provider,
            "--every",
            "1h",
            "--prompt",
            "hi",
            "--session",
            "continue",
        ]);
        assert_eq!(code, 2, "{provider}: {err}");
        assert!(
            err.contains(&format!(
                "--session continue is supported by providers claude, codex and opencode, not {provider}"
            )),
            "{provider}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        create_agent(&w, provider, provider, &["--prompt", "hi"]);
        let (code, err) = w.fail(&["edit", provider, "--session", "continue"]);
        assert_eq!(code, 2, "{provider}: {err}");
        assert!(err.contains("--session continue is supported by"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let (code, err) = w.fail(&[
        "create",
        "agent",
        "typo",
        "--provider",
        "claude",
        "--every",
        "1h",
        "--prompt",
        "hi",
        "--session",
        "resume",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid --session \"resume\": expected one of fresh, continue"),
        "{err}"
    );

    create_agent(&w, "review", "claude", &["--prompt", "hi"]);
    w.ok(&["edit", "review", "--session", "continue"]);
    assert_eq!(shown(&w, "review")["target"]["session"], "continue");
    // Bundles carry it: export, then import into an empty data dir.
    let out = w.run(&["export"]);
    assert!(out.status.success());
    let bundle: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = w.root.path().join("bundle.json");
    std::fs::write(&path, bundle.to_string()).unwrap();
    let mut other = World::new();
    let _other_fakes = Fakes::install(&mut other);
    other.ok(&["import", path.to_str().unwrap(), "--apply"]);
    assert_eq!(shown(&other, "review")["target"]["session"], "continue");
    w.ok(&["edit", "review", "--clear", "session"]);
    assert!(shown(&w, "review")["target"].get("session").is_none());
    w.create_cmd("plain", &["--every", "1h"], "true");
    let (code, err) = w.fail(&["edit", "plain", "--session", "continue"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--session is for agent loops"), "{err}");

    let spec = w.root.path().join("wf.json");
    std::fs::write(
        &spec,
        r#"{"name": "wf", "steps": [{"id": "a", "target": {"type": "agent", "provider": "claude", "prompt": "hi", "session": "continue"}}]}"#,
    )
    .unwrap();
    let (code, err) = w.fail(&["workflows", "create", spec.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("session continue is for agent loops; a workflow step always starts fresh"),
        "{err}"
    );
}

/// Item 9 end to end with a real CLI against the mock model server: run 2 of a
/// `--session continue` loop resumes run 1's conversation — its request to the model
/// carries run 1's turn (the prompt a second time, and the mock's reply).
fn real_resume(cli: &RealCli) {
    let Some(bin) = real_cli(cli.cli) else {
        return;
    };
    let mock = MockModel::start(Mode::Reply(crate::agents::REPLY.into()));
    let (w, work) = real_world(&bin);
    let marker = format!("Remember this (resume-{}-4e1b)", cli.cli);
    let name = format!("resumed-{}", cli.cli);
    let mut args: Vec<String> = [
        "--prompt",
        marker.as_str(),
        "--session",
        "continue",
        "--cwd",
        work.to_str().unwrap(),
        "--timeout",
        "60s",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend((cli.flags)(&mock.url()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    create_agent(&w, &name, cli.cli, &args);
    let turns = |body: &str| body.matches(marker.as_str()).count();
    let model_requests = || {
        mock.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && (cli.path)(&r.path) && turns(&r.body) > 0)
            .collect::<Vec<_>>()
    };

    let (code, first) = run_now(&w, &name);
    assert_eq!(code, 0, "{first:#}");
    let id = first["sessionId"]
        .as_str()
        .expect("run 1 reports its session");
    let before = model_requests();
    assert!(!before.is_empty(), "the model never saw run 1's prompt");
    assert!(
        before.iter().all(|r| turns(&r.body) == 1),
        "run 1 sent one turn: {before:?}"
    );

    let (code, second) = run_now(&w, &name);
    assert_eq!(code, 0, "{second:#}");
    assert_eq!(
        second["sessionNote"],
        format!("resumed session {id}"),
        "{second:#}"
    );
    assert_eq!(second["sessionId"], id, "the resumed session keeps its id");
    let resumed = &model_requests()[before.len()..];
    assert!(
        resumed
            .iter()
            .any(|r| turns(&r.body) >= 2 && r.body.contains(crate::agents::REPLY)),
        "run 2 did not carry run 1's turn: {resumed:?}"
    );
}

#[test]
fn real_claude_resumes_the_previous_runs_conversation() {
    real_resume(&crate::agents::CLAUDE);
}

#[test]
fn real_codex_resumes_the_previous_runs_conversation() {
    real_resume(&crate::agents::CODEX);
}

/// Item 9 over MCP: `session` changes what the agent acts on (a resumed conversation
/// carries its earlier turns), so setting it needs `--allow-code`; with it, `loops_edit`
/// sets `continue` and `clear: ["session"]` goes back to `fresh`.
#[test]
fn mcp_sets_the_session_only_with_allow_code() {
    let mut w = World::new();
    let _fakes = Fakes::install(&mut w);
    create_agent(&w, "review", "claude", &["--prompt", "hi"]);
    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations"]);
    let refused = mcp.err(
        "loops_edit",
        serde_json::json!({"loop": "review", "session": "continue"}),
    );
    assert!(
        refused.contains("defines what runs") && refused.contains("--allow-code"),
        "{refused}"
    );
    assert!(mcp.close().success());
    assert!(shown(&w, "review")["target"].get("session").is_none());

    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations", "--allow-code"]);
    let edited = mcp.ok(
        "loops_edit",
        serde_json::json!({"loop": "review", "session": "continue"}),
    );
    assert_eq!(edited["target"]["session"], "continue", "{edited:#}");
    let edited = mcp.ok(
        "loops_edit",
        serde_json::json!({"loop": "review", "clear": ["session"]}),
    );
    assert!(edited["target"].get("session").is_none(), "{edited:#}");
    let refused = mcp.err(
        "loops_create_agent",
        serde_json::json!({"name": "cur", "provider": "cursor", "prompt": "hi", "every": "1h", "session": "continue"}),
    );
    assert!(
        refused.contains(
            "--session continue is supported by providers claude, codex and opencode, not cursor"
        ),
        "{refused}"
    );
    assert!(mcp.close().success());
}

// ---- item 7: budgets ----

/// The claude fixture's success reporting `input` + `output` tokens (and its cost).
fn claude_using(input: u64, output: u64) -> String {
    fixture("claude_success.json")
        .replace("\"input_tokens\":11", &format!("\"input_tokens\":{input}"))
        .replace(
            "\"output_tokens\":7",
            &format!("\"output_tokens\":{output}"),
        )
        .replace("\"inputTokens\":11", &format!("\"inputTokens\":{input}"))
        .replace("\"outputTokens\":7", &format!("\"outputTokens\":{output}"))
}

/// `loops ARGS` with the wall clock started at `fake` (libfaketime's `@YYYY-MM-DD
/// hh:mm:ss`, running on from there).
fn at_time(w: &World, fake: &str, args: &[&str]) -> std::process::Output {
    w.cmd(args)
        .env("LD_PRELOAD", crate::trust_engine::FAKETIME_LIB)
        .env("FAKETIME", format!("@{fake}"))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("loops under faketime")
}

/// `tick` at `fake`, asserting it succeeded.
fn tick_at(w: &World, fake: &str) {
    let out = at_time(w, fake, &["tick"]);
    assert!(
        out.status.success(),
        "tick at {fake}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn succeeded(w: &World, name: &str) -> usize {
    w.runs(name)
        .iter()
        .filter(|r| r["status"] == "succeeded")
        .count()
}

/// Item 7: an hourly claude loop with `--budget-tokens 1000/day` whose runs report 600
/// tokens each runs twice (600, then 1,200 of 1,000), is then held until the next UTC
/// midnight — `heldUntil` and the reason in `show`/`list`, `health` warns held and
/// counts no missed slot, `usage` shows the spend against the limit, its next slots do
/// not run, `holds clear` does not release it — with one `held` notification; past
/// midnight it runs again by itself (one `resumed`). A command loop refuses a budget;
/// `edit --clear budget-tokens` removes it.
#[test]
fn a_loop_whose_token_budget_is_spent_is_held_until_the_next_day() {
    if !crate::trust_engine::have_faketime() {
        return;
    }
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &claude_using(400, 200), 0);
    let events = w.root.path().join("events");
    create_agent(
        &w,
        "spender",
        "claude",
        &[
            "--prompt",
            "hi",
            "--budget-tokens",
            "1000/day",
            "--notify-cmd",
            &event_hook(&events),
        ],
    );
    assert_eq!(shown(&w, "spender")["budgetTokens"], "1000/day");
    // A Tuesday; the day ends at 2030-01-09 00:00 UTC.
    tick_at(&w, "2030-01-08 10:00:00");
    assert_eq!(succeeded(&w, "spender"), 1);
    assert!(shown(&w, "spender")["heldUntil"].is_null());
    tick_at(&w, "2030-01-08 11:01:00");
    assert_eq!(succeeded(&w, "spender"), 2);
    let lp = shown(&w, "spender");
    assert_eq!(lp["heldUntil"], "2030-01-09T00:00:00.000Z", "{lp:#}");
    assert_eq!(
        lp["heldReason"],
        "budget spent: 1,200 of 1,000 tokens today (resets 2030-01-09 00:00 UTC)"
    );
    // Its next slots are not run, and holds clear (account holds) does not release it.
    w.ok(&["holds", "clear", "claude"]);
    tick_at(&w, "2030-01-08 12:02:00");
    tick_at(&w, "2030-01-08 13:03:00");
    assert_eq!(succeeded(&w, "spender"), 2, "held slots do not run");
    let health = at_time(&w, "2030-01-08 14:00:00", &["--json", "health"]);
    let health: serde_json::Value = serde_json::from_slice(&health.stdout).unwrap();
    let line = &health["loops"][0];
    assert_eq!(line["verdict"], "warn", "{health:#}");
    assert_eq!(line["missedSlots"], 0, "{health:#}");
    assert!(
        line["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("held until"),
        "{health:#}"
    );
    assert!(w.ok(&["list"]).contains("held "));
    let text = w.ok(&["show", "spender"]);
    assert!(text.contains("held until"), "{text}");
    assert!(text.contains("budget"), "{text}");
    let usage = at_time(
        &w,
        "2030-01-08 14:00:00",
        &["--json", "usage", "--since", "1d"],
    );
    let usage: serde_json::Value = serde_json::from_slice(&usage.stdout).unwrap();
    let budget = &usage["budgets"][0];
    assert_eq!(
        (&budget["spent"], &budget["limit"], &budget["spentOut"]),
        (
            &serde_json::json!("1200"),
            &serde_json::json!("1000"),
            &serde_json::json!(true)
        ),
        "{usage:#}"
    );
    assert_eq!(budget["loopName"], "spender");
    assert_eq!(budget["resetsAt"], "2030-01-09T00:00:00.000Z");

    // Past midnight it runs again by itself: the new day's spend is 600.
    tick_at(&w, "2030-01-09 00:05:00");
    assert_eq!(succeeded(&w, "spender"), 3);
    assert!(shown(&w, "spender")["heldUntil"].is_null());
    let text = std::fs::read_to_string(&events).unwrap_or_default();
    assert_eq!(
        (
            text.matches("held").count(),
            text.matches("resumed").count()
        ),
        (1, 1),
        "one of each: {text}"
    );

    // Editing: cleared, the budget is gone; a command loop refuses one.
    w.ok(&["edit", "spender", "--clear", "budget-tokens"]);
    assert!(shown(&w, "spender").get("budgetTokens").is_none());
    let (code, err) = w.fail(&[
        "create",
        "command",
        "plain",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--budget-usd",
        "5/week",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--budget-usd is for agent loops"), "{err}");
    let (code, err) = w.fail(&["edit", "spender", "--budget-tokens", "lots/day"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid --budget-tokens"), "{err}");
}

/// Item 7: a store-wide budget `provider=claude --tokens 1000/day` holds both claude
/// loops once their runs together pass it, not the codex loop; `usage` and `budget
/// list` show the spend against it; raising it releases them at once.
#[test]
fn a_store_wide_budget_holds_every_loop_of_its_provider() {
    if !crate::trust_engine::have_faketime() {
        return;
    }
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    fakes.canned("claude", &claude_using(400, 200), 0);
    fakes.canned("codex", &fixture("codex_success.jsonl"), 0);
    for (name, provider) in [
        ("first", "claude"),
        ("second", "claude"),
        ("other", "codex"),
    ] {
        create_agent(&w, name, provider, &["--prompt", "hi"]);
    }
    w.ok(&["budget", "set", "provider=claude", "--tokens", "1000/day"]);
    let (code, err) = w.fail(&["budget", "set", "provider=gpt", "--tokens", "1/day"]);
    assert_eq!(code, 2, "{err}");
    tick_at(&w, "2030-01-08 10:00:00");
    let listed = w.json(&["list"]);
    let of = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap()
    };
    for name in ["first", "second"] {
        assert_eq!(
            of(name)["heldUntil"],
            "2030-01-09T00:00:00.000Z",
            "{listed:#}"
        );
        assert_eq!(
            of(name)["heldReason"],
            "claude budget spent: 1,200 of 1,000 tokens today (resets 2030-01-09 00:00 UTC)"
        );
    }
    assert!(of("other")["heldUntil"].is_null(), "{listed:#}");
    tick_at(&w, "2030-01-08 11:01:00");
    assert_eq!(
        (
            succeeded(&w, "first"),
            succeeded(&w, "second"),
            succeeded(&w, "other")
        ),
        (1, 1, 2)
    );
    let budgets = at_time(&w, "2030-01-08 11:30:00", &["--json", "budget", "list"]);
    let budgets: serde_json::Value = serde_json::from_slice(&budgets.stdout).unwrap();
    assert_eq!(budgets[0]["scope"], "provider=claude", "{budgets:#}");
    assert_eq!(budgets[0]["spent"], "1200", "{budgets:#}");
    let text =
        String::from_utf8(at_time(&w, "2030-01-08 11:30:00", &["usage", "--since", "1d"]).stdout)
            .unwrap();
    assert!(text.contains("1,200 of 1,000 tokens today"), "{text}");
    // Raised: due again at once.
    w.ok(&["budget", "set", "provider=claude", "--tokens", "5000/day"]);
    tick_at(&w, "2030-01-08 12:02:00");
    assert_eq!((succeeded(&w, "first"), succeeded(&w, "second")), (2, 2));
    w.ok(&["budget", "clear", "provider=claude"]);
    assert!(w.json(&["budget", "list"]).as_array().unwrap().is_empty());
}

/// Item 7: a loop's budgets travel in bundles; over MCP a budget is a limit, not what
/// runs: `--allow-mutations` sets and clears it on an agent loop, and `loops_budgets`
/// lists it against its spend.
#[test]
fn budgets_travel_in_bundles_and_mcp_sets_them_with_mutations() {
    let mut w = World::new();
    let _fakes = Fakes::install(&mut w);
    create_agent(
        &w,
        "capped",
        "claude",
        &[
            "--prompt",
            "hi",
            "--budget-tokens",
            "200000/day",
            "--budget-usd",
            "$2.50/week",
        ],
    );
    let lp = shown(&w, "capped");
    assert_eq!(
        (&lp["budgetTokens"], &lp["budgetUsd"]),
        (&"200000/day".into(), &"2.5/week".into())
    );
    let out = w.run(&["export"]);
    assert!(out.status.success());
    let other = World::new();
    let bundle = other.root.path().join("bundle.json");
    std::fs::write(&bundle, &out.stdout).unwrap();
    other.json(&["import", bundle.to_str().unwrap(), "--apply"]);
    let there = shown(&other, "capped");
    assert_eq!(there["budgetTokens"], "200000/day");
    assert_eq!(there["budgetUsd"], "2.5/week");

    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations"]);
    let edited = mcp.ok(
        "loops_edit",
        serde_json::json!({"loop": "capped", "budgetTokens": "5000/week", "clear": ["budget-usd"]}),
    );
    assert_eq!(edited["budgetTokens"], "5000/week", "{edited:#}");
    assert!(edited.get("budgetUsd").is_none(), "{edited:#}");
    let listed = mcp.ok("loops_budgets", serde_json::json!({}));
    assert_eq!(listed[0]["loopName"], "capped", "{listed:#}");
    assert_eq!(listed[0]["limit"], "5000");
    assert_eq!(listed[0]["window"], "week");
    let refused = mcp.err(
        "loops_edit",
        serde_json::json!({"loop": "capped", "budgetTokens": "many"}),
    );
    assert!(refused.contains("invalid --budget-tokens"), "{refused}");
    assert!(mcp.close().success());
}

/// A fake claude that appends `start NAME NANOS` and `end NAME NANOS` (its own clock,
/// around a sleep of `secs`) to `spans`, then prints the success fixture.
pub(crate) fn claude_recording_spans(fakes: &Fakes, spans: &std::path::Path, secs: &str) {
    let ok = spans.with_extension("ok.json");
    std::fs::write(&ok, fixture("claude_success.json")).unwrap();
    crate::util::write_script(
        &fakes.bin.join("claude"),
        &format!(
            "#!/bin/sh\ncat >/dev/null\n\
             echo \"start $LOOPS_LOOP_NAME $(date +%s%N)\" >> {spans}\n\
             sleep {secs}\n\
             echo \"end $LOOPS_LOOP_NAME $(date +%s%N)\" >> {spans}\n\
             cat {ok}\n",
            spans = spans.display(),
            ok = ok.display()
        ),
    );
}

/// The `[start, end]` of each run in a spans file, by start.
pub(crate) fn spans_of(text: &str) -> Vec<(String, u128, u128)> {
    let mut starts = std::collections::HashMap::new();
    let mut spans = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, name, at] = parts[..] else {
            panic!("bad span line {line:?}")
        };
        let at: u128 = at.parse().unwrap();
        match what {
            "start" => {
                starts.insert(name.to_owned(), at);
            }
            _ => spans.push((name.to_owned(), starts.remove(name).unwrap(), at)),
        }
    }
    spans.sort_by_key(|s| s.1);
    spans
}

/// Item 6: with `--max-concurrent-per provider=claude:1`, three due claude loops run
/// one at a time — the children's own clocks say their runs never overlap — and all of
/// them run, none recorded missed or skipped; meanwhile `show` of a waiting loop and
/// `health` say what it waits for, and `daemon status` shows the cap.
#[test]
fn a_provider_cap_runs_its_loops_one_at_a_time_without_missing_a_slot() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let spans = w.root.path().join("spans");
    claude_recording_spans(&fakes, &spans, "1");
    let names = ["cap-a", "cap-b", "cap-c"];
    for name in names {
        create_agent(&w, name, "claude", &["--prompt", "hi"]);
        w.make_due(name);
    }
    let mut d = w.daemon_ready(&["--max-concurrent-per", "provider=claude:1"]);
    // The daemon records its caps once its supervisor is up, a moment after it took
    // the lease (what `daemon_ready` waits for).
    wait_for(
        "daemon status to show the cap",
        Duration::from_secs(10),
        || {
            w.ok(&["daemon", "status"])
                .contains("provider=claude:1")
                .then_some(())
        },
    );

    // While one runs, the others wait, and say so.
    let waiting = wait_for(
        "a loop waiting for the cap",
        Duration::from_secs(30),
        || {
            names.iter().find_map(|name| {
                let shown = w.ok(&["show", name]);
                shown
                    .contains("waiting for a free claude slot (cap 1)")
                    .then(|| name.to_string())
            })
        },
    );
    let health = w.json(&["health"]);
    let line = health["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["loopName"] == waiting.as_str())
        .cloned()
        .unwrap();
    if line["lastStatus"].is_null() {
        assert_eq!(line["missedSlots"], 0, "{line:#}");
    }

    for name in names {
        wait_for(&format!("{name} ran"), Duration::from_secs(60), || {
            w.runs(name)
                .into_iter()
                .find(|r| r["status"] == "succeeded")
        });
    }
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
    let spans = spans_of(&std::fs::read_to_string(&spans).unwrap());
    assert_eq!(spans.len(), 3, "{spans:?}");
    for pair in spans.windows(2) {
        assert!(
            pair[1].1 >= pair[0].2,
            "{} started before {} ended: {spans:?}",
            pair[1].0,
            pair[0].0
        );
    }
    for name in names {
        let runs = w.runs(name);
        assert_eq!(runs.len(), 1, "one run, nothing skipped: {runs:?}");
        assert_eq!(runs[0]["status"], "succeeded", "{runs:?}");
    }
    let health = w.json(&["health"]);
    for line in health["loops"].as_array().unwrap() {
        assert_eq!(line["missedSlots"], 0, "{line:#}");
        assert!(line.get("waitingForCap").is_none(), "{line:#}");
    }
}

/// Item 6: a loop on an account pool `work,home`: its first run takes `work` (a tie,
/// in pool order), meets the usage limit and holds `work` only; the slot's next
/// attempt runs on `home` at once, the loop itself never held. `runs` and `show` name
/// the account each run took.
#[test]
fn an_account_pool_moves_to_the_next_account_on_a_usage_limit() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let root = w.root.path().to_owned();
    for profile in ["work", "home"] {
        std::fs::create_dir_all(root.join("profiles").join(profile)).unwrap();
    }
    crate::util::write_script(
        &fakes.bin.join("accounts"),
        &format!(
            "#!/bin/sh\necho \"export CLAUDE_CONFIG_DIR={}/profiles/$2\"\n",
            root.display()
        ),
    );
    let (limit_out, ok_out) = (root.join("limit.json"), root.join("ok.json"));
    std::fs::write(&limit_out, fixture("claude_usage_limit.json")).unwrap();
    std::fs::write(&ok_out, fixture("claude_success.json")).unwrap();
    let seen = root.join("seen");
    crate::util::write_script(
        &fakes.bin.join("claude"),
        &format!(
            "#!/bin/sh\ncat >/dev/null\necho \"$LOOPS_ACCOUNT_PROFILE\" >> {seen}\n\
             if [ \"$LOOPS_ACCOUNT_PROFILE\" = work ]; then cat {limit}; exit 1; fi\n\
             cat {ok}\n",
            seen = seen.display(),
            limit = limit_out.display(),
            ok = ok_out.display()
        ),
    );
    let created = create_agent(
        &w,
        "pooled",
        "claude",
        &["--prompt", "hi", "--account-pool", "work,home"],
    );
    assert_eq!(
        created["target"]["accountPool"],
        serde_json::json!(["work", "home"]),
        "{created:#}"
    );
    // One of --account and --account-pool.
    let (code, err) = w.fail(&[
        "create",
        "agent",
        "both",
        "--provider",
        "claude",
        "--prompt",
        "hi",
        "--every",
        "1h",
        "--account",
        "work",
        "--account-pool",
        "work,home",
    ]);
    assert_eq!(code, 2, "{err}");
    w.make_due("pooled");
    let mut d = w.daemon_ready(&[]);
    let ok = wait_for("the run on home", Duration::from_secs(30), || {
        w.runs("pooled")
            .into_iter()
            .find(|r| r["status"] == "succeeded")
    });
    assert_eq!(ok["account"], "home", "{ok:#}");
    let runs = w.runs("pooled");
    let limited = runs
        .iter()
        .find(|r| r["failureClass"] == "usage_limit")
        .unwrap_or_else(|| panic!("{runs:#?}"));
    assert_eq!(limited["account"], "work", "{runs:#?}");
    assert_eq!(ok["scheduledFor"], limited["scheduledFor"], "the same slot");
    let holds = w.json(&["holds"]);
    assert_eq!(holds.as_array().unwrap().len(), 1, "{holds:#}");
    assert_eq!(holds[0]["account"], "work", "{holds:#}");
    assert!(shown(&w, "pooled").get("heldUntil").is_none());
    assert_eq!(
        std::fs::read_to_string(&seen)
            .unwrap()
            .lines()
            .collect::<Vec<_>>(),
        ["work", "home"]
    );
    assert!(w.ok(&["runs", "pooled"]).contains("ACCOUNT"));
    let text = w.ok(&["show", "pooled"]);
    assert!(text.contains("on account home"), "{text}");
    assert!(text.contains("work, home"), "{text}");
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());

    // edit: --account replaces the pool; --clear account-pool removes it.
    let edited = w.json(&["edit", "pooled", "--account", "home"]);
    assert!(edited["target"].get("accountPool").is_none(), "{edited:#}");
    let edited = w.json(&["edit", "pooled", "--account-pool", "home,work"]);
    assert_eq!(
        edited["target"]["accountPool"],
        serde_json::json!(["home", "work"])
    );
    assert!(edited["target"].get("account").is_none(), "{edited:#}");

    // The pool travels in bundles (it is the target's).
    let out = w.run(&["export"]);
    assert!(out.status.success());
    let other = World::new();
    let bundle = other.root.path().join("bundle.json");
    std::fs::write(&bundle, &out.stdout).unwrap();
    other.json(&["import", bundle.to_str().unwrap(), "--apply"]);
    assert_eq!(
        shown(&other, "pooled")["target"]["accountPool"],
        serde_json::json!(["home", "work"])
    );

    let edited = w.json(&["edit", "pooled", "--clear", "account-pool"]);
    assert!(edited["target"].get("accountPool").is_none(), "{edited:#}");

    // Over MCP a pool selects credentials: it needs --allow-code, as `account` does.
    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations"]);
    let refused = mcp.err(
        "loops_edit",
        serde_json::json!({"loop": "pooled", "accountPool": ["work", "home"]}),
    );
    assert!(refused.contains("--allow-code"), "{refused}");
    assert!(mcp.close().success());
    let mcp = crate::mcp::Mcp::start(&w, &["--allow-mutations", "--allow-code"]);
    let edited = mcp.ok(
        "loops_edit",
        serde_json::json!({"loop": "pooled", "accountPool": ["work", "home"]}),
    );
    assert_eq!(
        edited["target"]["accountPool"],
        serde_json::json!(["work", "home"]),
        "{edited:#}"
    );
    assert!(mcp.close().success());
}

/// Items 2 and 7 for workflows: an agent step runs on its provider and account like an
/// agent loop, so what holds that key holds the step. A step that meets the usage limit
/// holds its key (an agent loop on it shows `heldUntil`), waits `pending` with the
/// reason, and runs again once the hold ends — the workflow run succeeds, the limited
/// attempt not a failure. A step whose key an agent loop's limit already holds never
/// starts until the hold is cleared; nor does one whose store-wide budget is spent
/// until the budget is raised. Every wait is in the run's events (`step_held`).
#[test]
fn held_keys_hold_workflow_agent_steps_until_they_end() {
    let mut w = World::new();
    let fakes = Fakes::install(&mut w);
    let root = w.root.path().to_owned();
    std::fs::create_dir_all(root.join("profiles").join("work")).unwrap();
    crate::util::write_script(
        &fakes.bin.join("accounts"),
        &format!(
            "#!/bin/sh\necho \"export CLAUDE_CONFIG_DIR={}/profiles/$2\"\n",
            root.display()
        ),
    );
    // claude meets the limit while `limited` exists; each start is logged with its
    // caller (LOOPS_WORKFLOW_STEP_ID is set for steps only).
    let limited = root.join("limited");
    let starts = root.join("starts");
    let (limit_out, ok_out) = (root.join("limit.json"), root.join("ok.json"));
    std::fs::write(&limit_out, fixture("claude_usage_limit.json")).unwrap();
    std::fs::write(&ok_out, claude_using(600, 400)).unwrap();
    crate::util::write_script(
        &fakes.bin.join("claude"),
        &format!(
            "#!/bin/sh\ncat >/dev/null\necho \"${{LOOPS_WORKFLOW_STEP_ID:-loop}}\" >> {starts}\n\
             if [ -f {limited} ]; then cat {limit}; exit 1; fi\ncat {ok}\n",
            starts = starts.display(),
            limited = limited.display(),
            limit = limit_out.display(),
            ok = ok_out.display()
        ),
    );
    let spec = serde_json::json!({"name": "fixer", "steps": [
        {"id": "prep", "target": {"type": "command", "command": "true"}},
        {"id": "fix", "dependsOn": ["prep"], "account": {"profile": "work"},
         "target": {"type": "agent", "provider": "claude", "prompt": "Fix it."}},
        {"id": "after", "dependsOn": ["fix"], "target": {"type": "command", "command": "true"}}
    ]});
    let path = root.join("wf.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    w.ok(&["workflows", "create", path.to_str().unwrap()]);
    create_agent(
        &w,
        "work-a",
        "claude",
        &["--prompt", "hi", "--account", "work", "--every", "1h"],
    );
    w.extra_env
        .push(("LOOPS_TEST_HOLD_CAP_MS".into(), "3000".into()));
    let starts_of = || std::fs::read_to_string(&starts).unwrap_or_default();
    let run_in_background = |w: &World| {
        w.cmd(&["--json", "workflows", "run", "fixer"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let newest_run = |w: &World| w.json(&["workflows", "runs"])[0].clone();
    let step_of = |w: &World, run: &str, id: &str| {
        let inspected = w.json(&["workflows", "inspect", run]);
        inspected["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stepId"] == id)
            .cloned()
            .unwrap()
    };
    let held_events = |w: &World, run: &str| -> Vec<serde_json::Value> {
        let inspected = w.json(&["workflows", "inspect", run]);
        inspected["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["eventType"] == "step_held")
            .cloned()
            .collect()
    };
    let finish = |child: std::process::Child| {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };

    // 1. The step meets the limit: it holds claude/work for the agent loop too, and
    //    waits pending with the reason; lifted, the hold ends and the step runs again.
    std::fs::write(&limited, "").unwrap();
    let child = run_in_background(&w);
    let holds = wait_for("the step's hold", Duration::from_secs(30), || {
        let holds = w.json(&["holds"]);
        (holds.as_array().unwrap().len() == 1).then_some(holds)
    });
    assert_eq!(
        (&holds[0]["provider"], &holds[0]["account"]),
        (&"claude".into(), &"work".into())
    );
    let reason = holds[0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("(step fix of workflow run "), "{reason}");
    let run = newest_run(&w)["id"].as_str().unwrap().to_owned();
    let fix = wait_for("fix waits", Duration::from_secs(30), || {
        let fix = step_of(&w, &run, "fix");
        (fix["status"] == "pending").then_some(fix)
    });
    assert!(
        fix["error"].as_str().unwrap().starts_with("held until "),
        "{fix:#}"
    );
    assert!(
        w.json(&["show", "work-a"])["heldUntil"].is_string(),
        "the agent loop on the key is held too"
    );
    let held = held_events(&w, &run);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["payload"]["usageLimit"], true, "{held:?}");
    std::fs::remove_file(&limited).unwrap();
    let doc = finish(child);
    assert_eq!(doc["workflowRun"]["status"], "succeeded", "{doc:#}");
    let fix = step_of(&w, &run, "fix");
    assert_eq!(fix["status"], "succeeded", "{fix:#}");
    assert_eq!(fix["attempts"], 2, "{fix:#}");
    assert_eq!(fix["error"], serde_json::Value::Null, "{fix:#}");
    assert_eq!(step_of(&w, &run, "after")["status"], "succeeded");
    assert_eq!(starts_of(), "fix\nfix\n");
    assert!(
        w.json(&["holds"]).as_array().unwrap().is_empty(),
        "the step that ran past the hold released it (no held was sent)"
    );

    // 2. The agent loop meets the limit: the step never starts while its key is held,
    //    and starts once the hold is cleared by hand.
    std::fs::write(&limited, "").unwrap();
    w.run(&["run-now", "work-a"]);
    std::fs::remove_file(&limited).unwrap();
    assert_eq!(w.json(&["holds"]).as_array().unwrap().len(), 1);
    w.extra_env.retain(|(k, _)| k != "LOOPS_TEST_HOLD_CAP_MS");
    let child = run_in_background(&w);
    let run = wait_for("the second run", Duration::from_secs(30), || {
        let newest = newest_run(&w);
        let id = newest["id"].as_str().unwrap().to_owned();
        (id != run).then_some(id)
    });
    wait_for("fix held before it starts", Duration::from_secs(30), || {
        let held = held_events(&w, &run);
        (held.len() == 1 && held[0]["payload"]["usageLimit"] == false).then_some(())
    });
    assert_eq!(step_of(&w, &run, "fix")["status"], "pending");
    assert_eq!(
        starts_of(),
        "fix\nfix\nloop\n",
        "the held step did not start"
    );
    w.ok(&["holds", "clear", "claude", "work"]);
    let doc = finish(child);
    assert_eq!(doc["workflowRun"]["status"], "succeeded", "{doc:#}");
    assert_eq!(starts_of(), "fix\nfix\nloop\nfix\n");

    // 3. A spent store-wide budget of the key: held with the budget's reason until the
    //    budget is raised (two successful steps spent 2,000 tokens today).
    w.ok(&[
        "budget",
        "set",
        "provider=claude,account=work",
        "--tokens",
        "1000/day",
    ]);
    let child = run_in_background(&w);
    let prior = run.clone();
    let run = wait_for("the third run", Duration::from_secs(30), || {
        let id = newest_run(&w)["id"].as_str().unwrap().to_owned();
        (id != prior).then_some(id)
    });
    let held = wait_for("fix held by the budget", Duration::from_secs(30), || {
        let held = held_events(&w, &run);
        (held.len() == 1).then_some(held)
    });
    let reason = held[0]["payload"]["reason"].as_str().unwrap();
    assert!(reason.contains("budget spent"), "{reason}");
    assert_eq!(starts_of(), "fix\nfix\nloop\nfix\n", "not started");
    w.ok(&[
        "budget",
        "set",
        "provider=claude,account=work",
        "--tokens",
        "1000000/day",
    ]);
    let doc = finish(child);
    assert_eq!(doc["workflowRun"]["status"], "succeeded", "{doc:#}");
    assert_eq!(starts_of(), "fix\nfix\nloop\nfix\nfix\n");
}
