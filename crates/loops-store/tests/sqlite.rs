//! Behaviour of the SQLite store against the `Store` contract: loops, claims (including
//! races between processes-worth of connections), leases, fencing, pruning, and how
//! the file is created, validated and migrated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use loops_core::{
    Anchor, CommandTarget, Instant, Loop, LoopId, LoopStatus, NewLoop, Policy, Run, RunId,
    RunOutcome, RunSource, RunStatus, Schedule, Target, Usage,
};
use loops_store::{
    BatchClaim, ClaimOutcome, ClaimRefused, ClaimRequest, DaemonLease, Fence, LeaseAcquire,
    LeaseHolder, LoopAdvance, PrunePolicy, RunFilter, RunWrite, RunWritten, SqliteStore, Store,
    StoreError, DB_FILE, SCHEMA_VERSION,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use tempfile::TempDir;

const T0: i64 = 1_700_000_000_000;

fn t(offset_ms: i64) -> Instant {
    chrono::DateTime::from_timestamp_millis(T0 + offset_ms).unwrap()
}

fn new_loop(name: &str, next: Option<Instant>) -> NewLoop {
    NewLoop {
        name: name.to_owned(),
        description: Some(format!("{name} description")),
        schedule: Schedule::Interval {
            every_ms: 60_000,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: "echo hi".to_owned(),
            args: vec![],
            cwd: None,
            shell: true,
            env: Default::default(),
            timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        next_run_at: next,
    }
}

fn with_attempts(mut n: NewLoop, attempts: u32) -> NewLoop {
    n.policy.max_attempts = attempts;
    n
}

struct Fixture {
    _dir: TempDir,
    store: SqliteStore,
}

fn fixture() -> Fixture {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let store = SqliteStore::open(&path).unwrap();
    Fixture { _dir: dir, store }
}

fn claim_req(lp: &Loop, slot: Instant, now: Instant) -> ClaimRequest {
    ClaimRequest {
        loop_id: lp.id.clone(),
        scheduled_for: slot,
        runner_id: "runner-a".to_owned(),
        source: RunSource::Scheduled,
        now,
        require_no_running: false,
    }
}

fn claim(store: &SqliteStore, req: &ClaimRequest) -> Result<Run, ClaimRefused> {
    store.claim_run(req, None).unwrap()
}

fn outcome(status: RunStatus, at: Instant) -> RunOutcome {
    RunOutcome {
        status,
        finished_at: at,
        exit_code: Some(if status == RunStatus::Succeeded { 0 } else { 1 }),
        stdout: "out".to_owned(),
        stderr: "err".to_owned(),
        error: None,
        summary: None,
        usage: None,
    }
}

fn holder(runner: &str) -> LeaseHolder {
    LeaseHolder {
        runner_id: runner.to_owned(),
        pid: 4242,
        pid_start_time: Some(123_456),
        host: "host-1".to_owned(),
    }
}

fn acquired(r: LeaseAcquire) -> DaemonLease {
    match r {
        LeaseAcquire::Acquired(l) => l,
        LeaseAcquire::Held(l) => panic!("expected Acquired, lease held by {l:?}"),
    }
}

fn run_count(store: &SqliteStore) -> usize {
    store.list_runs(&RunFilter::default()).unwrap().len()
}

// ---- loops ----

#[test]
fn create_get_by_name_prefix_and_duplicate() {
    let f = fixture();
    let created = f
        .store
        .create_loop(new_loop("alpha", Some(t(1000))), t(0))
        .unwrap();
    assert_eq!(created.id.as_str().len(), 12);
    assert!(created
        .id
        .as_str()
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(created.status, LoopStatus::Active);
    assert_eq!(created.name, "alpha");
    assert_eq!(created.next_run_at, Some(t(1000)));
    assert_eq!(created.created_at, t(0));
    assert_eq!(created.updated_at, t(0));
    assert_eq!(created.max_attempts, 1);
    assert_eq!(created.lease_ms, 30 * 60_000);

    let got = f.store.get_loop(&created.id).unwrap().unwrap();
    assert_eq!(got, created);
    assert_eq!(f.store.get_loop_by_name("alpha").unwrap().unwrap(), created);
    assert!(f.store.get_loop_by_name("nope").unwrap().is_none());
    assert!(f
        .store
        .get_loop(&LoopId::new("000000000000"))
        .unwrap()
        .is_none());

    for len in 1..=12 {
        let prefix = &created.id.as_str()[..len];
        let found = f.store.loops_with_id_prefix(prefix, 10).unwrap();
        assert!(found.iter().any(|l| l.id == created.id), "prefix {prefix}");
        assert!(found.iter().all(|l| l.id.as_str().starts_with(prefix)));
    }
    assert!(f.store.loops_with_id_prefix("zz", 10).unwrap().is_empty());
    assert!(f.store.loops_with_id_prefix("%", 10).unwrap().is_empty());

    let err = f
        .store
        .create_loop(new_loop("alpha", None), t(5))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateName(ref n) if n == "alpha"),
        "{err:?}"
    );
    assert_eq!(f.store.list_loops(None).unwrap().len(), 1);
}

#[test]
fn prefix_lookup_respects_limit() {
    let f = fixture();
    for i in 0..40 {
        f.store
            .create_loop(new_loop(&format!("l{i}"), None), t(0))
            .unwrap();
    }
    assert_eq!(f.store.loops_with_id_prefix("", 5).unwrap().len(), 5);
    let all = f.store.loops_with_id_prefix("", 100).unwrap();
    assert_eq!(all.len(), 40);
}

#[test]
fn list_loops_orders_by_name_and_filters_status() {
    let f = fixture();
    for name in ["charlie", "alpha", "bravo"] {
        f.store.create_loop(new_loop(name, None), t(0)).unwrap();
    }
    let names: Vec<_> = f
        .store
        .list_loops(None)
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["alpha", "bravo", "charlie"]);

    let bravo = f.store.get_loop_by_name("bravo").unwrap().unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    let updated = f
        .store
        .update_loop_schedule(&bravo.id, &advance, t(10), None)
        .unwrap();
    assert_eq!(updated.status, LoopStatus::Paused);
    assert_eq!(updated.updated_at, t(10));
    let paused = f.store.list_loops(Some(LoopStatus::Paused)).unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].name, "bravo");
    assert_eq!(
        f.store.list_loops(Some(LoopStatus::Active)).unwrap().len(),
        2
    );
}

#[test]
fn update_loop_schedule_roundtrip_and_missing() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(60_000)),
        retry_scheduled_for: Some(t(0)),
    };
    let updated = f
        .store
        .update_loop_schedule(&lp.id, &advance, t(5), None)
        .unwrap();
    assert_eq!(updated.next_run_at, Some(t(60_000)));
    assert_eq!(updated.retry_scheduled_for, Some(t(0)));
    assert_eq!(f.store.get_loop(&lp.id).unwrap().unwrap(), updated);

    let err = f
        .store
        .update_loop_schedule(&LoopId::new("ffffffffffff"), &advance, t(5), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::LoopNotFound(_)), "{err:?}");
}

#[test]
fn due_loops_order_limit_and_paused_excluded() {
    let f = fixture();
    let c = f
        .store
        .create_loop(new_loop("c", Some(t(300))), t(0))
        .unwrap();
    let a = f
        .store
        .create_loop(new_loop("a", Some(t(100))), t(0))
        .unwrap();
    let b = f
        .store
        .create_loop(new_loop("b", Some(t(200))), t(0))
        .unwrap();
    let _later = f
        .store
        .create_loop(new_loop("later", Some(t(10_000))), t(0))
        .unwrap();
    let _never = f.store.create_loop(new_loop("never", None), t(0)).unwrap();

    let due: Vec<_> = f
        .store
        .due_loops(t(500), 10)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().id)
        .collect();
    assert_eq!(due, [a.id.clone(), b.id.clone(), c.id.clone()]);
    let due: Vec<_> = f
        .store
        .due_loops(t(500), 2)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().id)
        .collect();
    assert_eq!(due, [a.id.clone(), b.id.clone()]);
    // Boundary: next_run_at == now is due.
    assert_eq!(f.store.due_loops(t(100), 10).unwrap().len(), 1);
    assert_eq!(f.store.next_due_at().unwrap(), Some(t(100)));

    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: Some(t(100)),
        retry_scheduled_for: None,
    };
    f.store
        .update_loop_schedule(&a.id, &pause, t(1), None)
        .unwrap();
    let due: Vec<_> = f
        .store
        .due_loops(t(500), 10)
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap().id)
        .collect();
    assert_eq!(due, [b.id, c.id]);
    assert_eq!(f.store.next_due_at().unwrap(), Some(t(200)));
}

#[test]
fn next_due_at_empty() {
    let store = SqliteStore::open_in_memory().unwrap();
    assert_eq!(store.next_due_at().unwrap(), None);
    store.create_loop(new_loop("x", None), t(0)).unwrap();
    assert_eq!(store.next_due_at().unwrap(), None);
}

#[test]
fn expire_loops_marks_only_active_past_expiry() {
    let f = fixture();
    let mut n = new_loop("expiring", Some(t(100)));
    n.policy.expires_at = Some(t(1000));
    let exp = f.store.create_loop(n, t(0)).unwrap();
    let mut n = new_loop("future", Some(t(100)));
    n.policy.expires_at = Some(t(5000));
    f.store.create_loop(n, t(0)).unwrap();
    f.store
        .create_loop(new_loop("forever", Some(t(100))), t(0))
        .unwrap();

    assert!(f.store.expire_loops(t(999), None).unwrap().is_empty());
    let expired = f.store.expire_loops(t(1000), None).unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].id, exp.id);
    assert_eq!(expired[0].status, LoopStatus::Expired);
    assert_eq!(expired[0].next_run_at, None);
    assert_eq!(
        f.store.get_loop(&exp.id).unwrap().unwrap().status,
        LoopStatus::Expired
    );
    // Idempotent.
    assert!(f.store.expire_loops(t(2000), None).unwrap().is_empty());
}

#[test]
fn remove_loop_deletes_its_runs() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let other = f
        .store
        .create_loop(new_loop("b", Some(t(0))), t(0))
        .unwrap();
    claim(&f.store, &claim_req(&lp, t(0), t(1))).unwrap();
    claim(&f.store, &claim_req(&other, t(0), t(1))).unwrap();
    assert!(f.store.remove_loop(&lp.id).unwrap());
    assert!(!f.store.remove_loop(&lp.id).unwrap());
    assert!(f.store.get_loop(&lp.id).unwrap().is_none());
    let runs = f.store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].loop_id, other.id);
    // The name is free again.
    f.store.create_loop(new_loop("a", None), t(2)).unwrap();
}

// ---- claims ----

#[test]
fn claim_semantics() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 2), t(0))
        .unwrap();
    let req = claim_req(&lp, t(0), t(10));

    let run = claim(&f.store, &req).unwrap();
    assert_eq!(run.attempt, 1);
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.source, RunSource::Scheduled);
    assert_eq!(run.scheduled_for, t(0));
    assert_eq!(run.started_at, Some(t(10)));
    assert_eq!(run.claimed_by.as_deref(), Some("runner-a"));
    assert_eq!(run.lease_expires_at, Some(t(10 + 30 * 60_000)));
    assert_eq!(run.loop_name, "a");
    assert_eq!(run.id.as_str().len(), 12);
    assert_eq!(f.store.get_run(&run.id).unwrap().unwrap(), run);

    // Same slot while running.
    assert_eq!(claim(&f.store, &req), Err(ClaimRefused::SlotRunning));

    // After a failure: attempt 2.
    f.store
        .finalize_run(&run.id, &outcome(RunStatus::Failed, t(20)), None)
        .unwrap();
    let run2 = claim(&f.store, &claim_req(&lp, t(0), t(30))).unwrap();
    assert_eq!(run2.attempt, 2);
    f.store
        .finalize_run(&run2.id, &outcome(RunStatus::TimedOut, t(40)), None)
        .unwrap();
    // Max attempts (2) used.
    assert_eq!(
        claim(&f.store, &claim_req(&lp, t(0), t(50))),
        Err(ClaimRefused::SlotDone)
    );

    // After success: done.
    let r = claim(&f.store, &claim_req(&lp, t(60_000), t(60_001))).unwrap();
    f.store
        .finalize_run(&r.id, &outcome(RunStatus::Succeeded, t(60_002)), None)
        .unwrap();
    assert_eq!(
        claim(&f.store, &claim_req(&lp, t(60_000), t(60_003))),
        Err(ClaimRefused::SlotDone)
    );

    // Unknown loop.
    let mut ghost = claim_req(&lp, t(0), t(0));
    ghost.loop_id = LoopId::new("ffffffffffff");
    assert_eq!(claim(&f.store, &ghost), Err(ClaimRefused::LoopNotActive));
}

#[test]
fn claim_overlap_skip_reports_busy() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let first = claim(&f.store, &claim_req(&lp, t(0), t(1))).unwrap();
    let mut next = claim_req(&lp, t(60_000), t(60_001));
    next.require_no_running = true;
    assert_eq!(claim(&f.store, &next), Err(ClaimRefused::LoopBusy));
    // Overlap allowed.
    next.require_no_running = false;
    let overlapping = claim(&f.store, &next).unwrap();
    assert_eq!(overlapping.attempt, 1);
    // Once nothing runs, skip-mode claims go through.
    for r in [&first, &overlapping] {
        f.store
            .finalize_run(&r.id, &outcome(RunStatus::Succeeded, t(60_002)), None)
            .unwrap();
    }
    let mut later = claim_req(&lp, t(120_000), t(120_001));
    later.require_no_running = true;
    assert!(claim(&f.store, &later).is_ok());
}

#[test]
fn claim_status_rules_and_ad_hoc() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: Some(t(0)),
        retry_scheduled_for: None,
    };
    f.store
        .update_loop_schedule(&lp.id, &pause, t(1), None)
        .unwrap();
    assert_eq!(
        claim(&f.store, &claim_req(&lp, t(0), t(2))),
        Err(ClaimRefused::LoopNotActive)
    );

    // Ad hoc ignores the status, and gets a single attempt.
    let mut adhoc = claim_req(&lp, t(5), t(5));
    adhoc.source = RunSource::AdHoc;
    let run = claim(&f.store, &adhoc).unwrap();
    assert_eq!(run.source, RunSource::AdHoc);
    assert_eq!(run.attempt, 1);
    f.store
        .finalize_run(&run.id, &outcome(RunStatus::Failed, t(6)), None)
        .unwrap();
    assert_eq!(claim(&f.store, &adhoc), Err(ClaimRefused::SlotDone));
}

#[test]
fn skipped_slot_is_done() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let skipped = f
        .store
        .record_skipped_run(&lp, t(0), "previous run still active", t(3), None)
        .unwrap();
    assert_eq!(skipped.status, RunStatus::Skipped);
    assert_eq!(skipped.attempt, 1);
    assert_eq!(skipped.error.as_deref(), Some("previous run still active"));
    assert_eq!(skipped.started_at, Some(t(3)));
    assert_eq!(skipped.finished_at, Some(t(3)));
    assert_eq!(skipped.duration_ms, Some(0));
    assert_eq!(
        claim(&f.store, &claim_req(&lp, t(0), t(4))),
        Err(ClaimRefused::SlotDone)
    );

    // A skip after a failed attempt takes the next attempt number.
    let r = claim(&f.store, &claim_req(&lp, t(100), t(101))).unwrap();
    f.store
        .finalize_run(&r.id, &outcome(RunStatus::Failed, t(102)), None)
        .unwrap();
    let s = f
        .store
        .record_skipped_run(&lp, t(100), "busy", t(103), None)
        .unwrap();
    assert_eq!(s.attempt, 2);

    // Unknown loop.
    let mut ghost = lp.clone();
    ghost.id = LoopId::new("ffffffffffff");
    let err = f
        .store
        .record_skipped_run(&ghost, t(0), "x", t(0), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::LoopNotFound(_)), "{err:?}");
}

#[test]
fn racing_claims_have_exactly_one_winner() {
    const THREADS: usize = 8;
    const SLOTS: i64 = 20;
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let lp = {
        let store = SqliteStore::open(&path).unwrap();
        store
            .create_loop(with_attempts(new_loop("race", Some(t(0))), 5), t(0))
            .unwrap()
    };
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let path = path.clone();
            let barrier = Arc::clone(&barrier);
            let lp = lp.clone();
            std::thread::spawn(move || {
                // Each thread has its own connection, as separate processes would.
                let store = SqliteStore::open(&path).unwrap();
                let mut wins = Vec::new();
                for slot in 0..SLOTS {
                    let mut req = claim_req(&lp, t(slot * 60_000), t(slot * 60_000 + 1));
                    req.runner_id = format!("runner-{i}");
                    barrier.wait();
                    match store.claim_run(&req, None).unwrap() {
                        Ok(run) => wins.push(run),
                        Err(refused) => assert_eq!(refused, ClaimRefused::SlotRunning),
                    }
                }
                wins
            })
        })
        .collect();
    let wins: Vec<Run> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(wins.len(), SLOTS as usize, "one winner per slot");
    for slot in 0..SLOTS {
        let n = wins
            .iter()
            .filter(|r| r.scheduled_for == t(slot * 60_000))
            .count();
        assert_eq!(n, 1, "slot {slot}");
    }
    let store = SqliteStore::open(&path).unwrap();
    let rows = store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(rows.len(), SLOTS as usize);
    assert!(rows.iter().all(|r| r.attempt == 1));
}

#[test]
fn concurrent_opens_of_a_fresh_file_migrate_once() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let path = path.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let store = SqliteStore::open(&path).unwrap();
                store
                    .create_loop(new_loop(&format!("l{i}"), None), t(0))
                    .unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.list_loops(None).unwrap().len(), 8);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

// ---- run lifecycle ----

#[test]
fn finalize_is_guarded() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let run = claim(&f.store, &claim_req(&lp, t(0), t(1000))).unwrap();
    let mut out = outcome(RunStatus::Succeeded, t(3500));
    out.summary = Some("all good".to_owned());
    out.usage = Some(Usage {
        input_tokens: Some(10),
        output_tokens: Some(20),
        cost_usd: Some(0.5),
    });
    let done = f.store.finalize_run(&run.id, &out, None).unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.finished_at, Some(t(3500)));
    assert_eq!(done.duration_ms, Some(2500));
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.stdout.as_deref(), Some("out"));
    assert_eq!(done.stderr.as_deref(), Some("err"));
    assert_eq!(done.summary.as_deref(), Some("all good"));
    assert_eq!(done.usage, out.usage);
    assert_eq!(f.store.get_run(&run.id).unwrap().unwrap(), done);

    let again = f
        .store
        .finalize_run(&run.id, &outcome(RunStatus::Failed, t(4000)), None)
        .unwrap_err();
    assert!(matches!(again, StoreError::NotRunning(_)), "{again:?}");
    assert_eq!(
        f.store.get_run(&run.id).unwrap().unwrap().status,
        RunStatus::Succeeded
    );
    let missing = f
        .store
        .finalize_run(&RunId::new("ffffffffffff"), &out, None)
        .unwrap_err();
    assert!(matches!(missing, StoreError::RunNotFound(_)), "{missing:?}");
    let invalid = f
        .store
        .finalize_run(&run.id, &outcome(RunStatus::Running, t(4000)), None)
        .unwrap_err();
    assert!(
        matches!(invalid, StoreError::InvalidArgument(_)),
        "{invalid:?}"
    );
}

#[test]
fn mark_run_pid_records_and_guards() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let run = claim(&f.store, &claim_req(&lp, t(0), t(1))).unwrap();
    f.store
        .mark_run_pid(&run.id, 777, Some(u64::from(u32::MAX) + 5), t(2), None)
        .unwrap();
    let got = f.store.get_run(&run.id).unwrap().unwrap();
    assert_eq!(got.pid, Some(777));
    assert_eq!(got.pid_start_time, Some(u64::from(u32::MAX) + 5));
    assert_eq!(got.updated_at, t(2));
    f.store
        .finalize_run(&run.id, &outcome(RunStatus::Failed, t(3)), None)
        .unwrap();
    let err = f
        .store
        .mark_run_pid(&run.id, 1, None, t(4), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning(_)), "{err:?}");
}

#[test]
fn claim_runs_claims_each_in_order_and_advances_only_the_winners() {
    let f = fixture();
    let a = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let b = f
        .store
        .create_loop(new_loop("b", Some(t(0))), t(0))
        .unwrap();
    let c = f
        .store
        .create_loop(new_loop("c", Some(t(0))), t(0))
        .unwrap();
    // b's slot already succeeded; c is paused.
    let done = claim(&f.store, &claim_req(&b, t(0), t(1))).unwrap();
    f.store
        .finalize_run(&done.id, &outcome(RunStatus::Succeeded, t(2)), None)
        .unwrap();
    let pause = LoopAdvance {
        status: LoopStatus::Paused,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    f.store
        .update_loop_schedule(&c.id, &pause, t(3), None)
        .unwrap();

    let advance = |next: i64| LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(next)),
        retry_scheduled_for: None,
    };
    let batch: Vec<BatchClaim> = [(&a, 60_000), (&b, 60_000), (&c, 60_000), (&a, 120_000)]
        .iter()
        .map(|(lp, next)| BatchClaim {
            request: claim_req(lp, t(0), t(10)),
            advance: Some(advance(*next)),
            skip_slots: vec![t(0)],
        })
        .collect();
    let results = f.store.claim_runs(&batch, None).unwrap();
    assert_eq!(results.len(), 4);
    let ClaimOutcome::Claimed(won) = &results[0] else {
        panic!("{:?}", results[0]);
    };
    assert_eq!((won.loop_id.clone(), won.attempt), (a.id.clone(), 1));
    assert_eq!(won.started_at, Some(t(10)));
    // b's slot is done: passed over, its loop advanced in the same transaction.
    assert_eq!(results[1], ClaimOutcome::Moved);
    assert_eq!(
        f.store.get_loop(&b.id).unwrap().unwrap().next_run_at,
        Some(t(60_000))
    );
    assert_eq!(results[2], ClaimOutcome::NotActive);
    // The same slot twice in one batch: the second sees the first's running row.
    assert_eq!(results[3], ClaimOutcome::Moved);
    assert_eq!(
        f.store.get_loop(&a.id).unwrap().unwrap().next_run_at,
        Some(t(120_000))
    );
    assert_eq!(
        f.store.get_loop(&c.id).unwrap().unwrap().status,
        LoopStatus::Paused
    );
    assert!(f.store.claim_runs(&[], None).unwrap().is_empty());
}

#[test]
fn a_busy_loop_is_skipped_and_advanced_in_the_claims_transaction() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("busy", Some(t(0))), t(0))
        .unwrap();
    let running = claim(&f.store, &claim_req(&lp, t(-60_000), t(-59_000))).unwrap();
    let mut req = claim_req(&lp, t(0), t(10));
    req.require_no_running = true;
    let next = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(120_000)),
        retry_scheduled_for: None,
    };
    let results = f
        .store
        .claim_runs(
            &[BatchClaim {
                request: req,
                advance: Some(next),
                skip_slots: vec![t(0), t(60_000)],
            }],
            None,
        )
        .unwrap();
    let ClaimOutcome::Skipped(skipped) = &results[0] else {
        panic!("{:?}", results[0]);
    };
    assert_eq!(skipped.len(), 2);
    assert!(skipped.iter().all(|r| r.status == RunStatus::Skipped));
    assert_eq!(
        skipped.iter().map(|r| r.scheduled_for).collect::<Vec<_>>(),
        vec![t(0), t(60_000)]
    );
    assert_eq!(
        skipped[0].error.as_deref(),
        Some("previous run still active")
    );
    let after = f.store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(t(120_000)));
    assert_eq!(
        f.store.get_run(&running.id).unwrap().unwrap().status,
        RunStatus::Running
    );
}

#[test]
fn record_run_writes_applies_in_order_and_fails_rows_alone() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let other = f
        .store
        .create_loop(new_loop("b", Some(t(0))), t(0))
        .unwrap();
    // An older slot of `lp` failed with attempts left: a deferred retry.
    let old = claim(&f.store, &claim_req(&lp, t(-60_000), t(-59_000))).unwrap();
    f.store
        .finalize_run(&old.id, &outcome(RunStatus::Failed, t(-58_000)), None)
        .unwrap();
    let run = claim(&f.store, &claim_req(&lp, t(0), t(1))).unwrap();
    let run_b = claim(&f.store, &claim_req(&other, t(0), t(1))).unwrap();
    let missing = RunId::new("ffffffffffff");

    let writes = vec![
        RunWrite::Spawned {
            run: run.id.clone(),
            pid: 4321,
            pid_start_time: Some(99),
            at: t(2),
        },
        RunWrite::Finished {
            run: run.id.clone(),
            outcome: outcome(RunStatus::Succeeded, t(5)),
        },
        // After its finalization in the same batch: fails alone.
        RunWrite::Spawned {
            run: run.id.clone(),
            pid: 1,
            pid_start_time: None,
            at: t(6),
        },
        RunWrite::Finished {
            run: missing.clone(),
            outcome: outcome(RunStatus::Failed, t(6)),
        },
        RunWrite::Finished {
            run: run_b.id.clone(),
            outcome: outcome(RunStatus::Failed, t(7)),
        },
    ];
    let results = f.store.record_run_writes(&writes, t(8), None).unwrap();
    assert_eq!(results.len(), 5);
    assert!(
        matches!(results[0], Ok(RunWritten::Spawned)),
        "{:?}",
        results[0]
    );
    match &results[1] {
        Ok(RunWritten::Finished {
            run: done,
            loop_moved,
        }) => {
            assert!(*loop_moved);
            assert_eq!(done.status, RunStatus::Succeeded);
            assert_eq!(done.pid, Some(4321), "the pid write came first");
            assert_eq!(done.duration_ms, Some(4));
        }
        other => panic!("expected a finished run, got {other:?}"),
    }
    assert!(
        matches!(results[2], Err(StoreError::NotRunning(_))),
        "{:?}",
        results[2]
    );
    assert!(
        matches!(results[3], Err(StoreError::RunNotFound(_))),
        "{:?}",
        results[3]
    );
    match &results[4] {
        Ok(RunWritten::Finished {
            run: done,
            loop_moved,
        }) => {
            assert!(
                !*loop_moved,
                "b has no attempts left and was advanced at its claim"
            );
            assert_eq!(done.status, RunStatus::Failed);
        }
        other => panic!("expected a finished run, got {other:?}"),
    }
    // The domain decided a's move inside the transaction, from the loop as stored and
    // its deferred retry (the older failed slot): retried one retry delay after the
    // finish.
    let a = f.store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(a.next_run_at, Some(t(5 + 60_000)));
    assert_eq!(a.retry_scheduled_for, Some(t(-60_000)));
    assert_eq!(f.store.get_run(&run.id).unwrap().unwrap().pid, Some(4321));
    assert!(f
        .store
        .record_run_writes(&[], t(9), None)
        .unwrap()
        .is_empty());
}

#[test]
fn background_maintenance_checkpoints_the_wal() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let store = SqliteStore::open(&path).unwrap();
    let db_len = || std::fs::metadata(&path).unwrap().len();
    let before = db_len();
    store.start_background_maintenance().unwrap();
    // Far fewer pages than SQLite's automatic checkpoint threshold: without the
    // background thread these would stay in the WAL.
    for i in 0..200 {
        store
            .create_loop(new_loop(&format!("loop-{i:03}"), Some(t(0))), t(0))
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while db_len() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL was not checkpointed into {} within 10 s",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A second start is a no-op, and the store keeps working.
    store.start_background_maintenance().unwrap();
    assert_eq!(store.list_loops(None).unwrap().len(), 200);
}

#[test]
fn background_checkpoints_rewind_the_wal_under_continuous_writes() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let wal = dir.path().join(format!("{DB_FILE}-wal"));
    let store = SqliteStore::open(&path).unwrap();
    store.start_background_maintenance().unwrap();
    let lp = store
        .create_loop(new_loop("busy", Some(t(0))), t(0))
        .unwrap();
    // The WAL header's checkpoint sequence number (bytes 12..16) changes each time
    // SQLite rewinds the WAL to its start.
    let sequence = || {
        let bytes = std::fs::read(&wal).unwrap_or_default();
        bytes
            .get(12..16)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    // Writes with no pause between them, as a busy daemon makes: the WAL must be
    // rewound again and again instead of growing for as long as the writes go on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut last, mut rewinds, mut writes) = (sequence(), 0, 0_u64);
    while rewinds < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL was rewound {rewinds} times in 60 s of writes ({writes} writes, {} bytes)",
            std::fs::metadata(&wal).map_or(0, |m| m.len())
        );
        for _ in 0..20 {
            let advance = LoopAdvance {
                status: LoopStatus::Active,
                next_run_at: Some(t(i64::try_from(writes).unwrap())),
                retry_scheduled_for: None,
            };
            store
                .update_loop_schedule(&lp.id, &advance, t(0), None)
                .unwrap();
            writes += 1;
        }
        let now = sequence();
        if now != last {
            rewinds += 1;
        }
        last = now;
    }
}

#[test]
fn heartbeat_extends_only_listed_rows_of_the_runner() {
    let f = fixture();
    let mut n = new_loop("a", Some(t(0)));
    n.policy.lease_ms = 1000;
    let a = f.store.create_loop(n, t(0)).unwrap();
    let mut n = new_loop("b", Some(t(0)));
    n.policy.lease_ms = 5000;
    let b = f.store.create_loop(n, t(0)).unwrap();

    let r1 = claim(&f.store, &claim_req(&a, t(0), t(0))).unwrap();
    let r2 = claim(&f.store, &claim_req(&b, t(0), t(0))).unwrap();
    let r3 = claim(&f.store, &claim_req(&a, t(60_000), t(0))).unwrap(); // not listed
    let mut other = claim_req(&b, t(60_000), t(0));
    other.runner_id = "runner-b".to_owned();
    let r4 = claim(&f.store, &other).unwrap(); // another runner's
    let r5 = claim(&f.store, &claim_req(&b, t(120_000), t(0))).unwrap();
    f.store
        .finalize_run(&r5.id, &outcome(RunStatus::Failed, t(1)), None)
        .unwrap(); // not running

    let listed = [r1.id.clone(), r2.id.clone(), r4.id.clone(), r5.id.clone()];
    let n = f
        .store
        .heartbeat_runs(&listed, "runner-a", t(500), None)
        .unwrap();
    assert_eq!(n, 2);
    let lease = |id: &RunId| f.store.get_run(id).unwrap().unwrap().lease_expires_at;
    assert_eq!(lease(&r1.id), Some(t(1500)));
    assert_eq!(lease(&r2.id), Some(t(5500)));
    assert_eq!(lease(&r3.id), Some(t(1000)));
    assert_eq!(lease(&r4.id), Some(t(5000)));
    assert_eq!(
        f.store
            .heartbeat_runs(&[], "runner-a", t(600), None)
            .unwrap(),
        0
    );
}

#[test]
fn expired_and_running_runs() {
    let f = fixture();
    let mut n = new_loop("a", Some(t(0)));
    n.policy.lease_ms = 1000;
    let a = f.store.create_loop(n, t(0)).unwrap();
    let mut n = new_loop("b", Some(t(0)));
    n.policy.lease_ms = 10_000;
    let b = f.store.create_loop(n, t(0)).unwrap();
    let ra = claim(&f.store, &claim_req(&a, t(0), t(0))).unwrap();
    let rb = claim(&f.store, &claim_req(&b, t(0), t(0))).unwrap();
    let done = claim(&f.store, &claim_req(&a, t(60_000), t(0))).unwrap();
    f.store
        .finalize_run(&done.id, &outcome(RunStatus::Succeeded, t(1)), None)
        .unwrap();

    assert!(f.store.expired_running_runs(t(999)).unwrap().is_empty());
    let expired = f.store.expired_running_runs(t(1000)).unwrap();
    assert_eq!(expired.iter().map(|r| &r.id).collect::<Vec<_>>(), [&ra.id]);
    let expired = f.store.expired_running_runs(t(20_000)).unwrap();
    assert_eq!(
        expired.iter().map(|r| &r.id).collect::<Vec<_>>(),
        [&ra.id, &rb.id]
    );

    let running = f.store.running_runs(None).unwrap();
    assert_eq!(running.len(), 2);
    let running_a = f.store.running_runs(Some(&a.id)).unwrap();
    assert_eq!(running_a.len(), 1);
    assert_eq!(running_a[0].id, ra.id);
}

#[test]
fn list_runs_newest_first_with_filter_and_limit() {
    let f = fixture();
    let a = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let b = f
        .store
        .create_loop(new_loop("b", Some(t(0))), t(0))
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let lp = if i % 2 == 0 { &a } else { &b };
        // Same creation instant for two rows: insertion order breaks the tie.
        let now = t(i / 2);
        let r = claim(&f.store, &claim_req(lp, t(i * 60_000), now)).unwrap();
        ids.push(r.id);
    }
    let all: Vec<_> = f
        .store
        .list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(all, expected);

    let limited = f
        .store
        .list_runs(&RunFilter {
            loop_id: None,
            limit: Some(2),
        })
        .unwrap();
    assert_eq!(limited.len(), 2);
    assert_eq!(limited[0].id, ids[4]);

    let of_a: Vec<_> = f
        .store
        .list_runs(&RunFilter {
            loop_id: Some(a.id.clone()),
            limit: None,
        })
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(of_a, [ids[4].clone(), ids[2].clone(), ids[0].clone()]);
}

#[test]
fn next_retryable_slot_finds_oldest_failed_slot_with_attempts_left() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let slot = |i: i64| t(i * 60_000);
    let fail = |s: Instant, status: RunStatus| {
        let r = claim(&f.store, &claim_req(&lp, s, s)).unwrap();
        f.store
            .finalize_run(&r.id, &outcome(status, s), None)
            .unwrap();
    };
    // slot 0: failed twice, then succeeded → done.
    fail(slot(0), RunStatus::Failed);
    fail(slot(0), RunStatus::Failed);
    fail(slot(0), RunStatus::Succeeded);
    // slot 1: failed 3 times → out of attempts.
    for _ in 0..3 {
        fail(slot(1), RunStatus::Failed);
    }
    // slot 2: timed out once → retryable.
    fail(slot(2), RunStatus::TimedOut);
    // slot 3: abandoned once → retryable.
    fail(slot(3), RunStatus::Abandoned);
    // slot 4: failed once, retry currently running → not retryable.
    fail(slot(4), RunStatus::Failed);
    claim(&f.store, &claim_req(&lp, slot(4), slot(4))).unwrap();
    // ad hoc failure → ignored.
    let mut adhoc = claim_req(&lp, t(-5), t(-5));
    adhoc.source = RunSource::AdHoc;
    let r = claim(&f.store, &adhoc).unwrap();
    f.store
        .finalize_run(&r.id, &outcome(RunStatus::Failed, t(-4)), None)
        .unwrap();

    let next = |except: Instant| f.store.next_retryable_slot(&lp.id, 3, except).unwrap();
    assert_eq!(next(slot(99)), Some(slot(2)));
    assert_eq!(next(slot(2)), Some(slot(3)));
    // With fewer attempts allowed, the once-failed slots are exhausted too.
    assert_eq!(
        f.store.next_retryable_slot(&lp.id, 1, slot(99)).unwrap(),
        None
    );
    assert_eq!(
        f.store.next_retryable_slot(&lp.id, 2, slot(99)).unwrap(),
        Some(slot(2))
    );
}

// ---- pruning ----

#[test]
fn prune_policies() {
    let f = fixture();
    let a = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let b = f
        .store
        .create_loop(new_loop("b", Some(t(0))), t(0))
        .unwrap();
    // 5 finished runs per loop at t(i*1000), plus one running row each (oldest).
    let mut running = Vec::new();
    for lp in [&a, &b] {
        running.push(
            claim(&f.store, &claim_req(lp, t(-60_000), t(-60_000)))
                .unwrap()
                .id,
        );
        for i in 0..5 {
            let r = claim(&f.store, &claim_req(lp, t(i * 60_000), t(i * 1000))).unwrap();
            f.store
                .finalize_run(
                    &r.id,
                    &outcome(RunStatus::Succeeded, t(i * 1000 + 10)),
                    None,
                )
                .unwrap();
        }
    }
    assert_eq!(run_count(&f.store), 12);

    // No rule: nothing.
    assert_eq!(
        f.store.prune_runs(&PrunePolicy::default(), false).unwrap(),
        0
    );

    // Age only: finished before t(2000) → i = 0, 1 per loop.
    let age = PrunePolicy {
        older_than: Some(t(2000)),
        keep_per_loop: None,
    };
    assert_eq!(f.store.prune_runs(&age, true).unwrap(), 4);
    assert_eq!(run_count(&f.store), 12, "dry run deletes nothing");
    assert_eq!(f.store.prune_runs(&age, false).unwrap(), 4);
    assert_eq!(run_count(&f.store), 8);

    // Keep only: keep 2 newest finished per loop → deletes i = 2 per loop.
    let keep = PrunePolicy {
        older_than: None,
        keep_per_loop: Some(2),
    };
    assert_eq!(f.store.prune_runs(&keep, true).unwrap(), 2);
    assert_eq!(f.store.prune_runs(&keep, false).unwrap(), 2);
    let left: Vec<_> = f.store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(left.len(), 6);
    for id in &running {
        assert!(left.iter().any(|r| &r.id == id), "running rows are kept");
    }

    // Both: either rule deletes. keep 5 (no-op) OR older than t(4000) → i = 3 per loop.
    let both = PrunePolicy {
        older_than: Some(t(4000)),
        keep_per_loop: Some(5),
    };
    assert_eq!(f.store.prune_runs(&both, false).unwrap(), 2);
    // keep 0 deletes every finished row, never running ones.
    let all = PrunePolicy {
        older_than: Some(t(0)),
        keep_per_loop: Some(0),
    };
    assert_eq!(f.store.prune_runs(&all, false).unwrap(), 2);
    let left = f.store.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|r| r.status == RunStatus::Running));
}

// ---- daemon lease and fencing ----

#[test]
fn daemon_lease_lifecycle() {
    let f = fixture();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    assert!(f.store.current_daemon_lease().unwrap().is_none());

    let l1 = acquired(
        f.store
            .acquire_daemon_lease(&holder("d1"), 1000, t(0), &never)
            .unwrap(),
    );
    assert_eq!(l1.token, 1);
    assert_eq!(l1.holder, holder("d1"));
    assert_eq!(l1.acquired_at, t(0));
    assert_eq!(l1.heartbeat_at, t(0));
    assert_eq!(l1.expires_at, t(1000));
    assert_eq!(f.store.current_daemon_lease().unwrap(), Some(l1.clone()));

    // Held by d1: d2 is refused and sees the holder.
    match f
        .store
        .acquire_daemon_lease(&holder("d2"), 1000, t(500), &never)
        .unwrap()
    {
        LeaseAcquire::Held(l) => assert_eq!(l, l1),
        other => panic!("{other:?}"),
    }

    // Heartbeat extends.
    let fence1 = Fence { token: l1.token };
    assert!(f
        .store
        .heartbeat_daemon_lease(&fence1, 1000, t(900))
        .unwrap());
    let cur = f.store.current_daemon_lease().unwrap().unwrap();
    assert_eq!(cur.heartbeat_at, t(900));
    assert_eq!(cur.expires_at, t(1900));
    assert_eq!(cur.acquired_at, t(0));

    // Same runner re-acquires: new token.
    let l1b = acquired(
        f.store
            .acquire_daemon_lease(&holder("d1"), 1000, t(950), &never)
            .unwrap(),
    );
    assert_eq!(l1b.token, 2);
    assert!(!f
        .store
        .heartbeat_daemon_lease(&fence1, 1000, t(960))
        .unwrap());

    // Takeover callback says the holder is gone.
    let l2 = acquired(
        f.store
            .acquire_daemon_lease(&holder("d2"), 1000, t(1000), &always)
            .unwrap(),
    );
    assert_eq!(l2.token, 3);
    assert_eq!(l2.holder.runner_id, "d2");

    // Expired: anyone acquires without takeover.
    let l3 = acquired(
        f.store
            .acquire_daemon_lease(&holder("d3"), 1000, t(2000), &never)
            .unwrap(),
    );
    assert_eq!(l3.token, 4);
    let fence3 = Fence { token: 4 };
    // Expired but taken by nobody: still d3's, and its heartbeat renews it (a daemon
    // whose writes failed on a full disk resumes once they work again).
    assert!(f
        .store
        .heartbeat_daemon_lease(&fence3, 1000, t(3000))
        .unwrap());
    assert_eq!(
        f.store.current_daemon_lease().unwrap().unwrap().expires_at,
        t(4000)
    );

    // Release by a stale fence is a no-op; by the holder removes it.
    let l4 = acquired(
        f.store
            .acquire_daemon_lease(&holder("d3"), 1000, t(4000), &never)
            .unwrap(),
    );
    // Once someone else holds it, the old fence's heartbeat fails.
    assert!(!f
        .store
        .heartbeat_daemon_lease(&fence3, 1000, t(4001))
        .unwrap());
    f.store.release_daemon_lease(&fence3).unwrap();
    assert_eq!(f.store.current_daemon_lease().unwrap(), Some(l4.clone()));
    f.store
        .release_daemon_lease(&Fence { token: l4.token })
        .unwrap();
    assert!(f.store.current_daemon_lease().unwrap().is_none());

    // Tokens keep growing after a release.
    let l5 = acquired(
        f.store
            .acquire_daemon_lease(&holder("d9"), 1000, t(3100), &never)
            .unwrap(),
    );
    assert!(l5.token > l4.token);
}

#[test]
fn takeover_is_only_asked_about_a_live_foreign_holder() {
    let f = fixture();
    let asked = std::cell::Cell::new(0);
    let count = |_: &DaemonLease| {
        asked.set(asked.get() + 1);
        false
    };
    acquired(
        f.store
            .acquire_daemon_lease(&holder("d1"), 1000, t(0), &count)
            .unwrap(),
    );
    assert_eq!(asked.get(), 0);
    let _ = f
        .store
        .acquire_daemon_lease(&holder("d2"), 1000, t(10), &count)
        .unwrap();
    assert_eq!(asked.get(), 1);
    acquired(
        f.store
            .acquire_daemon_lease(&holder("d2"), 1000, t(5000), &count)
            .unwrap(),
    );
    assert_eq!(asked.get(), 1);
}

#[test]
fn fenced_writes_after_losing_the_lease_write_nothing() {
    let f = fixture();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    let lp = f
        .store
        .create_loop(with_attempts(new_loop("a", Some(t(0))), 3), t(0))
        .unwrap();
    let mut n = new_loop("exp", Some(t(0)));
    n.policy.expires_at = Some(t(1));
    let expiring = f.store.create_loop(n, t(0)).unwrap();

    let old = acquired(
        f.store
            .acquire_daemon_lease(&holder("d1"), 60_000, t(0), &never)
            .unwrap(),
    );
    let old_fence = Fence { token: old.token };

    // While held, fenced writes apply.
    let running = f
        .store
        .claim_run(&claim_req(&lp, t(0), t(10)), Some(&old_fence))
        .unwrap()
        .unwrap();

    // Another daemon takes over.
    let new = acquired(
        f.store
            .acquire_daemon_lease(&holder("d2"), 60_000, t(20), &always)
            .unwrap(),
    );
    assert_ne!(new.token, old.token);

    let before_loop = f.store.get_loop(&lp.id).unwrap().unwrap();
    let before_runs = f.store.list_runs(&RunFilter::default()).unwrap();
    let lost = |r: Result<(), StoreError>| {
        assert!(matches!(r, Err(StoreError::LeaseLost)), "{r:?}");
    };
    let now = t(30);
    lost(
        f.store
            .claim_run(&claim_req(&lp, t(60_000), now), Some(&old_fence))
            .map(|_| ()),
    );
    lost(
        f.store
            .record_skipped_run(&lp, t(60_000), "busy", now, Some(&old_fence))
            .map(|_| ()),
    );
    lost(
        f.store
            .mark_run_pid(&running.id, 99, None, now, Some(&old_fence)),
    );
    lost(
        f.store
            .heartbeat_runs(
                std::slice::from_ref(&running.id),
                "runner-a",
                now,
                Some(&old_fence),
            )
            .map(|_| ()),
    );
    lost(
        f.store
            .finalize_run(
                &running.id,
                &outcome(RunStatus::Failed, now),
                Some(&old_fence),
            )
            .map(|_| ()),
    );
    let advance = LoopAdvance {
        status: LoopStatus::Stopped,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    lost(
        f.store
            .update_loop_schedule(&lp.id, &advance, now, Some(&old_fence))
            .map(|_| ()),
    );
    lost(f.store.expire_loops(t(100), Some(&old_fence)).map(|_| ()));
    lost(
        f.store
            .claim_runs(
                &[BatchClaim {
                    request: claim_req(&lp, t(60_000), now),
                    advance: None,
                    skip_slots: vec![],
                }],
                Some(&old_fence),
            )
            .map(|_| ()),
    );
    let writes = [
        RunWrite::Spawned {
            run: running.id.clone(),
            pid: 99,
            pid_start_time: None,
            at: now,
        },
        RunWrite::Finished {
            run: running.id.clone(),
            outcome: outcome(RunStatus::Failed, now),
        },
    ];
    lost(
        f.store
            .record_run_writes(&writes, now, Some(&old_fence))
            .map(|_| ()),
    );
    assert!(!f
        .store
        .heartbeat_daemon_lease(&old_fence, 60_000, now)
        .unwrap());

    assert_eq!(f.store.get_loop(&lp.id).unwrap().unwrap(), before_loop);
    assert_eq!(
        f.store.get_loop(&expiring.id).unwrap().unwrap().status,
        LoopStatus::Active
    );
    assert_eq!(
        f.store.list_runs(&RunFilter::default()).unwrap(),
        before_runs
    );

    // The new holder's fence works, even past its expiry while nobody took it over.
    let new_fence = Fence { token: new.token };
    f.store
        .finalize_run(
            &running.id,
            &outcome(RunStatus::Failed, now),
            Some(&new_fence),
        )
        .unwrap();
    f.store
        .expire_loops(t(20 + 60_000), Some(&new_fence))
        .unwrap();
    // Taken over by a third daemon: now it fails.
    acquired(
        f.store
            .acquire_daemon_lease(&holder("d3"), 60_000, t(20 + 60_001), &never)
            .unwrap(),
    );
    lost(
        f.store
            .update_loop_schedule(&lp.id, &advance, t(20 + 60_002), Some(&new_fence))
            .map(|_| ()),
    );
}

// ---- the file ----

#[test]
fn corrupt_file_is_rejected_and_left_untouched() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let mut bytes = Vec::with_capacity(8192);
    let mut x: u32 = 0x1234_5678;
    for _ in 0..8192 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push(x as u8);
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_no_sidecars(&path);

    // A valid header followed by garbage: SQLite itself rejects it, read-only.
    let mut bytes2 = b"SQLite format 3\0".to_vec();
    bytes2.extend_from_slice(&bytes[..4096]);
    std::fs::write(&path, &bytes2).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes2);
    assert_no_sidecars(&path);

    // Short text file.
    std::fs::write(&path, b"hello").unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"hello");
}

#[test]
fn foreign_sqlite_database_is_rejected_untouched() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('x');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

fn assert_no_sidecars(path: &Path) {
    for suffix in ["-wal", "-shm", "-journal"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        assert!(!side.exists(), "{} was created", side.display());
    }
}

#[test]
fn migrations_are_recorded_and_newer_schemas_rejected() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store.create_loop(new_loop("kept", None), t(0)).unwrap();
    }
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let (version, name, applied): (i64, String, String) = conn
            .query_row(
                "SELECT version, name, applied_at FROM schema_migrations ORDER BY version LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(version, 1);
        assert_eq!(name, "initial");
        assert!(applied.ends_with('Z'), "{applied}");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    // Reopening keeps data and does not re-run migrations.
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.list_loops(None).unwrap().len(), 1);
        assert_eq!(store.integrity_check().unwrap(), ["ok"]);
    }
    // A newer build's schema.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'future', 'x')",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    match &err {
        StoreError::TooNew { found, known, .. } => {
            assert_eq!(*found, SCHEMA_VERSION + 1);
            assert_eq!(*known, SCHEMA_VERSION);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn file_and_dir_modes() {
    use std::os::unix::fs::PermissionsExt;
    let root = TempDir::new().unwrap();
    let dir = root.path().join("nested").join("loops");
    loops_store::prepare_data_dir(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let path = dir.join(DB_FILE);
    let store = SqliteStore::open(&path).unwrap();
    store.create_loop(new_loop("a", None), t(0)).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // An existing directory open to its group is tightened (issue #9: another user
    // must never be able to plant a database in it).
    let own = root.path().join("own");
    std::fs::create_dir(&own).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o750)).unwrap();
    loops_store::prepare_data_dir(&own).unwrap();
    let mode = std::fs::metadata(&own).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    // A file in the way.
    let file = root.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = loops_store::prepare_data_dir(&file).unwrap_err();
    assert!(matches!(err, StoreError::DataDir { .. }), "{err:?}");
}

#[cfg(unix)]
#[test]
fn read_only_dir_gives_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let root = TempDir::new().unwrap();
    let dir = root.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    // Root ignores directory permissions: nothing to test then.
    let probe = dir.join("probe");
    if std::fs::write(&probe, b"x").is_ok() {
        eprintln!(
            "note: running with privileges that ignore file modes (root?); read-only check skipped"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        return;
    }
    let path = dir.join(DB_FILE);
    let err = SqliteStore::open(&path).unwrap_err();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("read-only"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn list_loops_scales() {
    let store = SqliteStore::open_in_memory().unwrap();
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    let file_store = SqliteStore::open(&path).unwrap();
    for s in [&store, &file_store] {
        for i in 0..10_000 {
            s.create_loop(new_loop(&format!("loop-{i:05}"), Some(t(i))), t(0))
                .unwrap();
        }
    }
    let started = std::time::Instant::now();
    let loops = file_store.list_loops(None).unwrap();
    let took = started.elapsed();
    assert_eq!(loops.len(), 10_000);
    assert_eq!(loops[0].name, "loop-00000");
    // Generous for unoptimized builds; a regression to per-row queries is far slower.
    assert!(
        took < std::time::Duration::from_secs(2),
        "list_loops took {took:?}"
    );
    assert_eq!(store.due_loops(t(9), 100).unwrap().len(), 10);
}

#[test]
fn hot_queries_use_indexes() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join(DB_FILE);
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(|r| r.unwrap())
            .collect::<Vec<_>>();
        rows.join(" | ")
    };
    let p = plan("SELECT id FROM loops WHERE status = 'active' AND next_run_at <= 5 ORDER BY next_run_at LIMIT 10");
    assert!(p.contains("loops_due") && !p.contains("TEMP B-TREE"), "{p}");
    let p = plan("SELECT next_run_at FROM loops WHERE status = 'active' AND next_run_at IS NOT NULL ORDER BY next_run_at LIMIT 1");
    assert!(p.contains("loops_due") && !p.contains("TEMP B-TREE"), "{p}");
    let p = plan(
        "SELECT id FROM runs WHERE loop_id = 'x' ORDER BY created_at DESC, rowid DESC LIMIT 5",
    );
    assert!(
        p.contains("runs_loop_created") && !p.contains("TEMP B-TREE"),
        "{p}"
    );
    let p = plan("SELECT id FROM runs WHERE status = 'running' AND lease_expires_at <= 5 ORDER BY lease_expires_at");
    assert!(p.contains("runs_running_lease"), "{p}");
    let p = plan("UPDATE loops INDEXED BY loops_expiry SET status = 'expired' WHERE status = 'active' AND expires_at IS NOT NULL AND expires_at <= 5");
    assert!(p.contains("loops_expiry"), "{p}");
    let p = plan("SELECT f.scheduled_for FROM runs f WHERE f.loop_id = 'x' AND f.status IN ('failed', 'timed_out', 'abandoned') AND f.attempt < 3 ORDER BY f.scheduled_for LIMIT 1");
    assert!(p.contains("runs_failed_slot"), "{p}");
}

#[cfg(unix)]
#[test]
fn read_only_existing_database_gives_a_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let root = TempDir::new().unwrap();
    let dir = root.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join(DB_FILE);
    drop(SqliteStore::open(&path).unwrap());
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set(&path, 0o400);
    if std::fs::OpenOptions::new().write(true).open(&path).is_ok() {
        eprintln!(
            "note: running with privileges that ignore file modes (root?); read-only check skipped"
        );
        return;
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    eprintln!("read-only file: {err}");
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only"));
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // Writable file in a read-only directory (SQLite cannot create -wal/-shm).
    set(&path, 0o600);
    set(&dir, 0o500);
    let result = SqliteStore::open(&path);
    set(&dir, 0o700);
    let err = result.unwrap_err();
    eprintln!("read-only dir: {err}");
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only"));
}

#[test]
fn claim_and_advance_is_one_write() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(60_000)),
        retry_scheduled_for: None,
    };
    let run = f
        .store
        .claim_run_and_advance(&claim_req(&lp, t(0), t(5)), Some(&advance), None)
        .unwrap()
        .unwrap();
    assert_eq!(run.attempt, 1);
    let after = f.store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(t(60_000)));
    assert_eq!(after.updated_at, t(5));

    // Refused: the loop is untouched.
    let other = LoopAdvance {
        status: LoopStatus::Stopped,
        next_run_at: None,
        retry_scheduled_for: None,
    };
    let refused = f
        .store
        .claim_run_and_advance(&claim_req(&lp, t(0), t(6)), Some(&other), None)
        .unwrap();
    assert_eq!(refused, Err(ClaimRefused::SlotRunning));
    assert_eq!(f.store.get_loop(&lp.id).unwrap().unwrap(), after);

    // Fenced with a lease another daemon took over: nothing written.
    let never = |_: &DaemonLease| false;
    let l = acquired(
        f.store
            .acquire_daemon_lease(&holder("d1"), 10, t(0), &never)
            .unwrap(),
    );
    acquired(
        f.store
            .acquire_daemon_lease(&holder("d2"), 10, t(20), &never)
            .unwrap(),
    );
    let err = f
        .store
        .claim_run_and_advance(
            &claim_req(&lp, t(60_000), t(60_000)),
            Some(&other),
            Some(&Fence { token: l.token }),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost), "{err:?}");
    assert_eq!(f.store.get_loop(&lp.id).unwrap().unwrap(), after);
    assert_eq!(run_count(&f.store), 1);
}

// ---- loops that cannot be scheduled, adoption ----

/// Overwrites one column of a loop row with raw SQL, as a newer or older build (or a
/// hand edit) might have left it.
fn poke_loop_column(f: &Fixture, id: &LoopId, column: &str, value: &str) {
    let path = f._dir.path().join(DB_FILE);
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        &format!("UPDATE loops SET {column} = ?1 WHERE id = ?2"),
        rusqlite::params![value, id.as_str()],
    )
    .unwrap();
}

#[test]
fn due_loops_reports_an_unreadable_row_in_its_place() {
    let f = fixture();
    let good = f
        .store
        .create_loop(new_loop("good", Some(t(10))), t(0))
        .unwrap();
    let bad = f
        .store
        .create_loop(new_loop("bad", Some(t(5))), t(0))
        .unwrap();
    poke_loop_column(&f, &bad.id, "catch_up", "sometimes");
    let due = f.store.due_loops(t(100), 10).unwrap();
    assert_eq!(due.len(), 2, "the bad row does not hide the good one");
    let unreadable = due[0].as_ref().unwrap_err();
    assert_eq!(unreadable.id, bad.id);
    assert_eq!(unreadable.name, "bad");
    assert!(unreadable.error.contains("catch_up"), "{unreadable:?}");
    assert_eq!(due[1].as_ref().unwrap().id, good.id);
}

#[test]
fn park_loop_pauses_it_and_records_why_in_one_write() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("tz", Some(t(10))), t(0))
        .unwrap();
    let run = f
        .store
        .park_loop(&lp.id, "cannot parse", t(20), None)
        .unwrap()
        .expect("parked");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.scheduled_for, t(10), "at the slot it could not run");
    assert_eq!(run.error.as_deref(), Some("cannot parse"));
    assert_eq!(run.attempt, 1);
    let parked = f.store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(parked.status, LoopStatus::Paused);
    assert_eq!(
        parked.next_run_at,
        Some(t(10)),
        "resume tries the slot again"
    );
    assert!(f.store.due_loops(t(100), 10).unwrap().is_empty());
    assert_eq!(
        f.store.next_due_at().unwrap(),
        None,
        "no longer wakes anyone"
    );
    // Parking again (no longer active) changes nothing.
    assert!(f
        .store
        .park_loop(&lp.id, "again", t(30), None)
        .unwrap()
        .is_none());
    assert_eq!(run_count(&f.store), 1);
    // Fenced like every daemon write.
    let other = f
        .store
        .create_loop(new_loop("other", Some(t(10))), t(0))
        .unwrap();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    let old = acquired(
        f.store
            .acquire_daemon_lease(&holder("d1"), 60_000, t(0), &never)
            .unwrap(),
    );
    acquired(
        f.store
            .acquire_daemon_lease(&holder("d2"), 60_000, t(1), &always)
            .unwrap(),
    );
    let err = f
        .store
        .park_loop(&other.id, "x", t(40), Some(&Fence { token: old.token }))
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost), "{err:?}");
    assert_eq!(
        f.store.get_loop(&other.id).unwrap().unwrap().status,
        LoopStatus::Active
    );
}

#[test]
fn take_over_run_moves_a_running_row_to_a_new_runner() {
    let f = fixture();
    let lp = f
        .store
        .create_loop(new_loop("a", Some(t(0))), t(0))
        .unwrap();
    let run = claim(&f.store, &claim_req(&lp, t(0), t(1)));
    let run = run.unwrap();
    assert_eq!(run.claimed_by.as_deref(), Some("runner-a"));
    // Only from the runner that holds it.
    let err = f
        .store
        .take_over_run(&run.id, Some("runner-x"), "runner-b", t(5), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning(_)), "{err:?}");
    let moved = f
        .store
        .take_over_run(&run.id, Some("runner-a"), "runner-b", t(5), None)
        .unwrap();
    assert_eq!(moved.claimed_by.as_deref(), Some("runner-b"));
    assert_eq!(
        moved.lease_expires_at,
        Some(t(5) + chrono::TimeDelta::milliseconds(lp.lease_ms as i64))
    );
    // The new runner's heartbeat now renews it.
    let renewed = f
        .store
        .heartbeat_runs(std::slice::from_ref(&run.id), "runner-b", t(9), None)
        .unwrap();
    assert_eq!(renewed, 1);
    // A finished row cannot be taken.
    f.store
        .finalize_run(&run.id, &outcome(RunStatus::Succeeded, t(10)), None)
        .unwrap();
    let err = f
        .store
        .take_over_run(&run.id, Some("runner-b"), "runner-c", t(11), None)
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning(_)), "{err:?}");
}

#[test]
fn transient_errors_are_told_apart() {
    let full = StoreError::Sqlite(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
        None,
    ));
    assert!(full.is_transient());
    let busy = StoreError::Sqlite(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
        None,
    ));
    assert!(busy.is_transient());
    assert!(!StoreError::LeaseLost.is_transient());
    assert!(!StoreError::NotRunning("x".into()).is_transient());
    let corrupt = StoreError::Sqlite(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
        None,
    ));
    assert!(!corrupt.is_transient());
}
