//! The engine and the daemon loop in-process, with an injected clock: the scheduling
//! decisions (which slot is claimed, catch-up, overlap, parking, clock jumps, run-now)
//! without starting the binary or waiting for real slots. Runs are real processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::TimeDelta;
use loops_core::{
    Anchor, CommandTarget, Instant, LoopStatus, NewLoop, Policy, RunSource, RunStatus, Schedule,
    Target,
};
use loops_runtime::clock::{Clock, ManualClock};
use loops_runtime::daemon::{self, DaemonConfig};
use loops_runtime::engine::{Engine, EngineConfig, EngineError};
use loops_sqlite::SqliteStore;
use loops_store::{LoopAdvance, RunFilter, Store};
use std::sync::Arc;
use std::time::Duration;

/// Now, to the millisecond (what the store keeps).
fn t0() -> Instant {
    let now = chrono::Utc::now().timestamp_millis();
    chrono::DateTime::from_timestamp_millis(now).unwrap()
}

fn every(name: &str, every_ms: u64, cmd: &str, next: Instant) -> NewLoop {
    NewLoop {
        name: name.to_owned(),
        description: None,
        schedule: Schedule::Interval {
            every_ms,
            anchor: Anchor::FixedRate,
        },
        target: Target::Command(CommandTarget {
            command: cmd.to_owned(),
            args: vec![],
            cwd: None,
            shell: true,
            env: Default::default(),
            timeout: None,
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
        next_run_at: Some(next),
    }
}

struct World {
    dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
}

fn world(start: Instant) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("loops.db")).unwrap());
    World {
        dir,
        store,
        clock: Arc::new(ManualClock::new(start)),
    }
}

impl World {
    fn engine(&self) -> Arc<Engine> {
        Engine::new(
            Arc::clone(&self.store),
            EngineConfig::for_data_dir(self.dir.path()),
            Arc::clone(&self.clock) as Arc<dyn Clock>,
        )
        .unwrap()
    }

    fn gate(&self) -> (std::path::PathBuf, String) {
        let gate = self.dir.path().join("gate");
        let cmd = format!(
            "n=0; while [ ! -e {} ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done",
            gate.display()
        );
        (gate, cmd)
    }
}

/// Polls `cond` every 10 ms until it holds or `within` passes.
async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_follow_the_injected_clock_and_latest_catch_up_coalesces() {
    let start = t0();
    let w = world(start);
    let minute = 60_000;
    let lp = w
        .store
        .create_loop(
            every("tick", minute, "true", start + TimeDelta::minutes(1)),
            start,
        )
        .unwrap();
    let engine = w.engine();
    assert!(engine.pass(true).unwrap().claimed.is_empty(), "not due yet");

    w.clock.set(start + TimeDelta::minutes(1));
    let report = engine.pass(true).unwrap();
    assert_eq!(report.claimed.len(), 1);
    engine.drain().await;
    let run = w.store.get_run(&report.claimed[0]).unwrap().unwrap();
    assert_eq!(run.scheduled_for, start + TimeDelta::minutes(1));
    assert_eq!(run.status, RunStatus::Succeeded);
    let after = w.store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(start + TimeDelta::minutes(2)));

    // Ten minutes of downtime: `latest` runs the newest missed slot once, on the grid.
    w.clock.set(start + TimeDelta::seconds(11 * 60 + 30));
    let report = engine.pass(true).unwrap();
    assert_eq!(report.claimed.len(), 1);
    engine.drain().await;
    let run = w.store.get_run(&report.claimed[0]).unwrap().unwrap();
    assert_eq!(run.scheduled_for, start + TimeDelta::minutes(11));
    let after = w.store.get_loop(&lp.id).unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(start + TimeDelta::minutes(12)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_records_a_skipped_slot_while_a_run_is_in_flight() {
    let start = t0();
    let w = world(start);
    let (gate, cmd) = w.gate();
    let lp = w
        .store
        .create_loop(every("slow", 1_000, &cmd, start), start)
        .unwrap();
    let engine = w.engine();
    assert_eq!(engine.pass(true).unwrap().claimed.len(), 1);
    w.clock.advance(Duration::from_secs(1));
    let report = engine.pass(true).unwrap();
    assert!(report.claimed.is_empty());
    assert_eq!(report.skipped.len(), 1);
    let skipped = w.store.get_run(&report.skipped[0]).unwrap().unwrap();
    assert_eq!(skipped.status, RunStatus::Skipped);
    assert_eq!(skipped.scheduled_for, start + TimeDelta::seconds(1));
    std::fs::write(&gate, b"open").unwrap();
    engine.drain().await;
    let runs = w
        .store
        .list_runs(&RunFilter {
            loop_id: Some(lp.id),
            limit: None,
            ..RunFilter::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_that_cannot_be_scheduled_is_parked_and_the_others_are_claimed() {
    let start = t0();
    let w = world(start);
    let mut bad = every("bad", 1_000, "true", start);
    bad.schedule = Schedule::Cron {
        expression: "* * * * *".into(),
        timezone: "Mars/Olympus_Mons".into(),
    };
    let bad = w.store.create_loop(bad, start).unwrap();
    let good = w
        .store
        .create_loop(every("good", 1_000, "true", start), start)
        .unwrap();
    let engine = w.engine();
    let report = engine.pass(true).unwrap();
    assert_eq!(report.parked, vec![bad.id.clone()]);
    assert_eq!(report.claimed.len(), 1);
    engine.drain().await;
    assert_eq!(
        w.store
            .get_run(&report.claimed[0])
            .unwrap()
            .unwrap()
            .loop_id,
        good.id
    );
    let parked = w.store.get_loop(&bad.id).unwrap().unwrap();
    assert_eq!(parked.status, LoopStatus::Paused);
    // Said once: the next pass does not see it again.
    w.clock.advance(Duration::from_secs(1));
    let report = engine.pass(true).unwrap();
    assert!(report.parked.is_empty());
    engine.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backwards_clock_jump_moves_loops_left_far_ahead() {
    let start = t0();
    let w = world(start);
    let ahead = w
        .store
        .create_loop(
            every("ahead", 60_000, "true", start + TimeDelta::days(1)),
            start,
        )
        .unwrap();
    let fine = w
        .store
        .create_loop(
            every("fine", 60_000, "true", start + TimeDelta::seconds(30)),
            start,
        )
        .unwrap();
    let engine = w.engine();
    let moved = engine.replan_after_clock_jump().unwrap();
    assert_eq!(moved, vec![ahead.id.clone()]);
    assert_eq!(
        w.store.get_loop(&ahead.id).unwrap().unwrap().next_run_at,
        Some(start + TimeDelta::minutes(1))
    );
    assert_eq!(
        w.store.get_loop(&fine.id).unwrap().unwrap().next_run_at,
        Some(start + TimeDelta::seconds(30))
    );
}

/// Re-planning reads the loops a page at a time and goes on past a row it cannot
/// read, its name included: before, one undecodable row made the whole re-plan fail
/// and no loop moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backwards_clock_jump_moves_every_page_of_loops_past_an_unreadable_row() {
    let start = t0();
    let w = world(start);
    let bad = w
        .store
        .create_loop(every("a-bad", 60_000, "true", start), start)
        .unwrap();
    let mut ahead = Vec::new();
    // 4,401 loops: three pages; every 100th left a day ahead, every 7th paused.
    for i in 0..4_401 {
        let next = if i % 100 == 0 {
            start + TimeDelta::days(1)
        } else {
            start + TimeDelta::seconds(30)
        };
        let lp = w
            .store
            .create_loop(every(&format!("b-{i:04}"), 60_000, "true", next), start)
            .unwrap();
        if i % 100 == 0 && i % 7 != 0 {
            ahead.push(lp.id);
        } else if i % 7 == 0 {
            w.store
                .update_loop_schedule(
                    &lp.id,
                    &LoopAdvance {
                        status: LoopStatus::Paused,
                        next_run_at: lp.next_run_at,
                        retry_scheduled_for: None,
                    },
                    start,
                    None,
                )
                .unwrap();
        }
    }
    let conn = rusqlite::Connection::open(w.dir.path().join("loops.db")).unwrap();
    conn.execute(
        "UPDATE loops SET schedule_json = 'not json' WHERE id = ?1",
        [bad.id.as_str()],
    )
    .unwrap();
    // A name that is not UTF-8 cannot be read either, and this one is the last row of
    // the first page: the next page cannot start after it (it spun there, or started
    // over, before the walk skipped such rows by count).
    conn.execute(
        "UPDATE loops SET name = CAST(X'622d31393938ff' AS TEXT) WHERE name = 'b-1998'",
        [],
    )
    .unwrap();
    drop(conn);
    let engine = w.engine();
    // On a thread of its own, so a walk that never ends fails here instead of hanging.
    let (done, replanned) = std::sync::mpsc::channel();
    let walker = Arc::clone(&engine);
    std::thread::spawn(move || done.send(walker.replan_after_clock_jump()));
    let mut moved = replanned
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the re-plan ends")
        .unwrap();
    moved.sort();
    ahead.sort();
    assert_eq!(moved, ahead);
    for id in &ahead {
        assert_eq!(
            w.store.get_loop(id).unwrap().unwrap().next_run_at,
            Some(start + TimeDelta::minutes(1))
        );
    }
    // Nothing is left to move.
    assert!(engine.replan_after_clock_jump().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_refuses_a_second_run_of_a_skip_loop_unless_allowed() {
    let start = t0();
    let w = world(start);
    let (gate, cmd) = w.gate();
    let lp = w
        .store
        .create_loop(
            every("slow", 3_600_000, &cmd, start + TimeDelta::hours(1)),
            start,
        )
        .unwrap();
    let engine = w.engine();
    let first = {
        let engine = Arc::clone(&engine);
        let lp = lp.clone();
        tokio::spawn(async move { engine.run_now(&lp, false).await })
    };
    let store = Arc::clone(&w.store);
    let id = lp.id.clone();
    until("the first run", Duration::from_secs(10), || {
        store.running_runs(Some(&id)).unwrap().len() == 1
    })
    .await;
    match engine.run_now(&lp, false).await {
        Err(EngineError::Busy { name, .. }) => assert_eq!(name, "slow"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert_eq!(w.store.running_runs(Some(&lp.id)).unwrap().len(), 1);
    let second = {
        let engine = Arc::clone(&engine);
        let lp = lp.clone();
        tokio::spawn(async move { engine.run_now(&lp, true).await })
    };
    until("the overlapping run", Duration::from_secs(10), || {
        store.running_runs(Some(&id)).unwrap().len() == 2
    })
    .await;
    std::fs::write(&gate, b"open").unwrap();
    let (run, source) = first.await.unwrap().unwrap();
    assert_eq!(source, RunSource::AdHoc);
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(
        second.await.unwrap().unwrap().0.status,
        RunStatus::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_loop_runs_due_loops_and_stops_cleanly_on_shutdown() {
    let start = t0();
    let w = world(start);
    let lp = w
        .store
        .create_loop(every("job", 1_000, "true", start), start)
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(daemon::run_with_clock(
        Arc::clone(&w.store),
        DaemonConfig::new(w.dir.path()),
        Arc::clone(&w.clock) as Arc<dyn Clock>,
        async {
            let _ = stopped.await;
            daemon::Stop::Detach
        },
    ));
    let store = Arc::clone(&w.store);
    let id = lp.id.clone();
    let succeeded = move || {
        store
            .list_runs(&RunFilter {
                loop_id: Some(id.clone()),
                limit: None,
                ..RunFilter::default()
            })
            .unwrap()
            .iter()
            .filter(|r| r.status == RunStatus::Succeeded)
            .count()
    };
    until("the due slot to run", Duration::from_secs(10), || {
        succeeded() == 1
    })
    .await;
    // The next slot is one second away on the injected clock: move it and wake the
    // daemon, which runs it without waiting for a real second.
    w.clock.advance(Duration::from_secs(1));
    loops_runtime::wake::poke(w.dir.path());
    until("the next slot", Duration::from_secs(10), || {
        succeeded() == 2
    })
    .await;
    let lease = w.store.current_daemon_lease().unwrap();
    assert!(lease.is_some(), "the daemon holds the lease while it runs");
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();
    assert!(
        w.store.current_daemon_lease().unwrap().is_none(),
        "released at shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_workflow_run_ends_interrupted_not_failed() {
    use loops_core::workflow::{parse_spec, validate};
    use loops_runtime::workflow::{run, RunContext, RunEnd};
    let w = world(t0());
    let (gate, cmd) = w.gate();
    let spec = parse_spec(&format!(
        r#"{{"name":"slow","steps":[{{"id":"wait","target":{{"type":"command","command":{cmd:?},"shell":true}}}}]}}"#
    ))
    .unwrap();
    validate(&spec).unwrap();
    let workflow = w.store.create_workflow(&spec, false, t0()).unwrap();
    let (stop, interrupt) = tokio::sync::watch::channel(None::<String>);
    let ctx = RunContext {
        store: Arc::clone(&w.store),
        fence: None,
        exec: loops_runtime::targets::ExecSettings::for_data_dir(w.dir.path()),
        clock: Arc::clone(&w.clock) as Arc<dyn Clock>,
        origin: None,
        loop_metadata: Vec::new(),
        timeout: None,
        params: Default::default(),
        interrupt,
    };
    let running = tokio::spawn(async move { run(&ctx, &workflow).await });
    let store = Arc::clone(&w.store);
    until("the step to start", Duration::from_secs(10), || {
        store
            .list_workflow_runs(Some("slow"), Some(1))
            .unwrap()
            .first()
            .and_then(|r| store.step_runs(r.id.as_str()).ok())
            .is_some_and(|s| s[0].pid.is_some())
    })
    .await;
    stop.send(Some("daemon stopped".into())).unwrap();
    let end = running.await.unwrap().unwrap();
    let RunEnd::Interrupted(stopped) = &end else {
        panic!("not interrupted: {end:?}");
    };
    assert_eq!(stopped.status, loops_core::WorkflowRunStatus::Failed);
    assert_eq!(
        stopped.error.as_deref(),
        Some("interrupted: daemon stopped")
    );
    let events = w.store.workflow_events(stopped.id.as_str(), None).unwrap();
    assert_eq!(
        events.last().map(|e| e.event_type),
        Some(loops_core::WorkflowEventType::Interrupted)
    );
    std::fs::write(gate, b"").unwrap();

    // One that ends by itself is finished.
    let spec = parse_spec(
        r#"{"name":"quick","steps":[{"id":"a","target":{"type":"command","command":"true"}}]}"#,
    )
    .unwrap();
    let workflow = w.store.create_workflow(&spec, false, t0()).unwrap();
    let (_stop, interrupt) = tokio::sync::watch::channel(None::<String>);
    let ctx = RunContext {
        store: Arc::clone(&w.store),
        fence: None,
        exec: loops_runtime::targets::ExecSettings::for_data_dir(w.dir.path()),
        clock: Arc::clone(&w.clock) as Arc<dyn Clock>,
        origin: None,
        loop_metadata: Vec::new(),
        timeout: None,
        params: Default::default(),
        interrupt,
    };
    let end = run(&ctx, &workflow).await.unwrap();
    assert!(
        matches!(&end, RunEnd::Finished(r) if r.status == loops_core::WorkflowRunStatus::Succeeded),
        "{end:?}"
    );
}

/// One heartbeat policy for every runner: a run lease is renewed every third of it
/// (within 50 ms..10 s), re-planned when a run with a shorter lease starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_leases_are_renewed_every_third_of_the_shortest_lease() {
    use loops_runtime::engine::lease_renewal::{renewal_period, RENEWAL_MAX};
    let start = t0();
    let w = world(start);
    let (gate, cmd) = w.gate();
    let mut short = every("short", 3_600_000, &cmd, start);
    short.policy.lease_ms = 600;
    let lp = w.store.create_loop(short, start).unwrap();
    let engine = w.engine();
    assert_eq!(engine.heartbeat_every(), RENEWAL_MAX, "no runs held");
    let _heartbeat = engine.spawn_lease_renewal();
    let claimed = engine.pass(true).unwrap().claimed;
    assert_eq!(claimed.len(), 1);
    let held = Arc::clone(&engine);
    until("the run to be held", Duration::from_secs(3), || {
        held.heartbeat_every() == renewal_period(Duration::from_millis(600))
    })
    .await;
    let first = w.store.get_run(&claimed[0]).unwrap().unwrap();
    assert_eq!(
        first.lease_expires_at,
        Some(start + TimeDelta::milliseconds(600))
    );
    // Time moves on: the next beat (200 ms later, not 10 s) renews from the new now.
    let later = start + TimeDelta::seconds(5);
    w.clock.set(later);
    let store = Arc::clone(&w.store);
    let id = claimed[0].clone();
    until(
        "the run lease to be renewed",
        Duration::from_secs(3),
        || {
            store.get_run(&id).unwrap().unwrap().lease_expires_at
                == Some(later + TimeDelta::milliseconds(600))
        },
    )
    .await;
    std::fs::write(&gate, b"open").unwrap();
    engine.drain().await;
    assert_eq!(engine.heartbeat_every(), RENEWAL_MAX);
    let done = w.store.get_run(&claimed[0]).unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.loop_id, lp.id);
}
