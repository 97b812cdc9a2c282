//! `SqliteStore::copy_in`, the SQLite end of `store copy --to sqlite:PATH` (issue #23):
//! rows written as they were, in one transaction, with its refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Anchor, CommandTarget, Instant, NewLoop, Policy, RunStatus, Schedule, Target};
use loops_sqlite::SqliteStore;
use loops_store::{CopySet, RunFilter, Store, StoreError, DB_FILE};
use tempfile::TempDir;

fn t(offset_ms: i64) -> Instant {
    chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + offset_ms).unwrap()
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
        labels: vec!["team".to_owned()],
        notify: None,
        next_run_at: Some(t(0)),
    }
}

/// What `store copy` reads from a source, through the trait.
fn copy_set(store: &SqliteStore) -> CopySet {
    let mut runs = store.list_runs(&RunFilter::default()).unwrap();
    runs.reverse();
    CopySet {
        loops: store
            .loop_rows(None)
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap())
            .collect(),
        runs,
        events: store.events_after(0, 10_000).unwrap(),
        ..CopySet::default()
    }
}

fn source() -> (TempDir, SqliteStore) {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    store.create_loop(new_loop("a"), t(0)).unwrap();
    store.create_loop(new_loop("b"), t(1)).unwrap();
    (dir, store)
}

#[test]
fn a_copy_keeps_ids_and_event_numbers_and_refuses_a_store_with_data() {
    let (_dir, src) = source();
    let set = copy_set(&src);
    assert_eq!(set.loops.len(), 2);
    assert!(!set.events.is_empty());
    let dir = TempDir::new().unwrap();
    let dst = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();
    assert!(!dst.holds_data().unwrap());
    dst.copy_in(&set, false).unwrap();
    assert!(dst.holds_data().unwrap());
    let copied = copy_set(&dst);
    assert_eq!(copied.loops, set.loops);
    assert_eq!(copied.events, set.events);
    // Labels are indexed again.
    let filter = loops_store::LoopFilter {
        labels: vec!["team".to_owned()],
        ..Default::default()
    };
    assert_eq!(dst.loop_rows_matching(&filter).unwrap().len(), 2);
    // New events are numbered after the copied ones.
    let last = set.events.last().unwrap().seq;
    dst.create_loop(new_loop("c"), t(2)).unwrap();
    assert!(dst.events_after(last, 10).unwrap()[0].seq > last);

    let err = dst.copy_in(&set, false).unwrap_err();
    assert!(err.to_string().contains("--force"), "{err}");
    dst.copy_in(&set, true).unwrap();
    assert_eq!(copy_set(&dst).loops, set.loops);
}

#[test]
fn a_copy_refuses_runs_in_flight_and_runner_labels_and_writes_nothing() {
    let (_dir, src) = source();
    let dir = TempDir::new().unwrap();
    let dst = SqliteStore::open(&dir.path().join(DB_FILE)).unwrap();

    let mut set = copy_set(&src);
    set.loops[0].runs_on = vec!["gpu".to_owned()];
    let err = dst.copy_in(&set, false).unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("runners"), "{err}");
    assert!(!dst.holds_data().unwrap());

    let mut set = copy_set(&src);
    let mut run: loops_core::Run = serde_json::from_value(serde_json::json!({
        "id": "r1", "loopId": set.loops[0].id.as_str(), "loopName": "a",
        "scheduledFor": "2023-11-14T22:13:20Z", "attempt": 1, "status": "running",
        "source": "due_slot", "createdAt": "2023-11-14T22:13:20Z",
        "updatedAt": "2023-11-14T22:13:20Z"
    }))
    .unwrap();
    run.status = RunStatus::Running;
    set.runs.push(run);
    let err = dst.copy_in(&set, false).unwrap_err();
    assert!(err.to_string().contains("in flight"), "{err}");
    assert!(!dst.holds_data().unwrap(), "the transaction rolled back");
}
