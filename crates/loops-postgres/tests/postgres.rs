//! Behaviour of the PostgreSQL backend beyond the shared suite: migrations under the
//! advisory lock, calls from inside a tokio runtime, what PostgreSQL cannot store, and
//! databases that are not (or no longer) ours. Real PostgreSQL (the test binary's
//! throwaway cluster); each test skips without it (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Anchor, CommandTarget, NewLoop, Policy, RunOutcome, RunSource, RunStatus};
use loops_core::{Schedule, Target};
use loops_postgres::PgStore;
use loops_store::{ClaimRequest, CorruptKind, RunWrite, RunWritten, Store, StoreError};
use loops_testkit::PgCluster;
use std::sync::Barrier;

fn db_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

fn new_loop(name: &str) -> NewLoop {
    NewLoop {
        name: name.to_owned(),
        description: None,
        schedule: Schedule::Interval {
            every_ms: 60_000,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "true".to_owned(),
            args: vec![],
            cwd: None,
            shell: true,
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: vec![],
        notify: None,
        next_run_at: Some(chrono::Utc::now()),
    }
}

#[test]
fn openers_starting_at_once_migrate_once() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    const OPENERS: usize = 6;
    let barrier = Barrier::new(OPENERS);
    let applied: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..OPENERS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    PgStore::open(&url).unwrap().migrations_applied()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        applied.iter().sum::<usize>(),
        loops_postgres::SCHEMA_VERSION as usize,
        "every migration applied exactly once: {applied:?}"
    );
    assert_eq!(
        cluster.psql(db_name(&url), "SELECT COUNT(*) FROM schema_migrations"),
        loops_postgres::SCHEMA_VERSION.to_string()
    );
    let store = PgStore::open(&url).unwrap();
    assert_eq!(store.migrations_applied(), 0);
    assert_eq!(
        store.schema_version().unwrap(),
        loops_postgres::SCHEMA_VERSION
    );
}

/// The daemon calls the (synchronous) store from its tokio worker threads: that must
/// neither panic nor deadlock, on a multi-thread runtime and on a current-thread one.
#[test]
fn calls_from_inside_a_tokio_runtime_work() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = std::sync::Arc::new(PgStore::open(&cluster.database()).unwrap());
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s = std::sync::Arc::clone(&store);
    let created = multi.block_on(async move {
        tokio::spawn(async move { s.create_loop(new_loop("in-runtime"), chrono::Utc::now()) })
            .await
            .unwrap()
    });
    assert_eq!(created.unwrap().name, "in-runtime");
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let found = current.block_on(async { store.get_loop_by_name("in-runtime") });
    assert!(found.unwrap().is_some());
}

/// PostgreSQL cannot store NUL characters; a run's output containing them is recorded
/// with U+FFFD in their place rather than failing the finalization.
#[test]
fn nul_characters_in_output_are_replaced_not_fatal() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let now = chrono::Utc::now();
    let lp = store.create_loop(new_loop("nul"), now).unwrap();
    let req = ClaimRequest {
        loop_id: lp.id.clone(),
        scheduled_for: now,
        runner_id: "r".to_owned(),
        source: RunSource::AdHoc,
        now,
        require_no_running: false,
    };
    let run = store.claim_run(&req, None, None).unwrap().unwrap();
    let outcome = RunOutcome {
        status: RunStatus::Succeeded,
        finished_at: now,
        exit_code: Some(0),
        stdout: "a\0b".to_owned(),
        stderr: String::new(),
        error: None,
        summary: None,
        usage: None,
        failure_class: None,
        retry_at: None,
    };
    let written = store
        .record_run_writes(
            &[RunWrite::Finished {
                run: run.id.clone(),
                outcome,
            }],
            now,
            None,
        )
        .unwrap();
    match &written[0] {
        Ok(RunWritten::Finished { run, .. }) => {
            assert_eq!(run.stdout.as_deref(), Some("a\u{FFFD}b"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_database_of_another_program_is_refused_and_left_alone() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    cluster.psql(
        db_name(&url),
        "CREATE TABLE runs (x int); INSERT INTO runs VALUES (7)",
    );
    let err = PgStore::open(&url).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                kind: CorruptKind::NotAStore,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(cluster.psql(db_name(&url), "SELECT x FROM runs"), "7");
    assert_eq!(
        cluster.psql(
            db_name(&url),
            "SELECT to_regclass('schema_migrations') IS NULL"
        ),
        "t"
    );
}

#[test]
fn a_store_from_a_newer_build_is_refused() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    drop(PgStore::open(&url).unwrap());
    cluster.psql(
        db_name(&url),
        "INSERT INTO schema_migrations VALUES (999, 'future', 'x')",
    );
    let err = PgStore::open(&url).unwrap_err();
    assert!(
        matches!(err, StoreError::TooNew { found: 999, .. }),
        "{err:?}"
    );
}

#[test]
fn an_unreachable_server_is_a_transient_error_naming_the_store() {
    // A free loopback port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://loops:secret@127.0.0.1:{port}/none");
    let err = PgStore::open(&url).unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("127.0.0.1") && !text.contains("secret"),
        "{text}"
    );
}
