//! `loops backup`, `loops restore`, the backup a migration makes, `prune
//! --keep-backups` (issue #23, item 1).

use crate::util::{wait_for, World};
use loops::store::Store;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The ids of the runs of `db` that finished (not `running`), read straight from the
/// file (a second reader beside the daemon: WAL lets it).
fn finished_run_ids(db: &Path) -> HashSet<String> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let mut stmt = conn
        .prepare("SELECT id FROM runs WHERE status <> 'running'")
        .unwrap();
    let ids = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<rusqlite::Result<HashSet<_>>>()
        .unwrap();
    ids
}

fn quick_check(db: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA quick_check", [], |r| r.get(0))
        .unwrap()
}

fn backups(w: &World) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(w.data.join("backups")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// `n` loops `--every 1s` running `true`, due now, written through the store (200
/// `loops create` processes would take longer than the test).
fn many_loops(w: &World, n: usize) {
    w.ok(&["list"]);
    let store = loops::sqlite::SqliteStore::open(&w.db_path()).unwrap();
    let now = chrono::Utc::now();
    for i in 0..n {
        let new = loops::core::NewLoop {
            name: format!("l{i:03}"),
            description: None,
            schedule: loops::core::Schedule::Interval {
                every_ms: 1_000,
                anchor: loops::core::Anchor::FixedRate,
            },
            target: loops::core::Target::Command(loops::core::CommandTarget {
                command: "true".to_owned(),
                args: vec![],
                cwd: None,
                shell: false,
                env: Default::default(),
                timeout: None,
                idle_timeout: None,
                account: None,
            }),
            policy: loops::core::Policy::default(),
            labels: Vec::new(),
            notify: None,
            next_run_at: Some(now),
        };
        store.create_loop(new, now).unwrap();
    }
}

#[test]
fn a_backup_under_a_busy_daemon_holds_every_run_recorded_before_it() {
    let w = World::new();
    many_loops(&w, 200);
    let mut daemon = w.daemon_ready(&["--max-concurrent", "64"]);
    let db = w.db_path();
    wait_for(
        "the daemon to record 200 runs",
        Duration::from_secs(60),
        || (finished_run_ids(&db).len() >= 200).then_some(()),
    );
    for i in 0..3 {
        let before = finished_run_ids(&db);
        let file = w.root.path().join(format!("busy-{i}.db"));
        let doc = w.json(&["backup", file.to_str().unwrap()]);
        assert_eq!(doc["path"], file.to_str().unwrap(), "{doc}");
        assert_eq!(doc["counts"]["loops"], 200, "{doc}");
        assert_eq!(
            doc["bytes"].as_u64(),
            Some(std::fs::metadata(&file).unwrap().len())
        );
        assert_eq!(quick_check(&file), "ok");
        let copied = finished_run_ids(&file);
        assert!(
            copied.len() >= before.len(),
            "the copy holds {} finished runs, {} were recorded before it began",
            copied.len(),
            before.len()
        );
        let missing: Vec<_> = before.difference(&copied).take(5).collect();
        assert!(
            missing.is_empty(),
            "runs missing from the copy: {missing:?}"
        );
        assert!(doc["counts"]["runs"].as_u64().unwrap() >= before.len() as u64);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!PathBuf::from(format!("{}-wal", file.display())).exists());
    }
    // The daemon went on recording through the backups.
    let seen = finished_run_ids(&db).len();
    wait_for("runs after the backups", Duration::from_secs(30), || {
        (finished_run_ids(&db).len() > seen).then_some(())
    });
    assert_eq!(daemon.stop(), Some(0), "{}", daemon.log_text());
}

#[test]
fn backup_writes_to_the_backups_dir_and_keeps_an_existing_file_unless_forced() {
    let w = World::new();
    w.create_cmd("one", &["--every", "1h"], "true");
    let out = w.ok(&["backup"]);
    let made = backups(&w);
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].starts_with("loops-manual-"), "{made:?}");
    assert!(out.contains(&made[0]), "{out}");
    assert!(out.contains("1 loops"), "{out}");
    assert!(out.contains("KiB"), "{out}");

    let file = w.root.path().join("mine.db");
    w.ok(&["backup", file.to_str().unwrap()]);
    let before = std::fs::read(&file).unwrap();
    w.create_cmd("two", &["--every", "1h"], "true");
    let (code, err) = w.fail(&["backup", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let doc = w.json(&["backup", file.to_str().unwrap(), "--force"]);
    assert_eq!(doc["counts"]["loops"], 2, "{doc}");

    // A directory that is not there: one line naming the file, exit 1.
    let missing = w.root.path().join("no-such-dir").join("x.db");
    let (code, err) = w.fail(&["backup", missing.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// What `list` and `runs` show, for comparing stores.
fn state(w: &World) -> (serde_json::Value, serde_json::Value) {
    (
        w.json(&["list", "--all"]),
        w.json(&["runs", "--limit", "0"]),
    )
}

#[test]
fn restore_brings_back_the_backup_and_keeps_the_store_it_replaced() {
    let w = World::new();
    w.create_cmd("one", &["--every", "1h"], "true");
    w.create_cmd("two", &["--every", "1h"], "echo b");
    w.ok(&["run-now", "one"]);
    w.ok(&["run-now", "two"]);
    let backed_up = state(&w);
    let file = w.root.path().join("snapshot.db");
    w.ok(&["backup", file.to_str().unwrap()]);

    w.ok(&["remove", "one"]);
    w.create_cmd("three", &["--every", "1h"], "true");
    w.ok(&["run-now", "three"]);
    let later = state(&w);
    assert_ne!(later, backed_up);

    let doc = w.json(&["restore", file.to_str().unwrap()]);
    assert_eq!(doc["store"]["counts"]["loops"], 2, "{doc}");
    assert_eq!(doc["store"]["counts"]["runs"], 2, "{doc}");
    let kept = PathBuf::from(doc["kept"]["path"].as_str().unwrap());
    assert!(kept
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("loops-before-restore-"));
    assert_eq!(state(&w), backed_up, "the store is the backup's");

    // Restoring the kept copy undoes the restore.
    let out = w.ok(&["restore", kept.to_str().unwrap()]);
    assert!(out.contains("restored") && out.contains("kept in"), "{out}");
    assert_eq!(state(&w), later);
}

#[test]
fn restore_is_refused_while_a_daemon_or_the_server_uses_the_store() {
    let w = World::new();
    w.create_cmd("one", &["--every", "1h"], "true");
    let file = w.root.path().join("snapshot.db");
    w.ok(&["backup", file.to_str().unwrap()]);
    w.create_cmd("two", &["--every", "1h"], "true");
    let before = state(&w);

    let mut daemon = w.daemon_ready(&[]);
    let (code, err) = w.fail(&["restore", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("daemon") && err.contains("stop"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(daemon.stop(), Some(0));
    assert_eq!(state(&w), before);
    assert!(backups(&w).is_empty(), "{:?}", backups(&w));

    let server = w.serve(&[]);
    let (code, err) = w.fail(&["restore", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("in use"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    drop(server);
    assert_eq!(state(&w), before);
    assert!(backups(&w).is_empty(), "{:?}", backups(&w));

    // Nothing holds it now.
    w.ok(&["restore", file.to_str().unwrap()]);
    assert_eq!(w.json(&["list"]).as_array().unwrap().len(), 1);
}

/// A run left to its supervisor by `daemon stop` is still in flight: restoring would
/// put in a store that does not know it, and the next daemon would end it unrecorded.
/// Restore is refused while its supervisor lives, then while its end is not recorded,
/// and goes through once `tick` recorded it.
#[test]
fn restore_is_refused_while_runs_are_in_flight_or_unrecorded() {
    let w = World::new();
    w.create_cmd("kept-job", &["--every", "1h"], "true");
    let file = w.root.path().join("snapshot.db");
    w.ok(&["backup", file.to_str().unwrap()]);
    let gate = w.root.path().join("gate");
    let cmd = format!(
        "echo started; while [ ! -e {} ]; do sleep 0.05; done; echo ended",
        gate.display()
    );
    w.create_cmd("gated-job", &["--dynamic", "1h"], &cmd);
    w.make_due("gated-job");
    let mut daemon = w.daemon_ready(&[]);
    let run = wait_for("the gated run in flight", Duration::from_secs(20), || {
        w.runs("gated-job")
            .into_iter()
            .find(|r| r["status"] == "running" && r["pid"].is_u64())
    });
    assert_eq!(daemon.stop(), Some(0));
    let supervisors = crate::util::supervisor_pids(&w.data);
    assert!(!supervisors.is_empty(), "the run's supervisor lives on");
    let before = state(&w);

    let (code, err) = w.fail(&["restore", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("in flight") && err.contains(&supervisors[0].to_string()),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(state(&w), before);
    assert!(backups(&w).is_empty(), "{:?}", backups(&w));

    // The run ends with no daemon: its supervisor writes its status file and exits,
    // but the store still says running.
    std::fs::write(&gate, b"open").unwrap();
    wait_for("the supervisor to exit", Duration::from_secs(20), || {
        crate::util::supervisor_pids(&w.data)
            .is_empty()
            .then_some(())
    });
    let (code, err) = w.fail(&["restore", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not recorded yet"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(state(&w), before);
    assert!(backups(&w).is_empty(), "{:?}", backups(&w));

    // Recorded, the store may be replaced (and the record is in the kept copy).
    w.ok(&["tick"]);
    let recorded = w
        .runs("gated-job")
        .into_iter()
        .find(|r| r["id"] == run["id"])
        .expect("the run");
    assert_eq!(recorded["status"], "succeeded", "{recorded}");
    let out = w.ok(&["restore", file.to_str().unwrap()]);
    assert!(out.contains("restored"), "{out}");
    let names: Vec<String> = w
        .json(&["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["kept-job"]);
    assert_eq!(backups(&w).len(), 1, "{:?}", backups(&w));
}

#[test]
fn restore_refuses_a_corrupt_foreign_or_newer_file_with_exit_2() {
    let w = World::new();
    w.create_cmd("one", &["--every", "1h"], "true");
    let before = state(&w);
    let refused = |file: &Path, needle: &str| {
        let (code, err) = w.fail(&["restore", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(state(&w), before);
        assert!(backups(&w).is_empty(), "{:?}", backups(&w));
        let leftovers: Vec<_> = std::fs::read_dir(&w.data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    };

    let junk = w.root.path().join("junk.db");
    std::fs::write(&junk, vec![0xA5; 8192]).unwrap();
    refused(&junk, "not a loops store");

    // A real backup with its pages past the first overwritten.
    let damaged = w.root.path().join("damaged.db");
    w.ok(&["backup", damaged.to_str().unwrap()]);
    let mut bytes = std::fs::read(&damaged).unwrap();
    let page = 4096;
    assert!(bytes.len() > page * 6);
    for b in &mut bytes[page * 2..page * 6] {
        *b = 0x5A;
    }
    std::fs::write(&damaged, &bytes).unwrap();
    refused(&damaged, "damaged");

    let newer = w.root.path().join("newer.db");
    w.ok(&["backup", newer.to_str().unwrap()]);
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'future', 'x')",
            [loops::sqlite::SCHEMA_VERSION + 1],
        )
        .unwrap();
    refused(&newer, "newer loops");

    let (code, err) = w.fail(&["restore", w.root.path().join("absent.db").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no such file"), "{err}");
}

#[test]
fn backup_and_restore_name_pg_dump_on_a_postgres_store() {
    let w = World::new();
    let url = "postgres://loops@127.0.0.1:1/nowhere";
    let (code, err) = w.fail(&["--store", url, "backup"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("pg_dump"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let (code, err) = w.fail(&["--store", url, "restore", "/nonexistent.db"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("pg_restore"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Puts the store back to the schema before migration 21 (undoing migration 21), so the next command migrates it.
fn make_older(db: &Path) {
    assert_eq!(
        loops::sqlite::SCHEMA_VERSION,
        21,
        "revert the newest migration here instead"
    );
    rusqlite::Connection::open(db)
        .unwrap()
        .execute_batch(
            "DROP TRIGGER run_counts_insert;
             DROP TRIGGER run_counts_update;
             DROP TRIGGER run_counts_delete;
             DROP TABLE run_counts;
             DELETE FROM schema_migrations WHERE version = 21;",
        )
        .unwrap();
}

#[test]
fn a_migration_backs_the_store_up_first_keeping_the_newest_three() {
    let w = World::new();
    w.create_cmd("one", &["--every", "1h"], "true");
    make_older(&w.db_path());
    assert_eq!(w.json(&["list"]).as_array().unwrap().len(), 1);
    let made = backups(&w);
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].starts_with("loops-20-"), "{made:?}");
    let first = w.data.join("backups").join(&made[0]);
    assert_eq!(quick_check(&first), "ok");
    let version: i64 = rusqlite::Connection::open(&first)
        .unwrap()
        .query_row("SELECT MAX(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, 20);

    w.ok(&["backup"]);
    for _ in 0..4 {
        make_older(&w.db_path());
        w.ok(&["list"]);
    }
    let all = backups(&w);
    let migrations: Vec<_> = all.iter().filter(|n| n.starts_with("loops-20-")).collect();
    assert_eq!(migrations.len(), 3, "{all:?}");
    assert!(!all.contains(&made[0]), "the oldest went first: {all:?}");
    assert_eq!(all.len(), 4, "the manual backup stays: {all:?}");

    let doc = w.json(&["prune", "--keep-backups", "1", "--dry-run"]);
    assert_eq!(doc["backupsMatched"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(backups(&w).len(), 4);
    let out = w.ok(&["prune", "--keep-backups", "1"]);
    assert!(out.contains("removed 2 backup(s)"), "{out}");
    let left = backups(&w);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().any(|n| n.starts_with("loops-manual-")));
    assert!(left.contains(migrations[2]), "the newest stays: {left:?}");
}

/// The event numbers of a SQLite store file, in order.
fn sqlite_event_seqs(db: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let seqs: Vec<String> = conn
        .prepare("SELECT seq FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|s| s.unwrap().to_string())
        .collect();
    seqs.join(",")
}

/// `store copy --to sqlite:PATH` (issue #23): a PostgreSQL store with loops, a
/// workflow and its run, runs and events comes back into a SQLite file with its ids,
/// instants, history and event numbers; the SQLite store then works as any other.
/// Skips without PostgreSQL installed (a failure under `CI=true`).
#[test]
fn store_copy_brings_a_postgres_store_back_to_sqlite_with_its_history() {
    let Some(cluster) = loops_testkit::PgCluster::shared() else {
        eprintln!("skipped: PostgreSQL → SQLite copy needs PostgreSQL (set CI=true to require it)");
        return;
    };
    let url = cluster.database();
    let db_name = url.rsplit('/').next().unwrap().to_owned();
    let pg = World::new();
    let on_pg = |args: &[&str]| {
        let mut all = vec!["--store", url.as_str()];
        all.extend_from_slice(args);
        pg.json(&all)
    };
    let a = on_pg(&[
        "create", "command", "copied", "--cmd", "echo hi", "--every", "1h", "--label", "team-a",
    ]);
    on_pg(&[
        "create", "command", "other", "--cmd", "true", "--every", "2h",
    ]);
    assert_eq!(on_pg(&["run-now", "copied"])["status"], "succeeded");
    assert_eq!(on_pg(&["run-now", "copied"])["status"], "succeeded");
    let spec = pg.root.path().join("wf.json");
    std::fs::write(
        &spec,
        r#"{"name":"wf","steps":[{"id":"a","target":{"type":"command","command":"echo","args":["step"]}}]}"#,
    )
    .unwrap();
    on_pg(&["workflows", "create", spec.to_str().unwrap()]);
    on_pg(&["workflows", "run", "wf"]);
    let runs_before = on_pg(&["runs", "copied"]);
    let wf_runs_before = on_pg(&["workflows", "runs"]);
    let list_before = on_pg(&["list", "--all"]);
    let pg_seqs = cluster
        .psql(
            &db_name,
            "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM events",
        )
        .trim()
        .to_owned();
    assert!(!pg_seqs.is_empty());

    let sqlite = World::new();
    let target = sqlite.db_path();
    let to = format!("sqlite:{}", target.display());
    // A dry run counts and creates nothing.
    let dry = on_pg(&["store", "copy", "--to", &to, "--dry-run"]);
    assert_eq!(dry["dryRun"], true, "{dry}");
    assert_eq!(dry["counts"]["loops"], 2, "{dry}");
    assert_eq!(dry["counts"]["runs"], 2, "{dry}");
    assert_eq!(dry["counts"]["workflowRuns"], 1, "{dry}");
    assert!(!target.exists());

    // Into the data dir of a SQLite world, set up and empty.
    sqlite.ok(&["list"]);
    let copied = on_pg(&["store", "copy", "--to", &to]);
    assert_eq!(copied["counts"], dry["counts"], "{copied}");
    assert_eq!(copied["replaced"], false, "{copied}");
    assert_eq!(sqlite.json(&["show", "copied"])["id"], a["id"]);
    assert_eq!(sqlite.json(&["runs", "copied"]), runs_before);
    assert_eq!(sqlite.json(&["workflows", "runs"]), wf_runs_before);
    assert_eq!(sqlite.json(&["list", "--all"]), list_before);
    assert_eq!(
        sqlite
            .json(&["list", "--label", "team-a"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(sqlite_event_seqs(&target), pg_seqs, "event numbers kept");
    assert_eq!(quick_check(&target), "ok");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // The copy is a working store: new runs and events follow the copied ones.
    assert_eq!(sqlite.json(&["run-now", "copied"])["status"], "succeeded");
    assert_eq!(sqlite.runs("copied").len(), 3);
    let last_pg: i64 = pg_seqs.rsplit(',').next().unwrap().parse().unwrap();
    let seqs = sqlite_event_seqs(&target);
    let last: i64 = seqs.rsplit(',').next().unwrap().parse().unwrap();
    assert!(last > last_pg, "{seqs}");

    // Not into a store that holds data, unless --force (which replaces it).
    let (code, err) = pg.fail(&["--store", &url, "store", "copy", "--to", &to]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(sqlite.runs("copied").len(), 3, "nothing changed");
    let forced = on_pg(&["store", "copy", "--to", &to, "--force"]);
    assert_eq!(forced["replaced"], true, "{forced}");
    assert_eq!(sqlite.json(&["runs", "copied"]), runs_before);

    // From a SQLite store, --to sqlite: is `loops backup`'s job.
    let (code, err) = sqlite.fail(&["store", "copy", "--to", "sqlite:/tmp/x.db"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("loops backup"), "{err}");
}
