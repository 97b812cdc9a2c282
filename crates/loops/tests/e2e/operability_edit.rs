//! Issue #11 items 1, 2, 3 and 8 through the real binary: `edit` and `rename` change a
//! loop in place (id, history and status kept), labels filter `list` and `runs`,
//! `archive`/`unarchive` put a loop away and bring it back, and `runs` filters by
//! status and time window. Bad input: one line, exit 2, nothing written.

use crate::util::{instant, wait_for, World};
use chrono::{TimeDelta, Utc};
use serde_json::Value;
use std::time::Duration;

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect()
}

fn run_loops(runs: &Value) -> Vec<String> {
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| r["loopName"].as_str().unwrap().to_owned())
        .collect()
}

/// `|a - b|` is within `slack`.
fn near(a: chrono::DateTime<Utc>, b: chrono::DateTime<Utc>, slack: TimeDelta) -> bool {
    (a - b).abs() <= slack
}

#[test]
fn edit_changes_a_loop_in_place_keeping_its_id_history_and_status() {
    let w = World::new();
    let before = w.json(&[
        "create", "command", "job", "--every", "1h", "--cmd", "echo one", "--label", "old",
        "--label", "keep",
    ]);
    w.ok(&["run-now", "job"]);
    w.ok(&["pause", "job"]);
    let paused = w.json(&["show", "job"]);
    let edited = w.json(&[
        "edit",
        "job",
        "--cmd",
        "echo two",
        "--every",
        "2h",
        "--attempts",
        "3",
        "-d",
        "edited in place",
        "--label",
        "new",
        "--unlabel",
        "old",
    ]);
    assert_eq!(edited["id"], before["id"]);
    assert_eq!(edited["createdAt"], before["createdAt"]);
    assert_eq!(edited["status"], "paused", "the status stays");
    assert_eq!(edited["target"]["command"], "echo two");
    assert_eq!(edited["schedule"]["everyMs"], 7_200_000);
    assert_eq!(edited["maxAttempts"], 3);
    assert_eq!(edited["description"], "edited in place");
    assert_eq!(edited["labels"], serde_json::json!(["keep", "new"]));
    assert!(instant(&edited["updatedAt"]) > instant(&paused["updatedAt"]));
    // A new schedule starts from now, as a new loop's would.
    let next = instant(&edited["nextRunAt"]);
    assert!(
        near(
            next,
            Utc::now() + TimeDelta::hours(2),
            TimeDelta::minutes(1)
        ),
        "{next}"
    );
    assert_eq!(edited["dueAt"], edited["nextRunAt"], "no jitter");
    // The stored loop is what was printed; the history stayed.
    assert_eq!(w.json(&["show", "job"]), edited);
    let runs = w.runs("job");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["loopId"], before["id"]);
    // The next run runs the new command.
    let out = w.json(&["run-now", "job", "--show-output"]);
    assert_eq!(out["stdout"].as_str().unwrap().trim(), "two");
    // Human output names what changed.
    let text = w.ok(&["edit", "job", "--overlap", "allow"]);
    assert!(
        text.starts_with("edited job (") && text.contains("changed policy"),
        "{text}"
    );
}

#[test]
fn an_unchanged_schedule_keeps_its_slot_and_a_changed_one_is_replanned() {
    let w = World::new();
    let lp = w.json(&[
        "create", "command", "keep", "--every", "1h", "--cmd", "true",
    ]);
    let described = w.json(&["edit", "keep", "-d", "just words"]);
    assert_eq!(described["nextRunAt"], lp["nextRunAt"]);
    // Same schedule given again: still the same slot.
    let same = w.json(&["edit", "keep", "--every", "1h"]);
    assert_eq!(same["nextRunAt"], lp["nextRunAt"]);
    // A jitter moves only the due instant.
    let jittered = w.json(&["edit", "keep", "--jitter", "30m"]);
    assert_eq!(jittered["nextRunAt"], lp["nextRunAt"]);
    let delay = (instant(&jittered["dueAt"]) - instant(&jittered["nextRunAt"])).num_milliseconds();
    assert!((0..1_800_000).contains(&delay), "{delay}");
    let shorter = w.json(&["edit", "keep", "--every", "45m"]);
    let next = instant(&shorter["nextRunAt"]);
    assert!(
        near(
            next,
            Utc::now() + TimeDelta::minutes(45),
            TimeDelta::minutes(1)
        ),
        "{next}"
    );
    // A cron loop: --tz alone keeps the expression, --cron alone keeps the zone.
    w.json(&[
        "create",
        "command",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "UTC",
        "--cmd",
        "true",
    ]);
    let moved = w.json(&["edit", "nightly", "--tz", "europe/berlin"]);
    assert_eq!(
        moved["schedule"],
        serde_json::json!({"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Berlin"})
    );
    let recron = w.json(&["edit", "nightly", "--cron", "30 4 * * *"]);
    assert_eq!(recron["schedule"]["timezone"], "Europe/Berlin");
    assert_eq!(recron["schedule"]["expression"], "30 4 * * *");
    // --anchor alone re-anchors an interval.
    let anchored = w.json(&["edit", "keep", "--anchor", "fixed_delay"]);
    assert_eq!(anchored["schedule"]["anchor"], "fixed_delay");
    assert_eq!(anchored["schedule"]["everyMs"], 2_700_000);
}

#[test]
fn an_edit_during_a_run_leaves_the_run_alone_and_applies_from_the_next_slot() {
    let w = World::new();
    w.create_cmd(
        "slow",
        &["--every", "1s"],
        "echo started; sleep 1; echo old-finished",
    );
    let mut d = w.daemon_ready(&[]);
    let running = wait_for("a running run", Duration::from_secs(20), || {
        w.runs("slow")
            .into_iter()
            .find(|r| r["status"] == "running")
    });
    let edited = w.json(&["edit", "slow", "--every", "1h", "--cmd", "echo new"]);
    let edited_at = Utc::now();
    let finished = wait_for("the run to finish", Duration::from_secs(20), || {
        w.runs("slow")
            .into_iter()
            .find(|r| r["id"] == running["id"] && r["status"] != "running")
    });
    assert_eq!(d.stop(), Some(0));
    assert_eq!(finished["status"], "succeeded", "{finished}");
    let out = w.json(&["runs", "slow", "--limit", "0", "--show-output"]);
    let run = out
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == running["id"])
        .unwrap();
    assert!(
        run["stdout"].as_str().unwrap().contains("old-finished"),
        "the run went on with the command it started with: {run}"
    );
    let lp = w.json(&["show", "slow"]);
    assert_eq!(lp["status"], "active");
    assert_eq!(
        lp["nextRunAt"], edited["nextRunAt"],
        "its end kept the edit"
    );
    let next = instant(&lp["nextRunAt"]);
    assert!(
        near(next, edited_at + TimeDelta::hours(1), TimeDelta::minutes(1)),
        "{next}"
    );
    // Nothing started after the edit: every run began before it.
    for r in w.runs("slow") {
        assert!(instant(&r["createdAt"]) <= edited_at, "{r}");
    }
}

#[test]
fn edit_clears_and_replaces_settings_of_each_target_type() {
    let w = World::new();
    w.json(&[
        "create",
        "command",
        "c",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--env",
        "A=1",
        "--env",
        "B=2",
        "--timeout",
        "5m",
        "--jitter",
        "1m",
        "-d",
        "words",
        "--expires-at",
        "+1d",
        "--notify-cmd",
        "logger loops",
        "--label",
        "x",
    ]);
    w.json(&[
        "edit",
        "c",
        "--clear",
        "notify",
        "--clear",
        "timeout",
        "--clear",
        "jitter",
        "--clear",
        "description",
        "--clear",
        "expires-at",
        "--clear",
        "labels",
        "--unset-env",
        "A",
        "--env",
        "B=20",
        "--env",
        "C=3",
    ]);
    let lp = w.json(&["show", "c", "--show-output"]);
    assert!(lp.get("notify").is_none(), "{lp}");
    assert!(lp["target"].get("timeoutMs").is_none(), "{lp}");
    assert_eq!(lp["jitterMs"], 0);
    assert!(lp.get("description").is_none(), "{lp}");
    assert_eq!(lp["expiresAt"], Value::Null);
    assert_eq!(lp["labels"], serde_json::json!([]));
    assert_eq!(
        lp["target"]["env"],
        serde_json::json!({"B": "20", "C": "3"})
    );
    // --no-shell with arguments, then back to a shell.
    let direct = w.json(&["edit", "c", "--no-shell", "--cmd", "echo", "--", "a", "b"]);
    assert_eq!(direct["target"]["shell"], false);
    assert_eq!(direct["target"]["args"], serde_json::json!(["a", "b"]));
    let shell = w.json(&[
        "edit", "c", "--shell", "--clear", "args", "--cmd", "echo hi",
    ]);
    assert_eq!(shell["target"]["shell"], true);
    assert!(shell["target"].get("args").is_none(), "{shell}");
    // Notification settings laid over the stored ones.
    w.json(&["edit", "c", "--notify-url", "https://hooks.example.com/x/y"]);
    let on = w.json(&["edit", "c", "--notify-on", "always", "--notify-cmd", "true"]);
    assert_eq!(on["notify"]["on"], "always");
    assert_eq!(on["notify"]["cmd"], "true");
    let url_only = w.json(&["edit", "c", "--clear", "notify-cmd"]);
    assert!(url_only["notify"].get("cmd").is_none(), "{url_only}");
    assert!(url_only["notify"]["url"]
        .as_str()
        .unwrap()
        .starts_with("https://hooks.example.com/"));

    // An agent loop: its prompt, model and provider; a command flag is refused.
    w.json(&[
        "create",
        "agent",
        "ag",
        "--every",
        "1h",
        "--provider",
        "claude",
        "--prompt",
        "first",
        "--model",
        "sonnet",
    ]);
    w.json(&["edit", "ag", "--prompt", "second", "--model", "opus"]);
    let agent = w.json(&["show", "ag", "--show-output"]);
    assert_eq!(agent["target"]["prompt"], "second");
    assert_eq!(agent["target"]["model"], "opus");
    let prompt = w.root.path().join("prompt.md");
    std::fs::write(&prompt, "from a file").unwrap();
    w.json(&[
        "edit",
        "ag",
        "--prompt-file",
        prompt.to_str().unwrap(),
        "--clear",
        "model",
        "--provider",
        "codex",
    ]);
    let agent = w.json(&["show", "ag", "--show-output"]);
    assert_eq!(agent["target"]["provider"], "codex");
    assert_eq!(agent["target"]["prompt"], "from a file");
    assert_eq!(agent["target"]["promptFile"], prompt.to_str().unwrap());
    assert!(agent["target"].get("model").is_none(), "{agent}");
}

#[test]
fn rename_keeps_the_id_and_history_under_the_rules_of_create() {
    let w = World::new();
    let a = w.create_cmd("first", &["--every", "1h"], "true");
    w.create_cmd("other", &["--every", "1h"], "true");
    w.ok(&["run-now", "first"]);
    let renamed = w.json(&["rename", "first", "second"]);
    assert_eq!(renamed["id"], a["id"]);
    assert_eq!(renamed["name"], "second");
    let runs = w.runs("second");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0]["loopName"], "second",
        "the history carries the new name"
    );
    assert_eq!(w.fail(&["show", "first"]).0, 2);
    let text = w.ok(&["rename", "second", "third"]);
    assert!(text.starts_with("renamed second to third ("), "{text}");
    let before = w.json(&["show", "third"]);
    let id = a["id"].as_str().unwrap();
    for (to, needle) in [
        ("other", "a loop named \"other\" already exists"),
        ("0123456789ab", "looks like a loop id"),
        (&id[..4], "is a prefix of loop id"),
        ("", "loop name is empty"),
    ] {
        let (code, err) = w.fail(&["rename", "third", to]);
        assert_eq!(code, 2, "{to}: {err}");
        assert!(err.contains(needle), "{to}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert_eq!(w.json(&["show", "third"]), before, "nothing written");
}

#[test]
fn archive_hides_a_loop_keeps_its_history_and_unarchive_brings_it_back_paused() {
    let w = World::new();
    let old = w.create_cmd("old", &["--every", "1s", "--label", "team"], "true");
    w.create_cmd("live", &["--every", "1s"], "true");
    w.ok(&["run-now", "old"]);
    let archived = w.json(&["archive", "old"]);
    assert_eq!(archived["status"], "archived");
    assert_eq!(
        archived["name"], "old",
        "the name stays the loop's by default"
    );
    assert_eq!(names(&w.json(&["list"])), ["live"]);
    assert_eq!(names(&w.json(&["list", "--all"])), ["live", "old"]);
    assert_eq!(names(&w.json(&["list", "--status", "archived"])), ["old"]);
    assert!(names(&w.json(&["list", "--label", "team"])).is_empty());
    assert_eq!(
        names(&w.json(&["list", "--label", "team", "--all"])),
        ["old"]
    );
    // Its history and its details are still there.
    assert_eq!(w.runs("old").len(), 1);
    assert_eq!(w.json(&["show", "old"])["status"], "archived");
    // Never scheduled: the daemon runs the live loop, not the archived one.
    let mut d = w.daemon_ready(&[]);
    wait_for(
        "the live loop to run twice",
        Duration::from_secs(20),
        || (w.runs("live").len() >= 2).then_some(()),
    );
    assert_eq!(d.stop(), Some(0));
    assert_eq!(w.runs("old").len(), 1, "the archived loop never ran");
    let doctor = w.run(&["doctor"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(!doctor.contains("loop old"), "doctor ignores it: {doctor}");
    // Pause, resume, stop and run-now leave it alone; unarchive first.
    for verb in ["pause", "resume", "stop", "run-now"] {
        let (code, err) = w.fail(&[verb, "old"]);
        assert_eq!(code, 2, "{verb}: {err}");
        assert!(
            err.contains("is archived") && err.contains("unarchive"),
            "{err}"
        );
    }
    // Its name stays taken until freed.
    let (code, err) = w.fail(&["create", "command", "old", "--every", "1h", "--cmd", "true"]);
    assert_eq!(code, 2);
    assert!(err.contains("--free-name"), "{err}");
    let freed = w.json(&["archive", "old", "--free-name"]);
    let id = old["id"].as_str().unwrap();
    assert_eq!(freed["name"], format!("old~{id}"));
    assert_eq!(freed["id"], old["id"]);
    w.create_cmd("old", &["--every", "1h"], "true");
    assert_eq!(w.runs(id).len(), 1, "found by id, history kept");
    let back = w.json(&["unarchive", id]);
    assert_eq!(back["status"], "paused");
    assert_eq!(
        back["nextRunAt"], old["nextRunAt"],
        "its slot kept for resume"
    );
    let resumed = w.json(&["resume", id]);
    assert_eq!(resumed["status"], "active");
    assert_eq!(w.json(&["archive", id])["status"], "archived");
    let removed = w.json(&["remove", id]);
    assert_eq!(removed["removed"], true);
}

#[test]
fn list_and_runs_filter_by_labels_statuses_and_time() {
    let w = World::new();
    w.create_cmd(
        "x",
        &["--every", "1h", "--label", "ci", "--label", "nightly"],
        "true",
    );
    w.create_cmd("y", &["--every", "1h", "--label", "ci"], "false");
    w.create_cmd("z", &["--every", "1h"], "false");
    for lp in ["x", "y", "z"] {
        w.run(&["run-now", lp]);
    }
    assert_eq!(names(&w.json(&["list", "--label", "ci"])), ["x", "y"]);
    assert_eq!(
        names(&w.json(&["list", "--label", "nightly", "--label", "ci"])),
        ["x"]
    );
    assert!(names(&w.json(&["list", "--label", "none"])).is_empty());
    let listed = w.ok(&["list", "--label", "nightly"]);
    assert!(listed.contains("ci,nightly"), "{listed}");

    assert_eq!(run_loops(&w.json(&["runs", "--label", "ci"])), ["y", "x"]);
    assert_eq!(
        run_loops(&w.json(&["runs", "--status", "failed"])),
        ["z", "y"]
    );
    assert_eq!(
        run_loops(&w.json(&["runs", "--status", "failed", "--label", "ci"])),
        ["y"]
    );
    assert_eq!(
        run_loops(&w.json(&["runs", "--status", "failed", "--since", "1d"])),
        ["z", "y"]
    );
    assert_eq!(
        run_loops(&w.json(&["runs", "--status", "succeeded", "--status", "failed"])).len(),
        3
    );
    assert_eq!(
        run_loops(&w.json(&["runs", "x", "--status", "succeeded"])),
        ["x"]
    );
    assert!(run_loops(&w.json(&["runs", "x", "--status", "failed"])).is_empty());
    assert!(run_loops(&w.json(&["runs", "--until", "1h"])).is_empty());
    let tomorrow = loops::core::format_instant(&(Utc::now() + TimeDelta::days(1)));
    assert!(run_loops(&w.json(&["runs", "--since", &tomorrow])).is_empty());
    assert_eq!(
        run_loops(&w.json(&[
            "runs",
            "--until",
            &tomorrow,
            "--since",
            "2020-01-01T00:00:00Z"
        ]))
        .len(),
        3
    );
    let text = w.ok(&["runs", "--status", "skipped"]);
    assert_eq!(text.trim(), "no matching runs");
}

#[test]
fn bad_edits_and_filters_are_one_line_exit_2_and_write_nothing() {
    let w = World::new();
    w.create_cmd("a", &["--every", "1h", "--jitter", "30m"], "true");
    w.create_cmd("beta", &["--every", "1h"], "true");
    let before = w.json(&["list", "--all"]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["edit", "missing", "-d", "x"],
            "no loop named or with id \"missing\"",
        ),
        (
            &["edit", "a", "--label", "Bad Label"],
            "invalid label \"Bad Label\"",
        ),
        (&["edit", "a", "--unlabel", "X"], "invalid label \"X\""),
        (
            &["edit", "a", "--every", "10m"],
            "--jitter 30m must be shorter than its --every (10m)",
        ),
        (
            &["edit", "a", "--jitter", "2h"],
            "--jitter 2h must be shorter than its --every (1h)",
        ),
        (
            &["edit", "a", "--provider", "claude"],
            "--provider is for agent loops",
        ),
        (
            &["edit", "a", "--workflow", "w"],
            "--workflow is for workflow loops",
        ),
        (&["edit", "a", "--tz", "UTC"], "--tz is for --cron"),
        (
            &[
                "edit",
                "a",
                "--anchor",
                "fixed_delay",
                "--cron",
                "* * * * *",
            ],
            "--anchor is for --every",
        ),
        (
            &["edit", "a", "--at", "2020-01-01T00:00:00Z"],
            "is in the past",
        ),
        (
            &["edit", "a", "--expires-at", "2020-01-01T00:00:00Z"],
            "is in the past",
        ),
        (
            &["edit", "a", "--notify-url", "ftp://x/y"],
            "is not an http:// or https:// URL",
        ),
        (
            &["edit", "a", "--notify-on", "always"],
            "--notify-on needs --notify-cmd or --notify-url",
        ),
        (
            &["edit", "a", "--clear", "model"],
            "--clear model is not a setting of a command loop",
        ),
        (
            &["edit", "a", "--attempts", "0"],
            "--attempts must be at least 1",
        ),
        (&["edit", "a", "--cron", "61 * * * *"], "cron"),
        (
            &["edit", "a", "--catch-up", "sometimes"],
            "invalid --catch-up",
        ),
        (
            &["edit", "a", "--every", "0s"],
            "--every: invalid duration \"0s\"",
        ),
        (
            &["rename", "a", "beta"],
            "a loop named \"beta\" already exists",
        ),
        (&["rename", "a", "0123456789ab"], "looks like a loop id"),
        (&["unarchive", "a"], "is not archived"),
        (
            &["runs", "--since", "garbage"],
            "invalid --since \"garbage\"",
        ),
        (&["runs", "--until", "soon"], "invalid --until \"soon\""),
        (
            &["runs", "--since", "1h", "--until", "2h"],
            "is not before --until",
        ),
        (&["runs", "--status", "bogus"], "invalid --status \"bogus\""),
        (&["runs", "--label", "Bad"], "invalid label \"Bad\""),
        (&["list", "--label", "Bad"], "invalid label \"Bad\""),
    ];
    for (args, needle) in cases {
        let (code, err) = w.fail(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    assert_eq!(w.json(&["list", "--all"]), before, "nothing written");
}
