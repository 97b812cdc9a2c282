//! A scheduling pass's batch of claims, and a recorder's batch of pid records and
//! finalizations, each cost a fixed number of round trips to the server, whatever
//! their size, one included; a write's wake-up costs none of its own, nor does a
//! transaction's `BEGIN` and fence check once the connection has seen that fence pass
//! (issue #21). A test binary of its own, its tests one at a time (`SERIAL`): the
//! round-trip counter is the process's, and nothing else may add to it meanwhile. Real
//! PostgreSQL; skips without it (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Loop, LoopStatus, Overlap, Run, RunOutcome, RunStatus};
use loops_postgres::PgStore;
use loops_store::{
    BatchClaim, ClaimOutcome, Fence, LeaseAcquire, LeaseHolder, LoopAdvance, RunWrite, RunWritten,
    RunnerRegistration, Store, StoreError,
};
use loops_testkit::PgCluster;

mod common;
use common::{assert_pid_records_then_ends, new_loop, pass, pid_records_then_ends};
use std::sync::Mutex;

/// Held by each test: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A live runner's fence, as a daemon's passes and recorder write under.
fn runner_fence(store: &PgStore, host: &str) -> Fence {
    let registration = RunnerRegistration {
        runner_id: format!("{host}/1/1"),
        host: host.to_owned(),
        pid: 1,
        pid_start_time: Some(1),
        labels: Vec::new(),
        capacity: 64,
    };
    store.register_runner(&registration, 60_000).unwrap().fence
}

/// `BEGIN` and the fence check with the loops' locks and their slots' state, the runs'
/// insert with the loops' advance, and the events with `COMMIT`.
#[test]
fn a_batch_of_claims_is_three_round_trips_whatever_its_size() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let fence = runner_fence(&store, "claims");
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let loops: Vec<Loop> = (0..40)
        .map(|i| {
            store
                .create_loop(new_loop(&format!("l{i}"), slot, Overlap::Allow), slot)
                .unwrap()
        })
        .collect();
    // Each batch claims every slot and advances every loop; the first also prepares
    // the statements on the connection. A pass at 1,000 runs a second often claims
    // one loop: that batch too.
    for (minute, size) in [(0, 3), (1, 3), (2, 40), (3, 1)] {
        let at = slot + chrono::TimeDelta::minutes(minute);
        let batch: Vec<BatchClaim> = loops[..size].iter().map(|lp| pass(lp, at, "me")).collect();
        let before = loops_postgres::round_trips();
        let out = store.claim_runs(&batch, Some(&fence)).unwrap();
        let trips = loops_postgres::round_trips() - before;
        assert!(
            out.iter().all(|o| matches!(o, ClaimOutcome::Claimed(_))),
            "{out:?}"
        );
        // The first also checks the fence on its own (the connection has not seen it).
        if minute > 0 {
            assert_eq!(trips, 3, "a batch of {size} claims");
        }
        for lp in &loops[..size] {
            let now = store.get_loop(&lp.id).unwrap().unwrap();
            assert_eq!(now.next_run_at, Some(at + chrono::TimeDelta::minutes(1)));
        }
    }
}

/// `BEGIN` and the fence check with the pid records, the notification default, the
/// finalizations and their loops' locks; the events with `COMMIT`.
#[test]
fn a_batch_of_pid_records_and_finalizations_is_two_round_trips() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let fence = runner_fence(&store, "recorder");
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let loops: Vec<Loop> = (0..30)
        .map(|i| {
            store
                .create_loop(new_loop(&format!("w{i}"), slot, Overlap::Allow), slot)
                .unwrap()
        })
        .collect();
    for (minute, size) in [(0, 3), (1, 3), (2, 30), (3, 1)] {
        let at = slot + chrono::TimeDelta::minutes(minute);
        let batch: Vec<BatchClaim> = loops[..size].iter().map(|lp| pass(lp, at, "me")).collect();
        let runs: Vec<Run> = store
            .claim_runs(&batch, Some(&fence))
            .unwrap()
            .into_iter()
            .map(|o| match o {
                ClaimOutcome::Claimed(run) => *run,
                other => panic!("{other:?}"),
            })
            .collect();
        // Each run's pid record, then each run's end, in one batch.
        let end = at + chrono::TimeDelta::seconds(1);
        let writes = pid_records_then_ends(&runs, at, end);
        let before = loops_postgres::round_trips();
        let written = store.record_run_writes(&writes, end, Some(&fence)).unwrap();
        let trips = loops_postgres::round_trips() - before;
        assert_eq!(written.len(), 2 * size);
        assert_pid_records_then_ends(&writes, &written);
        if minute > 0 {
            assert_eq!(trips, 2, "a batch of {size} pid records and finalizations");
        }
    }
}

/// A recorder batch often holds a single write at 1,000 runs a second: a lone pid record
/// is `BEGIN` and the fence with it, then `COMMIT`; a lone finalization is two round
/// trips too, as a batch of many (they went one by one: three and four, and a lone
/// claim six, now three as a batch of many).
#[test]
fn a_lone_claim_is_three_round_trips_and_a_lone_pid_record_or_finalization_two() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let fence = runner_fence(&store, "lone");
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let lp = store
        .create_loop(new_loop("lone", slot, Overlap::Allow), slot)
        .unwrap();
    // The first round prepares the statements on the connection.
    for minute in 0..3 {
        let at = slot + chrono::TimeDelta::minutes(minute);
        let before = loops_postgres::round_trips();
        let claimed = store
            .claim_runs(&[pass(&lp, at, "me")], Some(&fence))
            .unwrap();
        let claim_trips = loops_postgres::round_trips() - before;
        let [ClaimOutcome::Claimed(run)] = claimed.as_slice() else {
            panic!("{claimed:?}");
        };
        let spawned = RunWrite::Spawned {
            run: run.id.clone(),
            pid: 4242,
            pid_start_time: Some(7),
            session_note: None,
            at,
        };
        let before = loops_postgres::round_trips();
        let written = store
            .record_run_writes(&[spawned], at, Some(&fence))
            .unwrap();
        let pid_trips = loops_postgres::round_trips() - before;
        assert!(
            matches!(written.as_slice(), [Ok(RunWritten::Spawned)]),
            "{written:?}"
        );
        let end = at + chrono::TimeDelta::seconds(1);
        let finished = RunWrite::Finished {
            run: run.id.clone(),
            outcome: RunOutcome {
                exit_code: Some(0),
                ..RunOutcome::new(RunStatus::Succeeded, end)
            },
        };
        let before = loops_postgres::round_trips();
        let written = store
            .record_run_writes(&[finished], end, Some(&fence))
            .unwrap();
        let finish_trips = loops_postgres::round_trips() - before;
        match written.as_slice() {
            [Ok(RunWritten::Finished { run, .. })] => {
                assert_eq!(run.status, RunStatus::Succeeded);
                assert_eq!(run.pid, Some(4242));
            }
            other => panic!("{other:?}"),
        }
        let now = store.get_loop(&lp.id).unwrap().unwrap();
        assert_eq!(now.next_run_at, Some(at + chrono::TimeDelta::minutes(1)));
        if minute > 0 {
            assert_eq!(claim_trips, 3, "a lone claim");
            assert_eq!(pid_trips, 2, "a lone pid record");
            assert_eq!(finish_trips, 2, "a lone finalization");
        }
    }
}

/// A write that wakes the other runners sends its `NOTIFY` with its `COMMIT`, no
/// round trip of its own: a schedule change is `BEGIN` with the first of its four
/// statements, the other three, then the event, the wake-up and `COMMIT` together. The
/// wake-up still reaches a listener.
#[test]
fn a_wake_up_goes_with_its_commit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let lp = store
        .create_loop(new_loop("woken", slot, Overlap::Allow), slot)
        .unwrap();
    let woken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = woken.clone();
    let _guard = store
        .watch_wakeups(std::sync::Arc::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }))
        .unwrap()
        .expect("PostgreSQL has a wake-up channel");
    // The listener calls back once when it is listening.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while woken.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let seen = woken.load(std::sync::atomic::Ordering::SeqCst);
    for minute in 1..=2 {
        let advance = LoopAdvance {
            status: LoopStatus::Active,
            next_run_at: Some(slot + chrono::TimeDelta::minutes(minute)),
            retry_scheduled_for: None,
        };
        let before = loops_postgres::round_trips();
        store
            .update_loop_schedule(&lp.id, &advance, slot, None)
            .unwrap();
        // The first prepares its statements.
        if minute > 1 {
            assert_eq!(loops_postgres::round_trips() - before, 5);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while woken.load(std::sync::atomic::Ordering::SeqCst) < seen + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "a committed write's wake-up never came"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A fence the connection saw pass is checked in the round trip of the transaction's
/// first statements, not before them: once its lease is gone, the transaction still
/// fails with `LeaseLost` and writes nothing — for a runner's epoch and for the daemon
/// lease's token.
#[test]
fn a_lost_fence_fails_the_transaction_its_check_went_with() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::open(&url).unwrap();
    let slot = chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let at = |minute| slot + chrono::TimeDelta::minutes(minute);
    let [lp, twin] = ["fenced", "twin"].map(|name| {
        store
            .create_loop(new_loop(name, slot, Overlap::Allow), slot)
            .unwrap()
    });
    let both = |minute| [pass(&lp, at(minute), "me"), pass(&twin, at(minute), "me")];
    let fence = runner_fence(&store, "fenced");
    // Seen to pass: from here on its check goes with the statements. (The first also
    // prepares them.)
    for minute in 0..2 {
        let before = loops_postgres::round_trips();
        let out = store.claim_runs(&both(minute), Some(&fence)).unwrap();
        assert!(
            out.iter().all(|o| matches!(o, ClaimOutcome::Claimed(_))),
            "{out:?}"
        );
        if minute == 1 {
            assert_eq!(loops_postgres::round_trips() - before, 3);
        }
    }

    // Another session ends the runner's lease.
    let other = PgStore::open(&url).unwrap();
    other.release_runner(&fence).unwrap();
    let lost = store.claim_runs(&both(2), Some(&fence));
    assert!(
        matches!(lost, Err(StoreError::LeaseLost)),
        "a claim under a released lease: {lost:?}"
    );
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(at(9)),
        retry_scheduled_for: None,
    };
    let lost = store.update_loop_schedule(&lp.id, &advance, slot, Some(&fence));
    assert!(matches!(lost, Err(StoreError::LeaseLost)), "{lost:?}");
    let now = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(now.next_run_at, Some(at(2)), "nothing was written");
    let runs = store
        .list_runs(&loops_store::RunFilter {
            loop_id: Some(lp.id.clone()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 2, "the third slot was not claimed: {runs:?}");

    // The daemon lease's token: seen to pass, then taken over by another holder.
    let holder = |id: &str| LeaseHolder {
        runner_id: id.to_owned(),
        pid: 1,
        pid_start_time: Some(1),
        host: id.to_owned(),
    };
    let acquire = |s: &PgStore, id: &str| match s
        .acquire_daemon_lease(&holder(id), 60_000, slot, &|_| true)
        .unwrap()
    {
        LeaseAcquire::Acquired(lease) => Fence { token: lease.token },
        held => panic!("{held:?}"),
    };
    let daemon = acquire(&store, "first");
    for minute in [4, 5] {
        let advance = LoopAdvance {
            next_run_at: Some(at(minute)),
            ..advance.clone()
        };
        store
            .update_loop_schedule(&lp.id, &advance, slot, Some(&daemon))
            .unwrap();
    }
    acquire(&other, "second");
    let lost = store.update_loop_schedule(&lp.id, &advance, slot, Some(&daemon));
    assert!(matches!(lost, Err(StoreError::LeaseLost)), "{lost:?}");
    let now = store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(now.next_run_at, Some(at(5)), "nothing was written");
}
