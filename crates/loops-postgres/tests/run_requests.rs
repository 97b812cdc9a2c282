//! Run requests on PostgreSQL (`run-now --on-runner`, issue #12): a request is offered
//! only to runners with its loop's labels, starts at most one run whoever races for it,
//! and once withdrawn, expired or answered starts none. Real PostgreSQL; each test
//! skips without it (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{Anchor, NewLoop, Policy, RunSource, Schedule};
use loops_postgres::PgStore;
use loops_store::{ClaimRequest, RunRequestAnswer, RunnerRegistration, Store};
use loops_testkit::PgCluster;

mod common;
use std::sync::{Arc, Barrier};

/// A loop of `true` every hour, first due in an hour, for runners labelled `runs_on`.
fn new_loop(name: &str, runs_on: &[&str]) -> NewLoop {
    let at = chrono::Utc::now() + chrono::TimeDelta::hours(1);
    let mut lp = common::new_loop(name, at, Policy::default().overlap);
    lp.schedule = Schedule::Interval {
        every_ms: 3_600_000,
        anchor: Anchor::FixedRate,
    };
    lp.policy.runs_on = runs_on.iter().map(|l| (*l).to_owned()).collect();
    lp
}

fn registration(name: &str, labels: &[&str]) -> RunnerRegistration {
    RunnerRegistration {
        runner_id: format!("{name}/1/1"),
        host: name.to_owned(),
        pid: 1,
        pid_start_time: Some(1),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        capacity: 4,
    }
}

fn ad_hoc(lp: &loops_core::Loop, runner: &str) -> ClaimRequest {
    common::ad_hoc(lp, runner, chrono::Utc::now())
}

/// Offered only to a runner with the loop's labels; of three runners racing for it,
/// exactly one claims the run and the request records it; then it is no longer
/// offered, and a late claim for it claims nothing.
#[test]
fn a_request_starts_one_run_whoever_races_for_it() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let url = cluster.database();
    let store = PgStore::open(&url).unwrap();
    let lp = store
        .create_loop(new_loop("gpu-job", &["gpu"]), chrono::Utc::now())
        .unwrap();
    let id = store.request_run(&lp.id, false, "cli/9/9", 60_000).unwrap();
    let pending = store.run_request(&id).unwrap().unwrap();
    assert_eq!(pending.loop_id, lp.id);
    assert_eq!(pending.requested_by, "cli/9/9");
    assert!(pending.answer.is_none());
    assert!(pending.expires_at > pending.requested_at);
    assert!(
        store.pending_run_requests(&[], 10).unwrap().is_empty(),
        "a runner without the label is not offered it"
    );
    let offered = store
        .pending_run_requests(&["cpu".to_owned(), "gpu".to_owned()], 10)
        .unwrap();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].id, id);

    let barrier = Arc::new(Barrier::new(3));
    let wins: Vec<_> = (0..3)
        .map(|i| {
            let (url, lp, id, barrier) =
                (url.clone(), lp.clone(), id.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let store = PgStore::open(&url).unwrap();
                let name = format!("h{i}");
                let fence = store
                    .register_runner(&registration(&name, &["gpu"]), 60_000)
                    .unwrap()
                    .fence;
                barrier.wait();
                store
                    .claim_requested_run(
                        &id,
                        &ad_hoc(&lp, &format!("{name}/1/1")),
                        None,
                        Some(&fence),
                    )
                    .unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let won: Vec<_> = wins.iter().flatten().collect();
    assert_eq!(won.len(), 1, "exactly one claim: {wins:?}");
    let run = won[0].clone().unwrap();
    let answered = store.run_request(&id).unwrap().unwrap();
    match answered.answer {
        Some(RunRequestAnswer::Started {
            run_id,
            runner_id,
            source,
        }) => {
            assert_eq!(run_id, run.id);
            assert_eq!(runner_id, run.claimed_by.clone().unwrap());
            assert_eq!(source, RunSource::AdHoc);
        }
        other => panic!("answered {other:?}"),
    }
    assert!(store
        .pending_run_requests(&["gpu".to_owned()], 10)
        .unwrap()
        .is_empty());
    assert_eq!(store.list_runs(&Default::default()).unwrap().len(), 1);
    // Reading the answer, the requester deletes it.
    assert!(store.withdraw_run_request(&id).unwrap().is_some());
    assert!(store.run_request(&id).unwrap().is_none());
}

/// A withdrawn or expired request claims nothing; a refusal is recorded once; a
/// request for a loop that is gone is still offered, so that it is answered.
#[test]
fn withdrawn_expired_and_refused_requests_start_nothing() {
    let Some(cluster) = PgCluster::shared() else {
        return;
    };
    let store = PgStore::open(&cluster.database()).unwrap();
    let lp = store
        .create_loop(new_loop("job", &[]), chrono::Utc::now())
        .unwrap();
    let fence = store
        .register_runner(&registration("h", &[]), 60_000)
        .unwrap()
        .fence;
    let withdrawn = store.request_run(&lp.id, true, "cli/1/1", 60_000).unwrap();
    let was = store.withdraw_run_request(&withdrawn).unwrap().unwrap();
    assert!(was.allow_overlap);
    assert!(was.answer.is_none(), "withdrawn while pending");
    assert_eq!(
        store
            .claim_requested_run(&withdrawn, &ad_hoc(&lp, "h/1/1"), None, Some(&fence))
            .unwrap(),
        None
    );
    let expired = store.request_run(&lp.id, false, "cli/1/1", 1).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !store.pending_run_requests(&[], 10).unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "never expired");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        store
            .claim_requested_run(&expired, &ad_hoc(&lp, "h/1/1"), None, Some(&fence))
            .unwrap(),
        None
    );
    assert!(store.list_runs(&Default::default()).unwrap().is_empty());

    let refused = store.request_run(&lp.id, false, "cli/1/1", 60_000).unwrap();
    assert!(store
        .refuse_run_request(&refused, "h/1/1", "loop \"job\" is busy", Some(&fence))
        .unwrap());
    assert!(!store
        .refuse_run_request(&refused, "h/1/1", "again", Some(&fence))
        .unwrap());
    assert_eq!(
        store.run_request(&refused).unwrap().unwrap().answer,
        Some(RunRequestAnswer::Refused {
            runner_id: "h/1/1".to_owned(),
            reason: "loop \"job\" is busy".to_owned()
        })
    );

    let orphan = store.request_run(&lp.id, false, "cli/1/1", 60_000).unwrap();
    store.remove_loop(&lp.id).unwrap();
    let offered = store.pending_run_requests(&["any".to_owned()], 10).unwrap();
    assert_eq!(
        offered.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [orphan.as_str()]
    );
}
