//! Defining and inspecting loops through the real binary.

use crate::util::World;
use std::os::unix::fs::PermissionsExt;

#[test]
fn create_list_show_json_shapes() {
    let w = World::new();
    let lp = w.json(&[
        "create",
        "command",
        "backup",
        "--every",
        "15m",
        "--cmd",
        "echo hi",
        "-d",
        "nightly",
        "--attempts",
        "3",
        "--retry-delay",
        "30s",
        "--lease",
        "10m",
        "--overlap",
        "allow",
        "--catch-up",
        "all",
        "--catch-up-limit",
        "5",
        "--env",
        "TOKEN=secret",
        "--timeout",
        "1h",
    ]);
    for key in [
        "id",
        "name",
        "status",
        "schedule",
        "target",
        "nextRunAt",
        "retryScheduledFor",
        "catchUp",
        "catchUpLimit",
        "overlap",
        "maxAttempts",
        "retryDelayMs",
        "leaseMs",
        "expiresAt",
        "createdAt",
        "updatedAt",
    ] {
        assert!(lp.get(key).is_some(), "missing {key} in {lp}");
    }
    assert_eq!(lp["name"], "backup");
    assert_eq!(lp["status"], "active");
    assert_eq!(lp["schedule"]["type"], "interval");
    assert_eq!(lp["schedule"]["everyMs"], 900_000);
    assert_eq!(lp["target"]["type"], "command");
    assert_eq!(lp["target"]["command"], "echo hi");
    assert_eq!(lp["target"]["shell"], true);
    assert_eq!(lp["target"]["timeoutMs"], 3_600_000);
    assert_eq!(lp["target"]["env"]["TOKEN"], "[redacted]");
    assert_eq!(lp["maxAttempts"], 3);
    assert_eq!(lp["retryDelayMs"], 30_000);
    assert_eq!(lp["leaseMs"], 600_000);
    assert_eq!(lp["catchUp"], "all");
    assert_eq!(lp["catchUpLimit"], 5);
    assert_eq!(lp["overlap"], "allow");
    assert!(lp["retryScheduledFor"].is_null());
    let created = lp["createdAt"].as_str().expect("createdAt");
    assert!(
        created.ends_with('Z') && created.len() == 24,
        "RFC 3339 with ms: {created}"
    );

    let list = w.json(&["list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["id"], lp["id"]);

    let shown = w.json(&["show", "backup", "--show-output"]);
    assert_eq!(shown["target"]["env"]["TOKEN"], "secret");
    let id = lp["id"].as_str().expect("id");
    assert_eq!(
        w.json(&["show", &id[..6]])["name"],
        "backup",
        "unique id prefix resolves"
    );
    assert_eq!(w.json(&["show", id])["name"], "backup");
}

#[test]
fn data_dir_and_db_permissions() {
    let w = World::new();
    w.create_cmd("a", &["--every", "1m"], "true");
    let dir_mode = std::fs::metadata(&w.data)
        .expect("dir")
        .permissions()
        .mode()
        & 0o777;
    let db_mode = std::fs::metadata(w.db_path())
        .expect("db")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert_eq!(db_mode, 0o600);
}

#[test]
fn every_schedule_kind_and_target_kind() {
    let w = World::new();
    let cron = w.json(&[
        "create",
        "command",
        "c",
        "--cron",
        "30 9 * * MON-FRI",
        "--tz",
        "Europe/Berlin",
        "--cmd",
        "true",
    ]);
    assert_eq!(cron["schedule"]["type"], "cron");
    assert_eq!(cron["schedule"]["expression"], "30 9 * * MON-FRI");
    assert_eq!(cron["schedule"]["timezone"], "Europe/Berlin");
    let next = cron["nextRunAt"].as_str().expect("next");
    // 09:30 in Berlin is 07:30Z or 08:30Z depending on DST.
    assert!(
        next.contains("T07:30:00.000Z") || next.contains("T08:30:00.000Z"),
        "{next}"
    );

    let local_cron = w.json(&[
        "create",
        "command",
        "cron2",
        "--cron",
        "0 * * * *",
        "--cmd",
        "true",
    ]);
    assert_eq!(
        local_cron["schedule"]["timezone"], "UTC",
        "defaults to the host zone (TZ=UTC here)"
    );

    let once = w.json(&["create", "command", "o", "--at", "+1h", "--cmd", "true"]);
    assert_eq!(once["schedule"]["type"], "once");
    assert_eq!(once["schedule"]["at"], once["nextRunAt"]);

    let dynamic = w.json(&["create", "command", "dyn", "--dynamic", "--cmd", "true"]);
    assert_eq!(dynamic["schedule"]["type"], "dynamic");
    assert_eq!(dynamic["schedule"]["minIntervalMs"], 60_000);

    let delay = w.json(&[
        "create",
        "command",
        "delay",
        "--every",
        "1.5h",
        "--anchor",
        "fixed_delay",
        "--cmd",
        "true",
    ]);
    assert_eq!(delay["schedule"]["anchor"], "fixed_delay");
    assert_eq!(delay["schedule"]["everyMs"], 5_400_000);

    let direct = w.json(&[
        "create",
        "command",
        "direct",
        "--every",
        "1m",
        "--no-shell",
        "--cmd",
        "git",
        "--",
        "status",
        "--short",
    ]);
    assert_eq!(direct["target"]["shell"], false);
    assert_eq!(
        direct["target"]["args"],
        serde_json::json!(["status", "--short"])
    );

    let prompt_file = w.root.path().join("prompt.md");
    std::fs::write(&prompt_file, "Review the open PRs.\n").expect("write");
    let agent = w.json(&[
        "create",
        "agent",
        "reviewer",
        "--every",
        "1h",
        "--provider",
        "claude",
        "--prompt-file",
        prompt_file.to_str().expect("utf8"),
        "--model",
        "sonnet",
    ]);
    assert_eq!(agent["target"]["type"], "agent");
    assert_eq!(agent["target"]["provider"], "claude");
    assert_eq!(agent["target"]["configIsolation"], "safe");
    assert_eq!(
        agent["target"]["promptFile"],
        prompt_file.to_str().expect("utf8")
    );
    assert!(agent["target"]["prompt"]
        .as_str()
        .expect("prompt")
        .starts_with("[redacted"));
    let revealed = w.json(&["show", "reviewer", "--show-output"]);
    assert_eq!(revealed["target"]["prompt"], "Review the open PRs.\n");

    // A workflow loop needs an active workflow of that name.
    let spec = w.root.path().join("release.json");
    let release = serde_json::json!({"name": "release", "steps": [
        {"id": "build", "target": {"type": "command", "command": "true"}}
    ]});
    std::fs::write(&spec, release.to_string()).expect("spec");
    w.json(&["workflows", "create", spec.to_str().expect("utf8")]);
    let wf = w.json(&[
        "create",
        "workflow",
        "nightly",
        "--cron",
        "0 2 * * *",
        "--workflow",
        "release",
    ]);
    assert_eq!(wf["target"]["type"], "workflow");
    assert_eq!(wf["target"]["workflow"], "release");

    assert_eq!(w.json(&["list"]).as_array().map(Vec::len), Some(8));
}

#[test]
fn lifecycle_pause_resume_stop_remove() {
    let w = World::new();
    w.create_cmd("job", &["--every", "1m"], "true");
    assert_eq!(w.json(&["pause", "job"])["status"], "paused");
    assert_eq!(
        w.json(&["list", "--status", "paused"])
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        w.json(&["list", "--status", "active"])
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    assert_eq!(w.json(&["resume", "job"])["status"], "active");
    assert_eq!(w.json(&["stop", "job"])["status"], "stopped");
    let (code, stderr) = w.fail(&["list", "--status", "bogus"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("invalid --status \"bogus\""), "{stderr}");
    assert_eq!(w.json(&["remove", "job"])["removed"], true);
    assert_eq!(w.json(&["list"]).as_array().map(Vec::len), Some(0));
}

#[test]
fn human_output_is_an_aligned_table_without_colour() {
    let w = World::new();
    w.create_cmd("alpha", &["--every", "5m"], "echo alpha");
    w.create_cmd("a-much-longer-name", &["--cron", "0 9 * * *"], "true");
    let out = w.ok(&["list"]);
    assert!(!out.contains('\x1b'), "no colour without a TTY: {out:?}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ID"), "{out}");
    let col = lines[0].find("STATUS").expect("STATUS column");
    for line in &lines[1..] {
        assert_eq!(&line[col..col + 6], "active", "aligned: {out}");
    }
    assert!(
        out.contains("(in 4m") || out.contains("(in 5m"),
        "relative next run: {out}"
    );
    let runs = w.ok(&["runs"]);
    assert!(runs.contains("no runs yet"), "{runs}");
    assert_eq!(w.json(&["runs", "--limit", "0"]), serde_json::json!([]));
}

#[test]
fn version_and_completions() {
    let w = World::new();
    let v = w.ok(&["--version"]);
    assert!(v.starts_with("loops "), "{v}");
    for shell in ["bash", "zsh", "fish"] {
        let script = w.ok(&["completions", shell]);
        assert!(
            script.contains("create"),
            "{shell} completions mention subcommands"
        );
    }
    assert!(
        !w.db_path().exists(),
        "completions/version must not create a store"
    );
}
