//! Several hosts (issue #12): the same CLI, JSON and daemon on a PostgreSQL store
//! (`--store postgres://…` / `LOOPS_STORE`), against the test binary's throwaway
//! cluster. Each test skips without PostgreSQL installed (a failure under `CI=true`).

use crate::util::{wait_for, World};
use loops_testkit::PgCluster;
use std::time::Duration;

/// A world whose commands use a fresh database of the shared cluster.
fn pg_world() -> Option<(World, String)> {
    let cluster = PgCluster::shared()?;
    let url = cluster.database();
    let mut w = World::new();
    w.extra_env.push(("LOOPS_STORE".to_owned(), url.clone()));
    Some((w, url))
}

#[test]
fn the_cli_works_the_same_on_postgres_and_keeps_only_host_files_in_the_data_dir() {
    let Some((w, url)) = pg_world() else {
        return;
    };
    let created = w.create_cmd("greet", &["--every", "1h"], "echo hi");
    assert_eq!(created["name"], "greet");
    assert_eq!(created["status"], "active");
    let ran = w.json(&["run-now", "greet"]);
    assert_eq!(ran["status"], "succeeded", "{ran}");
    let runs = w.runs("greet");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["exitCode"], 0);
    assert_eq!(runs[0]["loopName"], "greet");
    assert!(
        !w.db_path().exists(),
        "no SQLite file is created for a PostgreSQL store"
    );

    // Another host (another data dir) naming the store with the flag sees the same loops.
    let other = World::new();
    let listed = other.json(&["--store", &url, "list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["greet"]);
    // ... while its own default store (SQLite in its data dir) is empty.
    assert_eq!(other.json(&["list"]).as_array().unwrap().len(), 0);

    // doctor and daemon status name the backend, never the password.
    let doctor = w.json(&["doctor"]);
    let database = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "database")
        .cloned()
        .unwrap();
    assert_eq!(database["status"], "ok", "{doctor}");
    let detail = database["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("postgres postgres://") && detail.contains("PostgreSQL"),
        "{detail}"
    );
    let status = w.daemon_status();
    assert_eq!(status["backend"], "postgres", "{status}");
    assert_eq!(status["state"], "stopped", "{status}");

    // A store that is neither sqlite nor a PostgreSQL URL is refused.
    let (code, err) = w.fail(&["--store", "mysql://x/y", "list"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("postgres://"), "{err}");
}

#[test]
fn a_daemon_runs_loops_from_a_postgres_store() {
    let Some((w, _url)) = pg_world() else {
        return;
    };
    w.create_cmd("tick", &["--every", "1s"], "echo tick");
    let mut daemon = w.daemon_ready(&[]);
    let status = w.daemon_status();
    assert_eq!(status["backend"], "postgres", "{status}");
    wait_for(
        "three runs from the daemon",
        Duration::from_secs(20),
        || {
            let done = w
                .runs("tick")
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .count();
            (done >= 3).then_some(())
        },
    );
    assert_eq!(daemon.stop(), Some(0), "{}", daemon.log_text());
    assert!(w.runs("tick").iter().all(|r| r["status"] != "running"));
}
