//! Issue #11 items 9 and 10: `loops export` / `loops import` of a bundle, and
//! `loops import --from-openloops` of an OpenLoops 0.3 database built here with its
//! schema (the DDL below is written from the reference's `migrate()`).

use crate::util::World;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn names(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|lp| lp["name"].as_str().expect("name").to_owned())
        .collect();
    out.sort();
    out
}

fn loop_names(w: &World) -> Vec<String> {
    names(&w.json(&["list"]))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A source store: a workflow with a step secret, a command loop with an env secret,
/// a webhook and labels, a workflow loop, and an unlabelled loop.
fn source_world() -> World {
    let w = World::new();
    let spec = w.root.path().join("release.json");
    std::fs::write(
        &spec,
        json!({"name": "release", "steps": [
            {"id": "build", "target": {"type": "command", "command": "make", "env": {"TOKEN": "s3cret"}}},
            {"id": "ship", "dependsOn": ["build"], "target": {"type": "command", "command": "true"}}
        ]})
        .to_string(),
    )
    .unwrap();
    w.ok(&["workflows", "create", s(&spec)]);
    w.json(&[
        "create",
        "command",
        "backup",
        "--every",
        "1h",
        "--cmd",
        "restic backup",
        "--env",
        "API_KEY=k3y",
        "--label",
        "ops",
        "--attempts",
        "3",
        "--catch-up",
        "all",
        "--notify-url",
        "https://hooks.example.com/T0KEN",
        "--jitter",
        "5s",
    ]);
    w.json(&[
        "create",
        "workflow",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--workflow",
        "release",
        "--label",
        "ops",
    ]);
    w.json(&[
        "create", "command", "scratch", "--every", "5m", "--cmd", "true",
    ]);
    w
}

fn export(w: &World, args: &[&str]) -> (Value, String) {
    let mut all = vec!["export"];
    all.extend_from_slice(args);
    let out = w.run(&all);
    assert!(
        out.status.success(),
        "export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = serde_json::from_slice(&out.stdout).expect("bundle is JSON");
    (doc, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn write_bundle(w: &World, name: &str, doc: &Value) -> PathBuf {
    let path = w.root.path().join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    path
}

#[test]
fn export_writes_a_versioned_bundle_without_secrets_unless_asked() {
    let w = source_world();
    let (doc, note) = export(&w, &[]);
    assert_eq!(doc["format"], "loops-bundle");
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["includesSecrets"], false);
    assert_eq!(names(&doc["loops"]), ["backup", "nightly", "scratch"]);
    let backup = doc["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "backup")
        .unwrap();
    // State of this store stays behind; the definition travels.
    for field in ["id", "createdAt", "updatedAt", "dueAt", "retryScheduledFor"] {
        assert!(backup.get(field).is_none(), "{field} exported: {backup}");
    }
    assert_eq!(backup["maxAttempts"], 3);
    assert_eq!(backup["jitterMs"], 5000);
    assert_eq!(backup["labels"], json!(["ops"]));
    // Secrets: left out, and named (in the bundle and on stderr).
    assert_eq!(backup["target"]["env"], json!({"API_KEY": null}));
    assert_eq!(backup["notify"]["url"], Value::Null);
    assert_eq!(
        doc["workflows"][0]["steps"][0]["target"]["env"],
        json!({"TOKEN": null})
    );
    let redacted: Vec<&str> = doc["redacted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        redacted,
        [
            "target.env.API_KEY",
            "notify.url",
            "steps.build.target.env.TOKEN"
        ]
    );
    assert!(!doc.to_string().contains("k3y"), "{doc}");
    assert!(!doc.to_string().contains("T0KEN"), "{doc}");
    assert!(!doc.to_string().contains("s3cret"), "{doc}");
    assert!(
        note.contains("3 secret(s) left out") && note.contains("target.env.API_KEY"),
        "{note}"
    );

    // --include-secrets: everything, nothing named.
    let (full, note) = export(&w, &["--include-secrets"]);
    assert_eq!(full["includesSecrets"], true);
    assert_eq!(full["redacted"], json!([]));
    assert!(full.to_string().contains("k3y") && full.to_string().contains("s3cret"));
    assert!(note.is_empty(), "{note}");

    // --label: only those loops, and only the workflow specs they run.
    let (ops, _) = export(&w, &["--label", "ops"]);
    assert_eq!(names(&ops["loops"]), ["backup", "nightly"]);
    assert_eq!(ops["workflows"].as_array().unwrap().len(), 1);
    let (none, _) = export(&w, &["--label", "nobody"]);
    assert_eq!(none["loops"], json!([]));
    assert_eq!(none["workflows"], json!([]));
    let (code, err) = w.fail(&["export", "--label", "Not A Label"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid label \"Not A Label\""), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn import_previews_then_applies_in_one_go_and_names_conflicts() {
    let src = source_world();
    let (doc, _) = export(&src, &["--include-secrets"]);
    let w = World::new();
    let bundle = write_bundle(&w, "bundle.json", &doc);

    // The preview writes nothing.
    let preview = w.json(&["import", s(&bundle)]);
    assert_eq!(preview["applied"], false);
    let actions: Vec<(String, String)> = preview["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_owned(),
                l["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("backup".to_owned(), "create".to_owned()),
            ("nightly".to_owned(), "create".to_owned()),
            ("scratch".to_owned(), "create".to_owned())
        ]
    );
    assert_eq!(preview["workflows"][0]["action"], "create");
    let text = w.ok(&["import", s(&bundle)]);
    assert!(
        text.contains("would import 3 loop(s), 1 workflow(s)"),
        "{text}"
    );
    assert!(loop_names(&w).is_empty(), "a preview wrote loops");
    assert_eq!(w.json(&["workflows", "list"]), json!([]));

    // --apply: everything, as defined at the source.
    let applied = w.json(&["import", s(&bundle), "--apply"]);
    assert_eq!(applied["applied"], true);
    assert_eq!(loop_names(&w), ["backup", "nightly", "scratch"]);
    let here = w.json(&["show", "backup", "--show-output"]);
    let there = src.json(&["show", "backup", "--show-output"]);
    for field in [
        "schedule",
        "target",
        "nextRunAt",
        "maxAttempts",
        "catchUp",
        "jitterMs",
        "labels",
        "status",
    ] {
        assert_eq!(here[field], there[field], "{field}");
    }
    assert_ne!(here["id"], there["id"], "a new id here");
    assert_eq!(here["target"]["env"]["API_KEY"], "k3y");
    let nightly = w.json(&["show", "nightly"]);
    assert_eq!(nightly["schedule"]["timezone"], "Europe/Berlin");
    assert_eq!(nightly["target"]["workflow"], "release");
    let specs = w.json(&["workflows", "list"]);
    assert_eq!(specs[0]["name"], "release");
    // Exported again from here: the same definitions (step secrets included).
    let (back, _) = export(&w, &["--include-secrets"]);
    assert_eq!(back["workflows"], doc["workflows"]);
    assert_eq!(back["loops"], doc["loops"]);

    // Again: every loop conflicts; the preview says so and exits 1, --apply refuses
    // with the conflicts named and writes nothing.
    let out = w.run(&["import", s(&bundle)]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("conflict"), "{text}");
    assert!(text.contains("--apply would refuse this import"), "{text}");
    let (code, err) = w.fail(&["import", s(&bundle), "--apply"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("import refused, nothing written")
            && err.contains("loop \"backup\": a loop with this name exists")
            && err.contains("loop \"scratch\": a loop with this name exists"),
        "{err}"
    );
    // The workflow is the same spec: not a conflict, it is used.
    assert!(!err.contains("workflow \"release\""), "{err}");
    assert_eq!(loop_names(&w), ["backup", "nightly", "scratch"]);

    // skip keeps the ones here; rename imports beside them.
    let skipped = w.json(&["import", s(&bundle), "--apply", "--on-conflict", "skip"]);
    assert!(skipped["loops"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["action"] == "skip"));
    assert_eq!(loop_names(&w).len(), 3);
    let renamed = w.json(&["import", s(&bundle), "--apply", "--on-conflict", "rename"]);
    assert_eq!(renamed["loops"][0]["as"], "backup-2");
    assert_eq!(
        loop_names(&w),
        [
            "backup",
            "backup-2",
            "nightly",
            "nightly-2",
            "scratch",
            "scratch-2"
        ]
    );
    let (code, err) = w.fail(&["import", s(&bundle), "--on-conflict", "merge"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid --on-conflict \"merge\""), "{err}");
}

#[test]
fn a_bundle_without_its_secrets_is_refused_until_they_are_filled_in_or_dropped() {
    let src = source_world();
    let (doc, _) = export(&src, &["--label", "ops"]);
    let w = World::new();
    let bundle = write_bundle(&w, "redacted.json", &doc);
    let (code, err) = w.fail(&["import", s(&bundle), "--apply"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("3 secret(s) left out of the bundle need a value")
            && err.contains("loop \"backup\": target.env.API_KEY")
            && err.contains("--drop-redacted"),
        "{err}"
    );
    assert!(loop_names(&w).is_empty());
    // Filled in by hand: imported with the values given.
    let mut filled = doc.clone();
    filled["loops"][0]["target"]["env"]["API_KEY"] = json!("new-key");
    filled["loops"][0]["notify"]["url"] = json!("https://hooks.example.com/NEW");
    filled["workflows"][0]["steps"][0]["target"]["env"]["TOKEN"] = json!("tok");
    let filled = write_bundle(&w, "filled.json", &filled);
    w.json(&["import", s(&filled), "--apply"]);
    let backup = w.json(&["show", "backup", "--show-output"]);
    assert_eq!(backup["target"]["env"]["API_KEY"], "new-key");
    // Or dropped: imported without those variables, paused on request.
    let w2 = World::new();
    let report = w2.json(&[
        "import",
        s(&bundle),
        "--apply",
        "--drop-redacted",
        "--paused",
    ]);
    assert_eq!(report["applied"], true);
    let backup = w2.json(&["show", "backup", "--show-output"]);
    assert!(backup["target"].get("env").is_none(), "{backup}");
    assert!(backup.get("notify").is_none(), "{backup}");
    assert_eq!(backup["status"], "paused");
}

#[test]
fn bad_bundles_are_refused_with_one_line_and_nothing_written() {
    let src = source_world();
    let (doc, _) = export(&src, &["--include-secrets"]);
    let w = World::new();
    w.create_cmd("existing", &["--every", "1h"], "true");
    let mut newer = doc.clone();
    newer["version"] = json!(3);
    let mut bad_loop = doc.clone();
    bad_loop["loops"][2]["schedule"] =
        json!({"type": "interval", "everyMs": 0, "anchor": "fixed_rate"});
    let mut unknown_field = doc.clone();
    unknown_field["loops"][0]["colour"] = json!("red");
    let mut bad_label = doc.clone();
    bad_label["loops"][0]["labels"] = json!(["Not Ok"]);
    let text_file = w.root.path().join("notes.txt");
    std::fs::write(&text_file, "hello\n").unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            write_bundle(&w, "v3.json", &newer),
            "unsupported bundle version 3 (this loops reads versions 1 to 2)",
        ),
        (
            write_bundle(
                &w,
                "other.json",
                &json!({"format": "something-else", "version": 1}),
            ),
            "not a loops bundle: \"format\" is \"something-else\"",
        ),
        (text_file, "not a loops bundle: not JSON"),
        (
            write_bundle(&w, "colour.json", &unknown_field),
            "loops[0] (\"backup\"): unknown field \"colour\"",
        ),
        (write_bundle(&w, "zero.json", &bad_loop), "loop \"scratch\""),
        (
            write_bundle(&w, "label.json", &bad_label),
            "invalid label \"Not Ok\"",
        ),
        (w.root.path().join("missing.json"), "cannot read"),
    ];
    for (path, needle) in cases {
        for apply in [false, true] {
            let mut args = vec!["import", s(&path)];
            if apply {
                args.push("--apply");
            }
            let out = w.run(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_ne!(out.status.code(), Some(0), "{path:?} accepted");
            if out.status.code() == Some(2) {
                assert!(err.contains(needle), "{path:?}: {err}");
                assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
            } else {
                // A preview that --apply would refuse: exit 1, the reason in the report.
                assert!(!apply, "{path:?}: {err}");
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(text.contains(needle), "{path:?}: {text}");
            }
            assert_eq!(loop_names(&w), ["existing"], "{path:?} wrote something");
        }
    }
    assert_eq!(w.json(&["workflows", "list"]), json!([]));
}

// ---------------------------------------------------------------------------------
// OpenLoops 0.3 databases.
// ---------------------------------------------------------------------------------

/// The OpenLoops 0.3 schema (its `Store.migrate()`): instants are ISO-8601 text,
/// schedules and targets JSON text in the loop row.
const OPENLOOPS_DDL: &str = "
CREATE TABLE schema_migrations (id TEXT PRIMARY KEY, applied_at TEXT NOT NULL);
CREATE TABLE loops (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT,
  status TEXT NOT NULL,
  schedule_json TEXT NOT NULL,
  target_json TEXT NOT NULL,
  next_run_at TEXT,
  retry_scheduled_for TEXT,
  catch_up TEXT NOT NULL,
  catch_up_limit INTEGER NOT NULL,
  overlap TEXT NOT NULL,
  max_attempts INTEGER NOT NULL,
  retry_delay_ms INTEGER NOT NULL,
  lease_ms INTEGER NOT NULL,
  expires_at TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX idx_loops_due ON loops(status, next_run_at);
CREATE TABLE loop_runs (
  id TEXT PRIMARY KEY,
  loop_id TEXT NOT NULL REFERENCES loops(id) ON DELETE CASCADE,
  loop_name TEXT NOT NULL,
  scheduled_for TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT,
  finished_at TEXT,
  claimed_by TEXT,
  lease_expires_at TEXT,
  pid INTEGER,
  exit_code INTEGER,
  duration_ms INTEGER,
  stdout TEXT,
  stderr TEXT,
  error TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  UNIQUE(loop_id, scheduled_for)
);
CREATE TABLE daemon_lease (
  id TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  pid INTEGER,
  heartbeat_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE TABLE workflow_specs (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT,
  version INTEGER NOT NULL,
  status TEXT NOT NULL,
  steps_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX idx_workflows_status_name ON workflow_specs(status, name);
CREATE UNIQUE INDEX idx_workflows_name_active ON workflow_specs(name) WHERE status = 'active';
CREATE TABLE workflow_runs (
  id TEXT PRIMARY KEY,
  workflow_id TEXT NOT NULL REFERENCES workflow_specs(id) ON DELETE CASCADE,
  workflow_name TEXT NOT NULL,
  loop_id TEXT REFERENCES loops(id) ON DELETE SET NULL,
  loop_run_id TEXT REFERENCES loop_runs(id) ON DELETE SET NULL,
  scheduled_for TEXT,
  idempotency_key TEXT,
  status TEXT NOT NULL,
  started_at TEXT,
  finished_at TEXT,
  duration_ms INTEGER,
  error TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE TABLE workflow_step_runs (
  id TEXT PRIMARY KEY,
  workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
  step_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT,
  finished_at TEXT,
  exit_code INTEGER,
  pid INTEGER,
  duration_ms INTEGER,
  stdout TEXT,
  stderr TEXT,
  error TEXT,
  account_profile TEXT,
  account_tool TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  UNIQUE(workflow_run_id, step_id)
);
CREATE TABLE workflow_events (
  id TEXT PRIMARY KEY,
  workflow_run_id TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
  sequence INTEGER NOT NULL,
  event_type TEXT NOT NULL,
  step_id TEXT,
  payload_json TEXT,
  created_at TEXT NOT NULL,
  UNIQUE(workflow_run_id, sequence)
);
INSERT INTO schema_migrations VALUES ('0001_initial_and_workflows', '2026-11-01T00:00:00.000Z');
";

/// The refusal `loops import --apply` gives a bundle whose loop "train" requires the
/// runner label gpu, on a SQLite store.
const RUNNER_LABELS_REFUSED: &str = "error: import refused, nothing written: 1 loop(s) need runner labels, which a store without runners (SQLite) cannot honour (loop \"train\" on gpu): import into a PostgreSQL store (--store postgres://…), or pass --drop-runner-labels to import them without their runner labels";

#[test]
fn runner_labels_travel_to_postgres_and_are_refused_on_sqlite_unless_dropped() {
    let Some((src, _)) = crate::several_hosts::pg_world() else {
        return;
    };
    src.json(&[
        "create", "command", "train", "--every", "1h", "--cmd", "true", "--on", "gpu",
    ]);
    src.create_cmd("plain", &["--every", "1h"], "true");
    let (doc, _) = export(&src, &[]);
    let entry = |name: &str| -> Value {
        doc["loops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} exported: {doc}"))
    };
    assert_eq!(entry("train")["runsOn"], json!(["gpu"]));
    assert!(entry("plain").get("runsOn").is_none(), "{doc}");

    // Into a fresh PostgreSQL database: the labels are kept.
    let (pg, _) = crate::several_hosts::pg_world().unwrap();
    let bundle = write_bundle(&pg, "gpu.json", &doc);
    let report = pg.json(&["import", s(&bundle), "--apply"]);
    assert_eq!(report["applied"], true, "{report}");
    assert_eq!(report["runnerLabels"], json!([]), "{report}");
    assert_eq!(pg.json(&["show", "train"])["runsOn"], json!(["gpu"]));
    assert!(pg.json(&["show", "plain"]).get("runsOn").is_none());

    // Into SQLite: the preview names them and exits 1, --apply is refused, nothing written.
    let lite = World::new();
    let bundle = write_bundle(&lite, "gpu.json", &doc);
    let preview = lite.run(&["import", s(&bundle)]);
    let text = String::from_utf8_lossy(&preview.stdout);
    assert_eq!(preview.status.code(), Some(1), "{text}");
    assert!(
        text.contains("runner labels this store has no runners for:\n  loop \"train\" on gpu\n")
            && text.contains("--apply would refuse this import")
            && text.contains("--drop-runner-labels"),
        "{text}"
    );
    let (code, err) = lite.fail(&["import", s(&bundle), "--apply"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim_end(), RUNNER_LABELS_REFUSED);
    assert!(loop_names(&lite).is_empty());

    // With --drop-runner-labels: the preview says so, and they are imported without.
    let preview = lite.ok(&["import", s(&bundle), "--drop-runner-labels"]);
    assert!(
        preview
            .contains("runner labels dropped (--drop-runner-labels):\n  loop \"train\" on gpu\n"),
        "{preview}"
    );
    let report = lite.json(&["import", s(&bundle), "--apply", "--drop-runner-labels"]);
    assert_eq!(report["applied"], true, "{report}");
    assert_eq!(report["runnerLabelsDropped"], true, "{report}");
    assert_eq!(
        report["runnerLabels"],
        json!([{"loop": "train", "runsOn": ["gpu"]}])
    );
    assert_eq!(loop_names(&lite), ["plain", "train"]);
    let train = lite.json(&["show", "train"]);
    assert!(train.get("runsOn").is_none(), "{train}");
}

fn iso(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

struct OlLoop<'a> {
    id: &'a str,
    name: &'a str,
    status: &'a str,
    schedule: Value,
    target: Value,
    next_run_at: Option<String>,
    retry: Option<String>,
    catch_up: &'a str,
    max_attempts: i64,
}

/// An OpenLoops 0.3 database with a command loop (with history), an agent loop with
/// an account (paused, no timeout: OpenLoops' 30-minute default), a cron loop, a
/// workflow loop naming its spec by id, a loop 0.3 would not accept (a command with
/// spaces and no shell, from 0.2), an active and an archived spec version, and a
/// workflow run.
fn openloops_fixture(dir: &Path) -> (PathBuf, chrono::DateTime<chrono::Utc>) {
    let path = dir.join("openloops").join("loops.db");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(OPENLOOPS_DDL).unwrap();
    let now = chrono::Utc::now();
    let created = iso(now - chrono::TimeDelta::days(30));
    let ahead = iso(now + chrono::TimeDelta::minutes(10));
    let loops = [
        OlLoop {
            id: "ol-backup",
            name: "backup",
            status: "active",
            schedule: json!({"type": "interval", "everyMs": 900000, "anchor": "fixed_rate"}),
            target: json!({"type": "command", "command": "restic backup", "shell": true,
                           "env": {"RESTIC_REPO": "/srv/r"}, "timeoutMs": 600000}),
            next_run_at: Some(ahead.clone()),
            retry: None,
            catch_up: "all",
            max_attempts: 3,
        },
        OlLoop {
            id: "ol-review",
            name: "review",
            status: "paused",
            schedule: json!({"type": "interval", "everyMs": 3600000}),
            target: json!({"type": "agent", "provider": "claude", "prompt": "Review the latest commit.",
                           "model": "sonnet", "account": {"profile": "work", "tool": "claude"}}),
            next_run_at: Some(ahead.clone()),
            retry: Some(iso(now - chrono::TimeDelta::hours(1))),
            catch_up: "latest",
            max_attempts: 1,
        },
        OlLoop {
            id: "ol-nightly",
            name: "nightly",
            status: "active",
            schedule: json!({"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Berlin"}),
            target: json!({"type": "command", "command": "/usr/bin/true", "timeoutMs": 60000}),
            next_run_at: Some(iso(now + chrono::TimeDelta::hours(5))),
            retry: None,
            catch_up: "latest",
            max_attempts: 1,
        },
        OlLoop {
            id: "ol-ship",
            name: "ship",
            status: "active",
            schedule: json!({"type": "interval", "everyMs": 86400000, "anchor": "fixed_delay"}),
            target: json!({"type": "workflow", "workflowId": "wf-release-2", "timeoutMs": 7200000}),
            next_run_at: Some(ahead.clone()),
            retry: None,
            catch_up: "none",
            max_attempts: 2,
        },
        OlLoop {
            id: "ol-legacy",
            name: "legacy",
            status: "active",
            schedule: json!({"type": "interval", "everyMs": 60000, "anchor": "fixed_rate"}),
            target: json!({"type": "command", "command": "echo hi there", "timeoutMs": 1000}),
            next_run_at: Some(ahead),
            retry: None,
            catch_up: "latest",
            max_attempts: 1,
        },
    ];
    for lp in &loops {
        conn.execute(
            "INSERT INTO loops VALUES (?1, ?2, NULL, ?3, ?4, ?5, ?6, ?7, ?8, 10, 'skip', ?9, 60000, 1800000, NULL, ?10, ?10)",
            rusqlite::params![
                lp.id,
                lp.name,
                lp.status,
                lp.schedule.to_string(),
                lp.target.to_string(),
                lp.next_run_at,
                lp.retry,
                lp.catch_up,
                lp.max_attempts,
                created,
            ],
        )
        .unwrap();
    }
    let steps = |cmd: &str| {
        json!([
            {"id": "build", "target": {"type": "command", "command": cmd}},
            {"id": "notes", "dependsOn": ["build"], "target": {"type": "agent", "provider": "codex", "prompt": "Write release notes."}}
        ])
        .to_string()
    };
    conn.execute(
        "INSERT INTO workflow_specs VALUES ('wf-release-1', 'release', NULL, 1, 'archived', ?1, ?2, ?2)",
        rusqlite::params![steps("make"), created],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO workflow_specs VALUES ('wf-release-2', 'release', 'Build and ship', 2, 'active', ?1, ?2, ?2)",
        rusqlite::params![steps("/usr/bin/make"), created],
    )
    .unwrap();
    // The backup loop's history: a success, a failure, and a run still in flight.
    let slot = |h: i64| iso(now - chrono::TimeDelta::hours(h));
    for (id, h, status, exit, stdout, error) in [
        (
            "r1",
            3,
            "succeeded",
            Some(0),
            Some("snapshot 1 saved\n"),
            None,
        ),
        (
            "r2",
            2,
            "failed",
            Some(3),
            Some(""),
            Some("exited with status 3"),
        ),
        ("r3", 1, "running", None, None, None),
    ] {
        conn.execute(
            "INSERT INTO loop_runs VALUES (?1, 'ol-backup', 'backup', ?2, 1, ?3, ?2, ?4, 'host:1', NULL, NULL, ?5, 1500, ?6, '', ?7, ?2, ?2)",
            rusqlite::params![
                id,
                slot(h),
                status,
                (status != "running").then(|| slot(h)),
                exit,
                stdout,
                error
            ],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO workflow_runs VALUES ('wr1', 'wf-release-2', 'release', 'ol-ship', NULL, ?1, NULL, 'succeeded', ?1, ?1, 10, NULL, ?1, ?1)",
        [slot(5)],
    )
    .unwrap();
    (path, now)
}

#[test]
fn import_from_openloops_maps_loops_specs_and_history_and_reports_the_rest() {
    let w = World::new();
    let (db, _) = openloops_fixture(w.root.path());
    let before = std::fs::read(&db).unwrap();

    // The preview: what each loop becomes, what is not mapped; nothing written.
    let preview = w.json(&["import", "--from-openloops", s(&db), "--with-history"]);
    assert_eq!(preview["applied"], false);
    let not_mapped: Vec<String> = preview["notMapped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect();
    let has = |needle: &str| not_mapped.iter().any(|l| l.contains(needle));
    assert!(
        has("1 archived workflow spec version(s) not imported"),
        "{not_mapped:?}"
    );
    assert!(has("loop \"review\": no timeout there means OpenLoops' default; imported with timeoutMs 1800000"), "{not_mapped:?}");
    assert!(
        has("loop \"review\": its pending retry of slot"),
        "{not_mapped:?}"
    );
    assert!(has("1 running run(s) not imported"), "{not_mapped:?}");
    assert!(has("1 workflow run(s) not imported"), "{not_mapped:?}");
    assert!(
        has("loop \"legacy\": not imported:") && has("put flags in args or set shell true"),
        "{not_mapped:?}"
    );
    assert_eq!(preview["runs"], 2);
    let text = w.ok(&["import", "--from-openloops", s(&db), "--with-history"]);
    assert!(text.contains("not mapped:"), "{text}");
    assert!(
        text.contains("would import 4 loop(s), 1 workflow(s), 2 run(s)"),
        "{text}"
    );
    assert!(loop_names(&w).is_empty(), "a preview wrote loops");

    // Applied: loops with their schedule, target, policies, status and next run.
    let applied = w.json(&[
        "import",
        "--from-openloops",
        s(&db),
        "--with-history",
        "--apply",
    ]);
    assert_eq!(applied["applied"], true);
    assert_eq!(applied["runs"], 2);
    assert_eq!(loop_names(&w), ["backup", "nightly", "review", "ship"]);
    let show = |name: &str| w.json(&["show", name, "--show-output"]);
    let backup = show("backup");
    assert_eq!(backup["status"], "active");
    assert_eq!(
        backup["schedule"],
        json!({"type": "interval", "everyMs": 900000, "anchor": "fixed_rate"})
    );
    assert_eq!(backup["target"]["command"], "restic backup");
    assert_eq!(backup["target"]["env"]["RESTIC_REPO"], "/srv/r");
    assert_eq!(backup["target"]["timeoutMs"], 600000);
    assert_eq!(
        (&backup["maxAttempts"], &backup["catchUp"]),
        (&json!(3), &json!("all"))
    );
    let fixture_next = preview["loops"][0]["nextRunAt"].clone();
    assert_eq!(backup["nextRunAt"], fixture_next);
    let review = show("review");
    assert_eq!(review["status"], "paused");
    assert_eq!(review["target"]["provider"], "claude");
    assert_eq!(
        review["target"]["account"],
        json!({"profile": "work", "tool": "claude"})
    );
    assert_eq!(review["target"]["timeoutMs"], 1800000);
    assert_eq!(review["retryScheduledFor"], Value::Null);
    let nightly = show("nightly");
    assert_eq!(
        nightly["schedule"],
        json!({"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Berlin"})
    );
    let ship = show("ship");
    assert_eq!(ship["target"]["workflow"], "release");
    assert_eq!(ship["schedule"]["anchor"], "fixed_delay");
    assert_eq!(ship["catchUp"], "none");
    let specs = w.json(&["workflows", "list"]);
    assert_eq!(specs.as_array().unwrap().len(), 1);
    assert_eq!(specs[0]["name"], "release");
    assert_eq!(specs[0]["description"], "Build and ship");
    assert_eq!(specs[0]["steps"][0]["target"]["command"], "/usr/bin/make");
    // History: the finished runs, oldest first as recorded, output kept.
    let runs = w.runs("backup");
    let statuses: Vec<&str> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["failed", "succeeded"]);
    assert_eq!(runs[0]["exitCode"], 3);
    assert_eq!(runs[0]["error"], "exited with status 3");
    let full = w.json(&["runs", "backup", "--show-output"]);
    assert_eq!(full[1]["stdout"], "snapshot 1 saved\n");
    assert!(w.runs("review").is_empty());
    // The OpenLoops file was only read.
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the OpenLoops database changed"
    );

    // A second import conflicts on every loop; nothing written.
    let (code, err) = w.fail(&["import", "--from-openloops", s(&db), "--apply"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("loop \"backup\": a loop with this name exists"),
        "{err}"
    );
    assert_eq!(w.runs("backup").len(), 2);

    // Without --with-history no runs come along.
    let w2 = World::new();
    let report = w2.json(&["import", "--from-openloops", s(&db), "--apply"]);
    assert_eq!(report["runs"], 0);
    assert!(w2.runs("backup").is_empty());
    let (code, err) = w2.fail(&["import", "bundle.json", "--with-history"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn a_file_that_is_not_an_openloops_database_is_refused_clearly() {
    let w = World::new();
    let dir = w.root.path();
    let text = dir.join("notes.txt");
    std::fs::write(&text, "SQLite format 2? no, just text\n").unwrap();
    let empty = dir.join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let other = dir.join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE loops (id TEXT); CREATE TABLE notes (body TEXT);")
        .unwrap();
    // A loops database of our own.
    let ours = World::new();
    ours.create_cmd("mine", &["--every", "1h"], "true");
    let cases: Vec<(PathBuf, &str)> = vec![
        (text, "not an OpenLoops database (not a SQLite database)"),
        (empty, "not an OpenLoops database (an empty file)"),
        (
            other,
            "not an OpenLoops database (no loop_runs, workflow_specs tables)",
        ),
        (ours.db_path(), "a loops database, not an OpenLoops one"),
        (dir.join("nowhere.db"), "cannot read it"),
        // A directory (as ~/.openloops): which file to name.
        (
            dir.to_path_buf(),
            "a directory: name the OpenLoops database in it",
        ),
    ];
    for (path, needle) in cases {
        let (code, err) = w.fail(&["import", "--from-openloops", s(&path), "--apply"]);
        assert_eq!(code, 2, "{path:?}: {err}");
        assert!(err.contains(needle), "{path:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    assert!(loop_names(&w).is_empty());
    assert!(
        !dir.join("nowhere.db").exists(),
        "a missing file was created"
    );
}

/// Version 1 bundles meant failure + recovery by `notify.on: "always"`: imported, such
/// a loop notifies as `changes`; a version-2 `always` (every finished slot) stays
/// (issue #19).
#[test]
fn a_version_1_bundles_always_imports_as_changes() {
    let src = World::new();
    src.ok(&[
        "create",
        "command",
        "hooked",
        "--every",
        "1h",
        "--cmd",
        "true",
        "--notify-cmd",
        "true",
        "--notify-on",
        "always",
    ]);
    let (mut doc, _) = export(&src, &[]);
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["loops"][0]["notify"]["on"], "always");
    let current = World::new();
    current.ok(&[
        "import",
        s(&write_bundle(&current, "v2.json", &doc)),
        "--apply",
    ]);
    assert_eq!(current.json(&["show", "hooked"])["notify"]["on"], "always");
    doc["version"] = json!(1);
    let old = World::new();
    old.ok(&["import", s(&write_bundle(&old, "v1.json", &doc)), "--apply"]);
    assert_eq!(old.json(&["show", "hooked"])["notify"]["on"], "changes");
}
