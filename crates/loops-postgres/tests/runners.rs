//! Runners on PostgreSQL (issue #12): leases judged by the database's clock, epochs as
//! fences, and the runs of a runner whose lease ended counting as its runner's gone.
//! Real PostgreSQL; each test skips without it (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{NewLoop, Policy};
use loops_postgres::PgStore;
use loops_store::{
    ClaimRequest, DaemonLease, LeaseAcquire, LeaseHolder, RunWrite, RunnerRegistration, Store,
    StoreError,
};
use loops_testkit::PgCluster;

mod common;
use std::time::Duration;

fn registration(name: &str) -> RunnerRegistration {
    RunnerRegistration {
        runner_id: format!("{name}/1/1"),
        host: name.to_owned(),
        pid: 1,
        pid_start_time: Some(1),
        labels: vec!["gpu".to_owned()],
        capacity: 4,
    }
}

/// A loop of `true` every minute, due now.
fn new_loop(name: &str) -> NewLoop {
    common::new_loop(name, chrono::Utc::now(), Policy::default().overlap)
}

fn claim(lp: &loops_core::Loop, runner: &str) -> ClaimRequest {
    common::ad_hoc(lp, runner, chrono::Utc::now())
}

/// A runner's fence works while its lease lives; once the database's clock passes its
/// expiry every fenced write fails and writes nothing, renewal says it is over, its
/// running rows' leases have ended, and a new registration gets a higher epoch.
#[test]
fn an_expired_runner_writes_nothing_and_its_runs_count_as_gone() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let lp = store
        .create_loop(new_loop("a"), chrono::Utc::now())
        .unwrap();
    let lease = store.register_runner(&registration("h1"), 60_000).unwrap();
    let fence = lease.fence.clone();
    let run = store
        .claim_run(&claim(&lp, "h1/1/1"), None, Some(&fence))
        .unwrap()
        .unwrap();
    // The loop's run lease (30 min) outlasts the runner's (1 min): the runner's counts.
    let running = store.running_runs(None).unwrap();
    assert!(run.lease_expires_at > Some(lease.expires_at));
    assert_eq!(running[0].lease_expires_at, Some(lease.expires_at));

    // A short lease, then wait (by the database's clock) until it is over.
    let short = store.register_runner(&registration("h2"), 300).unwrap();
    assert!(short.fence.token > fence.token, "epochs only grow");
    let run2 = store
        .claim_run(&claim(&lp, "h2/1/1"), None, Some(&short.fence))
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.renew_runner(&short.fence, 0).unwrap().is_some() {
        // ttl 0: each renewal ends the lease now; the next finds it expired.
        assert!(std::time::Instant::now() < deadline);
    }
    let write = RunWrite::Spawned {
        run: run2.id.clone(),
        pid: 9,
        pid_start_time: None,
        session_note: None,
        at: chrono::Utc::now(),
    };
    let err = store
        .record_run_writes(&[write], chrono::Utc::now(), Some(&short.fence))
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost), "{err:?}");
    assert_eq!(
        store.get_run(&run2.id).unwrap().unwrap().pid,
        None,
        "nothing written"
    );
    let gone = store
        .running_runs(None)
        .unwrap()
        .into_iter()
        .find(|r| r.id == run2.id)
        .unwrap();
    assert!(
        gone.lease_expires_at.unwrap() <= chrono::Utc::now() + chrono::TimeDelta::milliseconds(50),
        "the run's lease ended with its runner's: {:?}",
        gone.lease_expires_at
    );
    // The live runner takes it over; the row now carries the live runner's epoch.
    let taken = store
        .take_over_run(
            &run2.id,
            Some("h2/1/1"),
            "h1/1/1",
            chrono::Utc::now(),
            Some(&fence),
        )
        .unwrap();
    assert_eq!(taken.claimed_by.as_deref(), Some("h1/1/1"));
    let listed = store.runners().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed[0].live && listed[0].host == "h1", "{listed:?}");
    assert_eq!(listed[0].running, 2);
    assert_eq!(listed[0].labels, ["gpu"]);
    assert!(!listed[1].live && listed[1].running == 0, "{listed:?}");
    // A released runner fences nothing either.
    store.release_runner(&fence).unwrap();
    let err = store
        .claim_run(&claim(&lp, "h1/1/1"), None, Some(&fence))
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost), "{err:?}");
    assert!(store.renew_runner(&fence, 60_000).unwrap().is_none());
}

/// Runner epochs and daemon lease tokens come from one counter: no runner's epoch is
/// ever a daemon lease's token, so neither can pass the other's fence check; runners
/// registering at once all get distinct epochs.
#[test]
fn epochs_are_unique_across_runners_and_the_daemon_lease() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let epochs: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let url = url.clone();
                s.spawn(move || {
                    let store = PgStore::open(&url).unwrap();
                    let mut mine = Vec::new();
                    for j in 0..5 {
                        if (i + j) % 3 == 0 {
                            let holder = LeaseHolder {
                                runner_id: format!("d{i}-{j}"),
                                pid: 1,
                                pid_start_time: None,
                                host: "h".to_owned(),
                            };
                            let always = |_: &DaemonLease| true;
                            match store
                                .acquire_daemon_lease(&holder, 60_000, chrono::Utc::now(), &always)
                                .unwrap()
                            {
                                LeaseAcquire::Acquired(l) => mine.push(l.token),
                                LeaseAcquire::Held(_) => panic!("take-over was allowed"),
                            }
                        } else {
                            let reg = registration(&format!("h{i}-{j}"));
                            mine.push(store.register_runner(&reg, 60_000).unwrap().fence.token);
                        }
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut sorted = epochs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), epochs.len(), "{epochs:?}");
}

/// Issue #19 item 10: the next due instant a runner sleeps until counts only the loops
/// it can take: a due loop that requires a label it lacks would wake it at once after
/// every pass, for ever.
#[test]
fn next_due_at_on_counts_only_the_loops_a_runner_can_take() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let now = chrono::Utc::now();
    let mut gpu = new_loop("needs-gpu");
    gpu.policy.runs_on = vec!["gpu".to_owned()];
    gpu.next_run_at = Some(now - chrono::TimeDelta::seconds(5));
    store.create_loop(gpu.clone(), now).unwrap();
    let mut later = new_loop("anyone");
    later.next_run_at = Some(now + chrono::TimeDelta::hours(1));
    store.create_loop(later.clone(), now).unwrap();
    let ms = |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.timestamp_millis());
    assert_eq!(
        ms(store.next_due_at().unwrap()),
        ms(gpu.next_run_at),
        "every loop"
    );
    assert_eq!(
        ms(store.next_due_at_on(&["cpu".to_owned()]).unwrap()),
        ms(later.next_run_at),
        "a cpu runner sleeps until the loop it can take"
    );
    assert_eq!(
        ms(store
            .next_due_at_on(&["gpu".to_owned(), "x".to_owned()])
            .unwrap()),
        ms(gpu.next_run_at)
    );
    assert!(store
        .due_loops_on(now, 10, &["cpu".to_owned()])
        .unwrap()
        .is_empty());
}
