//! Behaviour of the PostgreSQL backend beyond the shared suite: migrations under the
//! advisory lock, calls from inside a tokio runtime, what PostgreSQL cannot store, and
//! databases that are not (or no longer) ours. Real PostgreSQL (the test binary's
//! throwaway cluster); each test skips without it (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{NewLoop, Policy, RunOutcome, RunStatus};
use loops_postgres::PgStore;
use loops_store::{CorruptKind, RunWrite, RunWritten, Store, StoreError};
use loops_testkit::PgCluster;

mod common;
use std::sync::Barrier;

fn db_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

/// A loop of `true` every minute, due now.
fn new_loop(name: &str) -> NewLoop {
    common::new_loop(name, chrono::Utc::now(), Policy::default().overlap)
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
    let run = store
        .claim_run(&common::ad_hoc(&lp, "r", now), None, None)
        .unwrap()
        .unwrap();
    let outcome = RunOutcome {
        status: RunStatus::Succeeded,
        finished_at: now,
        exit_code: Some(0),
        stdout: "a\0b".to_owned(),
        stderr: String::new(),
        error: None,
        error_output: None,
        summary: None,
        usage: None,
        failure_class: None,
        retry_at: None,
        stop: None,
        session_id: None,
        session_note: None,
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

/// Migration 6 (issue #19), as SQLite's 12: rows recorded before kept an agent's
/// output in `error`; the migration moves it to `error_output` and rewrites the event
/// logs' copies to our words, leaving our own errors as they were; stored
/// `notify.on: always` becomes `changes`.
#[test]
fn migration_6_moves_quoted_output_out_of_errors_and_the_event_logs_and_renames_always() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let db = db_name(&url).to_owned();
    let lp = PgStore::open(&url)
        .unwrap()
        .create_loop(new_loop("a"), chrono::Utc::now())
        .unwrap();
    let sql = |s: &str| cluster.psql(&db, s);
    // The schema as it was before migration 6, holding rows recorded then.
    sql("ALTER TABLE runs DROP COLUMN error_output");
    sql("ALTER TABLE workflow_step_runs DROP COLUMN error_output");
    // (And before the later ones: PostgreSQL applies the versions past the newest
    // recorded one.)
    sql("ALTER TABLE runs DROP COLUMN failure_class, DROP COLUMN retry_at");
    sql("ALTER TABLE loops DROP COLUMN ops_json, DROP COLUMN ops_state_json");
    sql("DROP TABLE account_holds");
    sql("DROP INDEX runs_loop_session");
    sql("ALTER TABLE runs DROP COLUMN session_id, DROP COLUMN session_note");
    sql("DROP TABLE budgets, budget_holds");
    sql("DROP INDEX runs_loop_usage");
    sql("DROP INDEX runs_running_keys");
    sql("ALTER TABLE runs DROP COLUMN run_kind, DROP COLUMN provider, DROP COLUMN account");
    sql("DROP TABLE concurrency_caps");
    sql("DROP INDEX workflow_step_runs_provider_usage");
    sql("ALTER TABLE workflow_step_runs DROP COLUMN provider");
    sql("ALTER TABLE workflow_runs DROP COLUMN params_json");
    sql("DELETE FROM schema_migrations WHERE version >= 6");
    // Notification settings stored when `always` meant failure + recovery.
    sql(&format!(
        r#"UPDATE loops SET notify_json = '{{"cmd":"true","on":"always"}}' WHERE id = '{}'"#,
        lp.id
    ));
    sql(
        r#"INSERT INTO meta (key, value) VALUES ('notify_default', '{"url":"http://h/","on":"always"}')"#,
    );
    for (id, slot, status, exit, error) in [
        (
            "r1",
            1,
            "failed",
            "1",
            "'claude exited with status 1: token sk-LEAK1'",
        ),
        (
            "r2",
            2,
            "failed",
            "1",
            "'API Error: sk-LEAK2 (claude exited with status 1)'",
        ),
        ("r3", 3, "failed", "0", "'quota for sk-LEAK3'"),
        ("r4", 4, "failed", "3", "'exited with status 3'"),
        ("r5", 5, "timed_out", "143", "'timed out after 5s'"),
        ("r6", 6, "succeeded", "0", "NULL"),
    ] {
        sql(&format!(
            "INSERT INTO runs (id, loop_id, loop_name, scheduled_for, attempt, status, source, \
             exit_code, error, created_at, updated_at) \
             VALUES ('{id}', '{}', 'a', {slot}, 1, '{status}', 'scheduled', {exit}, {error}, 1, 1)",
            lp.id
        ));
    }
    sql(
        "INSERT INTO workflows (id, name, version, status, spec_json, created_at, updated_at) \
         VALUES ('w1', 'w', 1, 'active', '{}', 1, 1)",
    );
    sql(
        "INSERT INTO workflow_runs (id, workflow_id, workflow_name, status, attempt, created_at, \
         updated_at) VALUES ('wr1', 'w1', 'w', 'failed', 1, 1, 1)",
    );
    sql(
        "INSERT INTO workflow_step_runs (id, workflow_run_id, step_id, sequence, status, \
         exit_code, error, created_at, updated_at) VALUES ('s1', 'wr1', 'a', 0, 'failed', 1, \
         'codex exited with status 1: sk-LEAK4', 1, 1)",
    );
    sql(
        r#"INSERT INTO workflow_events VALUES ('e1', 'wr1', 1, 'step_failed', 'a',
         '{"exitCode":1,"durationMs":3,"error":"codex exited with status 1: sk-LEAK4"}', 1)"#,
    );
    sql(
        r#"INSERT INTO events (kind, run_id, workflow_run_id, data_json, created_at) VALUES
         ('run.finished', 'r1', NULL,
          '{"run":{"id":"r1","status":"failed","exitCode":1,"error":"claude exited with status 1: token sk-LEAK1"}}', 1),
         ('run.finished', 'r3', NULL,
          '{"run":{"id":"r3","status":"failed","exitCode":0,"error":"quota for sk-LEAK3"}}', 1),
         ('run.finished', 'r4', NULL,
          '{"run":{"id":"r4","status":"failed","exitCode":3,"error":"exited with status 3"}}', 1),
         ('workflow.event', NULL, 'wr1',
          '{"eventType":"step_failed","payload":{"exitCode":1,"error":"codex exited with status 1: sk-LEAK4"}}', 1)"#,
    );

    let store = PgStore::open(&url).unwrap();
    assert_eq!(
        store.migrations_applied() as i64,
        loops_postgres::SCHEMA_VERSION - 5,
        "6 and every one after it"
    );
    // `always` was failure + recovery: it is `changes` now, so nothing notifies more.
    let changes = Some(loops_core::NotifyOn::Changes);
    let on = store
        .get_loop(&lp.id)
        .unwrap()
        .unwrap()
        .notify
        .map(|n| n.on);
    assert_eq!(on, changes);
    assert_eq!(store.notify_default().unwrap().map(|n| n.on), changes);
    let run = |id: &str| store.get_run(&loops_core::RunId::new(id)).unwrap().unwrap();
    for (id, error, quoted) in [
        (
            "r1",
            Some("exited with status 1"),
            Some("claude exited with status 1: token sk-LEAK1"),
        ),
        (
            "r2",
            Some("exited with status 1"),
            Some("API Error: sk-LEAK2 (claude exited with status 1)"),
        ),
        (
            "r3",
            Some("the agent reported an error"),
            Some("quota for sk-LEAK3"),
        ),
        ("r4", Some("exited with status 3"), None),
        ("r5", Some("timed out after 5s"), None),
        ("r6", None, None),
    ] {
        let r = run(id);
        assert_eq!(
            (r.error.as_deref(), r.error_output.as_deref()),
            (error, quoted),
            "{id}"
        );
    }
    let step = loops_store::WorkflowStore::step_runs(&store, "wr1")
        .unwrap()
        .remove(0);
    assert_eq!(step.error.as_deref(), Some("exited with status 1"));
    assert_eq!(
        step.error_output.as_deref(),
        Some("codex exited with status 1: sk-LEAK4")
    );
    let logs =
        sql("SELECT data_json FROM events UNION ALL SELECT payload_json FROM workflow_events");
    assert!(!logs.contains("LEAK"), "{logs}");
    assert!(
        logs.contains("\"error\": \"the agent reported an error\""),
        "{logs}"
    );
    assert!(
        logs.contains("\"error\":\"exited with status 3\""),
        "{logs}"
    );
}

/// Event numbers are drawn under the events lock, so appends commit in number order:
/// a write that appends an event while another session holds the lock waits for it,
/// and the number it gets is higher than one drawn while it waited.
/// A session of the test's own on `url` (to hold locks and transactions open), and
/// the runtime its calls run on.
fn holder_session(url: &str) -> (tokio::runtime::Runtime, tokio_postgres::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (holder, connection) = rt
        .block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))
        .unwrap();
    rt.spawn(connection);
    (rt, holder)
}

/// Polls `pg_locks` through `holder` until a session waits for a lock of `locktype`:
/// `what` (whose end `finished` tells) must wait for it, within 30 s.
fn await_lock_wait(
    rt: &tokio::runtime::Runtime,
    holder: &tokio_postgres::Client,
    locktype: &str,
    finished: impl Fn() -> bool,
    what: &str,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let row = rt
            .block_on(holder.query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = $1 AND NOT granted",
                &[&locktype],
            ))
            .unwrap();
        if row.get::<_, i64>(0) > 0 {
            return;
        }
        assert!(!finished(), "{what} did not wait for the {locktype} lock");
        assert!(std::time::Instant::now() < deadline, "{what} never waited");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn an_event_append_draws_its_number_after_the_events_lock() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::open(&url).unwrap();
    store
        .create_loop(new_loop("first"), chrono::Utc::now())
        .unwrap();
    let (rt, holder) = holder_session(&url);
    // The events lock ("levt"), held by this session.
    rt.block_on(holder.execute("SELECT pg_advisory_lock(1818588788)", &[]))
        .unwrap();
    std::thread::scope(|s| {
        let created = s.spawn(|| store.create_loop(new_loop("second"), chrono::Utc::now()));
        await_lock_wait(
            &rt,
            &holder,
            "advisory",
            || created.is_finished(),
            "the write",
        );
        let drawn: i64 = rt
            .block_on(holder.query_one(
                "SELECT nextval(pg_get_serial_sequence('events', 'seq'))",
                &[],
            ))
            .unwrap()
            .get(0);
        rt.block_on(holder.execute("SELECT pg_advisory_unlock(1818588788)", &[]))
            .unwrap();
        created.join().unwrap().unwrap();
        let newest: i64 = rt
            .block_on(holder.query_one("SELECT max(seq) FROM events", &[]))
            .unwrap()
            .get(0);
        assert!(
            newest > drawn,
            "the write's event {newest} was numbered before {drawn}"
        );
    });
}

/// A scheduling pass's reads are one call, its two statements sent together: the due
/// loops while no loop is past its expiry, `None` (expire first) once one is.
#[test]
fn a_pass_reads_due_loops_and_expiry_together() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let now = chrono::Utc::now();
    let due = store.create_loop(new_loop("due"), now).unwrap();
    let mut expiring = new_loop("expiring");
    expiring.next_run_at = Some(now + chrono::TimeDelta::hours(1));
    expiring.policy.expires_at = Some(now + chrono::TimeDelta::minutes(30));
    store.create_loop(expiring, now).unwrap();

    let read = store
        .due_loops_unless_expiring(now, 10, &[])
        .unwrap()
        .expect("no loop is past its expiry yet");
    let ids: Vec<_> = read.into_iter().map(|r| r.unwrap().id).collect();
    assert_eq!(ids, vec![due.id]);

    let later = now + chrono::TimeDelta::minutes(31);
    assert!(store
        .due_loops_unless_expiring(later, 10, &[])
        .unwrap()
        .is_none());
    assert_eq!(store.expire_loops(later, None).unwrap().len(), 1);
    assert!(store
        .due_loops_unless_expiring(later, 10, &[])
        .unwrap()
        .is_some());
}

/// A transaction's events go to the server with its `COMMIT`: when their insert fails,
/// nothing of the transaction is kept, the call fails, and the connection is ready for
/// the next call (not left inside the aborted transaction).
#[test]
fn a_failing_event_insert_sent_with_the_commit_keeps_nothing() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::open(&url).unwrap();
    cluster.psql(
        db_name(&url),
        "CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.data_json LIKE '%boom%' THEN RAISE EXCEPTION 'refused'; END IF; \
         RETURN NEW; END $$; \
         CREATE TRIGGER refuse_boom BEFORE INSERT ON events \
         FOR EACH ROW EXECUTE FUNCTION refuse_boom()",
    );
    let events_before = cluster.psql(db_name(&url), "SELECT count(*) FROM events");
    let err = store
        .create_loop(new_loop("boom"), chrono::Utc::now())
        .unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(store.get_loop_by_name("boom").unwrap().is_none());
    assert_eq!(
        cluster.psql(db_name(&url), "SELECT count(*) FROM events"),
        events_before
    );
    // The same connection goes on: this write commits, with its event.
    let kept = store
        .create_loop(new_loop("kept"), chrono::Utc::now())
        .unwrap();
    assert_eq!(
        cluster.psql(
            db_name(&url),
            &format!(
                "SELECT count(*) FROM events WHERE kind = 'loop.created' AND loop_id = '{}'",
                kept.id
            )
        ),
        "1"
    );
    assert_eq!(
        cluster.psql(
            db_name(&url),
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'idle in transaction'"
        ),
        "0"
    );
}

/// The recorder's set statements update each row where their probe by key found it; a
/// row another transaction changed meanwhile (a lease renewal of the same runs) would
/// no longer be there. The batch locks its runs first, so it waits for that
/// transaction and then finds each row as it committed: both runs end with their pid,
/// neither is reported not running.
#[test]
fn a_recorder_batch_waiting_on_a_concurrent_update_still_writes_every_run() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::open(&url).unwrap();
    let now = chrono::Utc::now();
    let runs: Vec<loops_core::Run> = ["renewed-a", "renewed-b"]
        .iter()
        .map(|name| {
            let lp = store.create_loop(new_loop(name), now).unwrap();
            store
                .claim_run(&common::ad_hoc(&lp, "r", now), None, None)
                .unwrap()
                .unwrap()
        })
        .collect();
    let ids: Vec<String> = runs.iter().map(|r| r.id.to_string()).collect();
    let (rt, holder) = holder_session(&url);
    // Another transaction's update of both rows, held open.
    rt.block_on(holder.batch_execute("BEGIN")).unwrap();
    rt.block_on(holder.execute(
        "UPDATE runs SET updated_at = updated_at + 1 WHERE id = ANY($1)",
        &[&ids],
    ))
    .unwrap();
    let writes = common::pid_records_then_ends(&runs, now, now);
    std::thread::scope(|s| {
        let recorded = s.spawn(|| store.record_run_writes(&writes, now, None));
        await_lock_wait(
            &rt,
            &holder,
            "transactionid",
            || recorded.is_finished(),
            "the batch",
        );
        rt.block_on(holder.batch_execute("COMMIT")).unwrap();
        let written = recorded.join().unwrap().unwrap();
        common::assert_pid_records_then_ends(&writes, &written);
    });
}
