//! Every rejected input: one clear line on stderr, exit 2 (3 for an unusable store),
//! and nothing written.

use crate::util::World;

/// Asserts a failure with exit code `code` whose single stderr line is `expected`.
fn rejects(w: &World, args: &[&str], code: i32, expected: &str) {
    let (got, stderr) = w.fail(args);
    assert_eq!(got, code, "exit code for {args:?}; stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.first().is_some_and(|l| l.contains(expected)),
        "stderr for {args:?} should contain {expected:?}, got:\n{stderr}"
    );
}

fn create(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec!["create", "command", "job", "--cmd", "true"];
    args.extend_from_slice(extra);
    args
}

fn assert_no_loops(w: &World) {
    if w.db_path().exists() {
        let list = w.json(&["list"]);
        assert_eq!(
            list.as_array().map(Vec::len),
            Some(0),
            "nothing may be written: {list}"
        );
    }
}

#[test]
fn bad_cron_expressions() {
    let w = World::new();
    for (expr, needle) in [
        ("*/0 * * * *", "invalid cron expression \"*/0 * * * *\""),
        ("61 * * * *", "invalid cron expression \"61 * * * *\""),
        (
            "* * * *",
            "invalid cron expression \"* * * *\": expected 5 fields",
        ),
        (
            "0 * * * * *",
            "invalid cron expression \"0 * * * * *\": expected 5 fields",
        ),
    ] {
        rejects(&w, &create(&["--cron", expr]), 2, needle);
    }
    assert_no_loops(&w);
}

#[test]
fn bad_time_zone() {
    let w = World::new();
    rejects(
        &w,
        &create(&["--cron", "0 * * * *", "--tz", "Mars/Olympus"]),
        2,
        "error: unknown time zone \"Mars/Olympus\"",
    );
    assert_no_loops(&w);
}

#[test]
fn bad_durations() {
    let w = World::new();
    rejects(
        &w,
        &create(&["--every", "0s"]),
        2,
        "error: --every: invalid duration \"0s\": must be greater than zero",
    );
    rejects(
        &w,
        &create(&["--every", "-5m"]),
        2,
        "error: --every: invalid duration \"-5m\": must be greater than zero",
    );
    rejects(
        &w,
        &create(&["--every", "abc"]),
        2,
        "error: --every: invalid duration \"abc\": expected a number and a unit",
    );
    rejects(
        &w,
        &create(&["--every", "1m", "--timeout", "abc"]),
        2,
        "error: --timeout: invalid duration \"abc\"",
    );
    assert_no_loops(&w);
}

#[test]
fn bad_at() {
    let w = World::new();
    rejects(
        &w,
        &create(&["--at", "not-a-date"]),
        2,
        "error: invalid --at \"not-a-date\"",
    );
    rejects(
        &w,
        &create(&["--at", "2020-01-01T00:00:00Z"]),
        2,
        "error: --at 2020-01-01T00:00:00.000Z is in the past; use `loops run-now` to run immediately",
    );
    assert_no_loops(&w);
}

#[test]
fn schedule_flags_exactly_one() {
    let w = World::new();
    rejects(
        &w,
        &create(&["--every", "1m", "--cron", "* * * * *"]),
        2,
        "cannot be used with",
    );
    rejects(
        &w,
        &create(&[]),
        2,
        "the following required arguments were not provided",
    );
    assert_no_loops(&w);
}

#[test]
fn bad_agent_definitions() {
    let w = World::new();
    rejects(
        &w,
        &["create", "agent", "a", "--every", "1m", "--provider", "gpt", "--prompt", "hi"],
        2,
        "error: invalid --provider \"gpt\": expected one of claude, cursor, codewith, aicopilot, opencode, codex",
    );
    rejects(
        &w,
        &[
            "create",
            "agent",
            "a",
            "--every",
            "1m",
            "--provider",
            "claude",
            "--prompt",
            "  ",
        ],
        2,
        "error: prompt is empty",
    );
    assert_no_loops(&w);
}

#[test]
fn duplicate_name() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1m"], "true");
    rejects(
        &w,
        &create(&["--every", "5m"]),
        2,
        "error: a loop named \"job\" already exists",
    );
    assert_eq!(w.json(&["list"]).as_array().map(Vec::len), Some(1));
}

#[test]
fn no_shell_command_with_spaces() {
    let w = World::new();
    rejects(
        &w,
        &[
            "create",
            "command",
            "x",
            "--every",
            "1m",
            "--no-shell",
            "--cmd",
            "git status",
        ],
        2,
        "error: --cmd \"git status\" contains spaces but --no-shell executes it directly",
    );
    assert_no_loops(&w);
}

#[test]
fn unknown_and_ambiguous_loops() {
    let w = World::new();
    rejects(
        &w,
        &["show", "nope"],
        2,
        "error: no loop named or with id \"nope\"",
    );
    // Create loops until two ids share a first hex digit, then use that digit.
    let mut ids: Vec<String> = Vec::new();
    let prefix = loop {
        let lp = w.create_cmd(&format!("job{}", ids.len()), &["--every", "1m"], "true");
        let id = lp["id"].as_str().expect("id").to_owned();
        if let Some(other) = ids.iter().find(|o| o[..1] == id[..1]) {
            let _ = other;
            break id[..1].to_owned();
        }
        ids.push(id);
    };
    rejects(
        &w,
        &["show", &prefix],
        2,
        &format!("error: ambiguous loop \"{prefix}\": matches "),
    );
    for cmd in ["pause", "resume", "stop", "remove"] {
        rejects(
            &w,
            &[cmd, "missing"],
            2,
            "error: no loop named or with id \"missing\"",
        );
    }
}

#[test]
fn corrupt_database_is_left_untouched() {
    let w = World::new();
    std::fs::create_dir_all(&w.data).expect("mkdir");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::write(w.db_path(), &garbage).expect("write");
    for args in [
        &["list"][..],
        &["create", "command", "x", "--every", "1m", "--cmd", "true"][..],
    ] {
        let (code, stderr) = w.fail(args);
        assert_eq!(code, 3, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(stderr.contains("loops.db"), "{stderr}");
        assert!(stderr.contains("not a loops database"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert_eq!(
        std::fs::read(w.db_path()).expect("read"),
        garbage,
        "file must be byte-for-byte untouched"
    );
    assert!(!w.data.join("loops.db-wal").exists());
}

/// Makes `path` read-only even for root: `chattr +i` where available (CI runs as
/// root, which ignores permission bits), else mode 0500. Returns an undo closure.
fn make_read_only(path: &std::path::Path) -> impl Fn() {
    use std::os::unix::fs::PermissionsExt;
    let immutable = std::process::Command::new("chattr")
        .arg("+i")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    if !immutable {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o500)).expect("chmod");
    }
    let path = path.to_path_buf();
    move || {
        if immutable {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&path)
                .status();
        } else {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
        }
    }
}

#[test]
fn read_only_data_dir() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    std::fs::create_dir_all(&w.data).expect("mkdir");
    // Private already: a loose mode that cannot be tightened is refused for that reason.
    std::fs::set_permissions(&w.data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let undo = make_read_only(&w.data);
    if std::fs::write(w.data.join("probe"), b"x").is_ok() {
        undo();
        eprintln!("skipped: cannot make a directory read-only here (root without chattr)");
        return;
    }
    let out = w.run(&["create", "command", "x", "--every", "1m", "--cmd", "true"]);
    undo();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("read-only"), "{stderr}");
    assert!(stderr.contains(&w.data.display().to_string()), "{stderr}");
}

/// `--max-concurrent` is at least 1: zero is refused before anything runs (it used to
/// be taken as 1 silently, in three places).
#[test]
fn max_concurrent_zero_is_refused() {
    let w = World::new();
    for args in [
        &["tick", "--max-concurrent", "0"][..],
        &["daemon", "run", "--max-concurrent", "0"][..],
        &["daemon", "start", "--max-concurrent", "0"][..],
    ] {
        let (code, stderr) = w.fail(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("--max-concurrent"), "{args:?}: {stderr}");
    }
    assert!(!w.db_path().exists(), "nothing was opened");
}
