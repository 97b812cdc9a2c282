//! The event log: what is logged with which write, in what order, and what pruning
//! takes with it.

use super::{claim_req, finish, new_loop, outcome, pass_over, t, TestDb};
use crate::{LoopAdvance, LoopUpdate, LoopVersion, OnRefusal, PrunePolicy, Store};
use loops_core::event::{Event, EventKind};
use loops_core::workflow::{parse_spec, NewEvent};
use loops_core::{LoopStatus, RunStatus, StepId, WorkflowEventType};

/// Every event of the log, oldest first.
fn all(store: &dyn Store) -> Vec<Event> {
    store.events_after(0, 10_000).unwrap()
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.body.kind.as_str()).collect()
}

/// Creating, changing (schedule state, definition, expiry) and removing a loop each
/// log one event in order, numbered upwards and read by number; removal takes the
/// loop's earlier events with it and leaves only `loop.removed`.
pub fn loop_changes_are_logged_in_order(db: &dyn TestDb) {
    let store = db.open();
    assert_eq!(store.event_bounds().unwrap(), Default::default());
    let mut n = new_loop("a", Some(t(60_000)));
    n.labels = vec!["x".into()];
    let lp = store.create_loop(n, t(0)).unwrap();
    let paused = store
        .update_loop_schedule(
            &lp.id,
            &LoopAdvance {
                status: LoopStatus::Paused,
                next_run_at: lp.next_run_at,
                retry_scheduled_for: None,
            },
            t(1),
            None,
        )
        .unwrap();
    let mut def = new_loop("a2", paused.next_run_at);
    def.labels = vec!["x".into()];
    def.policy.expires_at = Some(t(5));
    let update = LoopUpdate {
        definition: def,
        status: LoopStatus::Active,
        retry_scheduled_for: None,
    };
    let edited = store
        .update_loop_definition(&lp.id, &update, &LoopVersion::of(&paused), t(2))
        .unwrap()
        .unwrap();
    assert_eq!(store.expire_loops(t(10), None).unwrap().len(), 1);
    let other = store.create_loop(new_loop("b", None), t(11)).unwrap();

    let events = all(store.as_ref());
    assert_eq!(
        kinds(&events),
        [
            "loop.created",
            "loop.changed",
            "loop.changed",
            "loop.changed",
            "loop.created"
        ]
    );
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "{events:?}");
    let first = &events[0];
    assert_eq!(first.at, t(0));
    assert_eq!(first.body.loop_id.as_ref(), Some(&lp.id));
    assert_eq!(first.body.data["loop"]["name"], "a");
    assert_eq!(first.body.data["loop"]["status"], "active");
    assert_eq!(first.body.data["loop"]["labels"][0], "x");
    assert_eq!(
        first.body.data["loop"]["nextRunAt"],
        loops_core::format_instant(&t(60_000))
    );
    assert!(
        first.body.data["loop"].get("target").is_none(),
        "no target (secrets) in events"
    );
    assert_eq!(events[1].body.data["loop"]["status"], "paused");
    assert_eq!(events[2].body.data["loop"]["name"], edited.name.as_str());
    assert_eq!(events[3].body.data["loop"]["status"], "expired");
    assert_eq!(events[3].at, t(10));

    // Read by number, with a limit.
    let after = store.events_after(events[1].seq, 2).unwrap();
    assert_eq!(after, events[2..4].to_vec());
    assert!(store.events_after(events[4].seq, 10).unwrap().is_empty());
    let bounds = store.event_bounds().unwrap();
    assert_eq!(bounds.oldest, Some(events[0].seq));
    assert_eq!(bounds.latest, events[4].seq);

    assert!(store.remove_loop(&lp.id).unwrap());
    let events = all(store.as_ref());
    assert_eq!(kinds(&events), ["loop.created", "loop.removed"]);
    assert_eq!(events[0].body.loop_id.as_ref(), Some(&other.id));
    assert_eq!(events[1].body.loop_id.as_ref(), Some(&lp.id));
    assert_eq!(events[1].body.data["loop"]["name"], "a2");
    assert_eq!(events[1].seq, bounds.latest + 1);
    // Removing a loop that does not exist logs nothing.
    assert!(!store.remove_loop(&lp.id).unwrap());
    assert_eq!(all(store.as_ref()).len(), 2);
}

/// A scheduling pass's batch of claims logs each `run.started` with its own loop as the
/// batch left it: advanced to its own next slot, or (no advance) as it was.
pub fn a_batch_of_claims_logs_each_loop_as_it_left_it(db: &dyn TestDb) {
    let store = db.open();
    let names = ["a", "b", "c", "d"];
    let loops: Vec<_> = names
        .iter()
        .map(|n| store.create_loop(new_loop(n, Some(t(0))), t(0)).unwrap())
        .collect();
    let claims: Vec<_> = loops
        .iter()
        .enumerate()
        .map(|(i, lp)| {
            // The last loop is claimed without an advance.
            let advance = (i + 1 < loops.len()).then(|| LoopAdvance {
                status: LoopStatus::Active,
                next_run_at: Some(t(60_000 * (i as i64 + 1))),
                retry_scheduled_for: None,
            });
            pass_over(claim_req(lp, t(0), t(5)), advance, vec![])
        })
        .collect();
    let outcomes = store.claim_runs(&claims, None).unwrap();
    let started: Vec<Event> = all(store.as_ref())
        .into_iter()
        .filter(|e| e.body.kind == EventKind::RunStarted)
        .collect();
    assert_eq!(started.len(), loops.len());
    for (outcome, event) in outcomes.iter().zip(&started) {
        let crate::ClaimOutcome::Claimed(run) = outcome else {
            panic!("not claimed: {outcome:?}");
        };
        let stored = store.get_loop(&run.loop_id).unwrap().unwrap();
        let expected = loops_core::event::EventBody::run_started(
            run,
            Some(&loops_core::event::LoopBrief::of(&stored)),
        );
        assert_eq!(event.body.run_id.as_ref(), Some(&run.id));
        assert_eq!(event.body.data, expected.data, "{}", stored.name);
    }
    let nexts: Vec<_> = loops
        .iter()
        .map(|lp| store.get_loop(&lp.id).unwrap().unwrap().next_run_at)
        .collect();
    assert_eq!(
        nexts,
        [
            Some(t(60_000)),
            Some(t(120_000)),
            Some(t(180_000)),
            Some(t(0))
        ]
    );
}

/// A claim logs `run.started` with the loop as the claim left it; a finalization logs
/// `run.finished` with the loop as the run's end left it; a busy loop's skipped slot
/// and a parked loop's failed run are `run.finished` too. No output in events.
pub fn run_starts_and_ends_are_logged_with_their_loop(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let advance = LoopAdvance {
        status: LoopStatus::Active,
        next_run_at: Some(t(60_000)),
        retry_scheduled_for: None,
    };
    let run = store
        .claim_run(&claim_req(&lp, t(0), t(5)), Some(&advance), None)
        .unwrap()
        .unwrap();
    // The next slot comes due while the run is still running: skipped (overlap skip).
    let mut busy = claim_req(&lp, t(60_000), t(60_001));
    busy.require_no_running = true;
    let next = LoopAdvance {
        next_run_at: Some(t(120_000)),
        ..advance.clone()
    };
    store
        .claim_runs(&[pass_over(busy, Some(next), vec![t(60_000)])], None)
        .unwrap();
    finish(
        store.as_ref(),
        &run.id,
        outcome(RunStatus::Failed, t(70_000)),
    )
    .unwrap();

    let events: Vec<Event> = all(store.as_ref())
        .into_iter()
        .filter(|e| e.body.kind != EventKind::LoopCreated)
        .collect();
    assert_eq!(
        kinds(&events),
        ["run.started", "run.finished", "run.finished"]
    );
    let started = &events[0];
    assert_eq!(started.at, t(5));
    assert_eq!(started.body.run_id.as_ref(), Some(&run.id));
    assert_eq!(started.body.loop_id.as_ref(), Some(&lp.id));
    assert_eq!(started.body.data["run"]["status"], "running");
    assert_eq!(started.body.data["run"]["attempt"], 1);
    assert_eq!(started.body.data["run"]["loopName"], "a");
    assert_eq!(
        started.body.data["loop"]["nextRunAt"],
        loops_core::format_instant(&t(60_000)),
        "the loop as the claim left it"
    );
    let skipped = &events[1];
    assert_eq!(skipped.body.data["run"]["status"], "skipped");
    assert_ne!(skipped.body.run_id.as_ref(), Some(&run.id));
    let finished = &events[2];
    assert_eq!(finished.at, t(70_000));
    assert_eq!(finished.body.run_id.as_ref(), Some(&run.id));
    assert_eq!(finished.body.data["run"]["status"], "failed");
    assert_eq!(finished.body.data["run"]["exitCode"], 1);
    assert_eq!(finished.body.data["run"]["durationMs"], 69_995);
    for e in &events {
        let run = e.body.data["run"].as_object().unwrap();
        assert!(!run.contains_key("stdout") && !run.contains_key("stderr"));
    }

    // Parking: the loop changed (paused) and its failed run.
    let parked = store.create_loop(new_loop("p", Some(t(0))), t(0)).unwrap();
    let before = store.event_bounds().unwrap().latest;
    let failed = store
        .park_loop(&parked.id, "cannot be read", t(80_000), None)
        .unwrap()
        .unwrap();
    let events = store.events_after(before, 10).unwrap();
    assert_eq!(kinds(&events), ["loop.changed", "run.finished"]);
    assert_eq!(events[0].body.data["loop"]["status"], "paused");
    assert_eq!(events[1].body.run_id.as_ref(), Some(&failed.id));
    assert_eq!(events[1].body.data["run"]["error"], "cannot be read");
    assert_eq!(events[1].body.data["loop"]["status"], "paused");

    // A refused claim logs nothing.
    let before = store.event_bounds().unwrap().latest;
    let again = crate::BatchClaim {
        caps: Default::default(),
        request: claim_req(&lp, t(0), t(90_000)),
        advance: None,
        on_refusal: OnRefusal::Keep,
    };
    store.claim_runs(&[again], None).unwrap();
    assert_eq!(store.event_bounds().unwrap().latest, before);
}

/// Another store (another process) sees the events of the first in number order;
/// pruning a run prunes its events (not those of the runs kept), the age rule prunes
/// old events, and numbers are never given twice — also after the newest was pruned.
pub fn pruning_takes_events_along_and_numbers_are_never_reused(db: &dyn TestDb) {
    let writer = db.open();
    let reader = db.open();
    let lp = writer.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    let mut runs = Vec::new();
    for i in 0..3 {
        let slot = t(i * 60_000);
        let run = writer
            .claim_run(&claim_req(&lp, slot, slot), None, None)
            .unwrap()
            .unwrap();
        finish(
            writer.as_ref(),
            &run.id,
            outcome(RunStatus::Succeeded, t(i * 60_000 + 10)),
        )
        .unwrap();
        runs.push(run);
    }
    let seen = all(reader.as_ref());
    assert_eq!(seen.len(), 7, "{:?}", kinds(&seen));
    let latest = reader.event_bounds().unwrap().latest;
    assert_eq!(latest, seen[6].seq);

    // Keep the newest run only: the two older runs' events go, the loop's stays.
    let pruned = writer
        .prune_runs(
            &PrunePolicy {
                older_than: None,
                keep_per_loop: Some(1),
                keep_events: None,
            },
            false,
        )
        .unwrap();
    assert_eq!(pruned, 2);
    let left = all(reader.as_ref());
    assert_eq!(
        kinds(&left),
        ["loop.created", "run.started", "run.finished"]
    );
    assert!(left[1..]
        .iter()
        .all(|e| e.body.run_id.as_ref() == Some(&runs[2].id)));

    // The age rule: everything written before t(120_005) goes (the loop's creation,
    // the kept run's start); the run itself finished after it and stays.
    writer
        .prune_runs(
            &PrunePolicy {
                older_than: Some(t(120_005)),
                keep_per_loop: None,
                keep_events: None,
            },
            false,
        )
        .unwrap();
    let left = all(reader.as_ref());
    assert_eq!(kinds(&left), ["run.finished"], "{left:?}");
    // Prune the rest: the log is empty, the newest number is kept and not given again.
    writer
        .prune_runs(
            &PrunePolicy {
                older_than: Some(t(10_000_000)),
                keep_per_loop: None,
                keep_events: None,
            },
            false,
        )
        .unwrap();
    assert!(all(reader.as_ref()).is_empty());
    let bounds = reader.event_bounds().unwrap();
    assert_eq!((bounds.oldest, bounds.latest), (None, latest));
    writer.create_loop(new_loop("b", None), t(1)).unwrap();
    let next = all(reader.as_ref());
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].seq, latest + 1);
    // A dry run prunes nothing.
    writer
        .prune_runs(
            &PrunePolicy {
                older_than: Some(t(10_000_000)),
                keep_per_loop: None,
                keep_events: None,
            },
            true,
        )
        .unwrap();
    assert_eq!(all(reader.as_ref()).len(), 1);
}

/// `keep_events` trims the log to its newest entries whatever they are about (also with
/// no run rule set, and the runs stay); a dry run trims nothing; numbers go on upwards.
pub fn the_event_log_is_trimmed_to_its_newest_entries(db: &dyn TestDb) {
    let store = db.open();
    let lp = store.create_loop(new_loop("a", Some(t(0))), t(0)).unwrap();
    for i in 0..3 {
        let slot = t(i * 60_000);
        let run = store
            .claim_run(&claim_req(&lp, slot, slot), None, None)
            .unwrap()
            .unwrap();
        finish(
            store.as_ref(),
            &run.id,
            outcome(RunStatus::Succeeded, t(i * 60_000 + 10)),
        )
        .unwrap();
    }
    let before = all(store.as_ref());
    assert_eq!(before.len(), 7);
    let trim = |keep: usize, dry_run: bool| {
        store
            .prune_runs(
                &PrunePolicy {
                    keep_events: Some(keep),
                    ..PrunePolicy::default()
                },
                dry_run,
            )
            .unwrap()
    };
    assert_eq!(trim(2, true), 0);
    assert_eq!(all(store.as_ref()).len(), 7, "a dry run trims nothing");
    assert_eq!(trim(2, false), 0, "no run is pruned");
    let left = all(store.as_ref());
    assert_eq!(
        left.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [before[5].seq, before[6].seq]
    );
    assert_eq!(store.list_runs(&Default::default()).unwrap().len(), 3);
    let bounds = store.event_bounds().unwrap();
    assert_eq!(bounds.oldest, Some(before[5].seq));
    assert_eq!(bounds.latest, before[6].seq);
    // A cap above the log's size takes nothing.
    trim(10, false);
    assert_eq!(all(store.as_ref()).len(), 2);
    store.create_loop(new_loop("b", None), t(1)).unwrap();
    assert_eq!(all(store.as_ref()).last().unwrap().seq, before[6].seq + 1);
}

/// Every entry of a workflow run's own log is mirrored as `workflow.event`, with its
/// sequence, type and step; pruning the workflow run prunes them.
pub fn workflow_events_are_mirrored_and_pruned_with_their_run(db: &dyn TestDb) {
    let store = db.open();
    let spec = parse_spec(
        r#"{"name":"w","steps":[{"id":"a","target":{"type":"command","command":"true"}}]}"#,
    )
    .unwrap();
    let wf = store.create_workflow(&spec, false, t(0)).unwrap();
    let (mut run, _) = store
        .create_workflow_run(&wf, None, &Default::default(), t(1), None)
        .unwrap();
    let step = store.step_runs(run.id.as_str()).unwrap().remove(0);
    let a = StepId::new("a");
    store
        .save_step_run(
            &step,
            &[NewEvent::new(
                WorkflowEventType::StepStarted,
                Some(&a),
                serde_json::json!({"pid": 1}),
            )],
            t(2),
            None,
        )
        .unwrap();
    let own = store.workflow_events(run.id.as_str(), None).unwrap();
    let mirrored = all(store.as_ref());
    assert_eq!(mirrored.len(), own.len());
    assert!(mirrored
        .iter()
        .all(|e| e.body.kind == EventKind::WorkflowEvent));
    for (m, o) in mirrored.iter().zip(&own) {
        assert_eq!(m.body.workflow_run_id.as_ref(), Some(&run.id));
        assert_eq!(m.body.data["sequence"], o.sequence);
        assert_eq!(m.body.data["eventType"], o.event_type.as_str());
        assert_eq!(m.body.data["workflowName"], "w");
        assert_eq!(m.at, o.created_at);
    }
    let last = mirrored.last().unwrap();
    assert_eq!(last.body.data["eventType"], "step_started");
    assert_eq!(last.body.data["stepId"], "a");
    assert_eq!(last.body.data["payload"]["pid"], 1);

    run.status = loops_core::WorkflowRunStatus::Succeeded;
    run.finished_at = Some(t(3));
    store.save_workflow_run(&run, &[], t(3), None).unwrap();
    let n = store
        .prune_workflow_runs(
            &PrunePolicy {
                older_than: Some(t(4)),
                keep_per_loop: None,
                keep_events: None,
            },
            false,
        )
        .unwrap();
    assert_eq!(n, 1);
    assert!(all(store.as_ref()).is_empty());
}
