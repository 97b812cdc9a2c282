//! Imports and the read-only roll-ups over runs: `import`, `run_facts` (health) and
//! `usage_since` (usage).

use super::{claim, claim_req, finish, new_loop, outcome, t, TestDb};
use crate::{
    ImportBatch, ImportLoop, LoopAdvance, PrunePolicy, RunFilter, StoreError, UsageSource,
};
use loops_core::health::{FactsQuery, SlotRows};
use loops_core::workflow::{parse_spec, RunOrigin, WorkflowSpec};
use loops_core::{
    Instant, LoopId, LoopStatus, Run, RunId, RunSource, RunStatus, StepStatus, Usage,
};

/// A finished history run of slot `t(slot)`, attempt `attempt`, created when it
/// started.
fn past_run(slot: i64, attempt: u32, status: RunStatus, usage: Option<Usage>) -> Run {
    let at = t(slot + i64::from(attempt));
    Run {
        account: None,
        id: RunId::new(String::new()),
        loop_id: LoopId::new(String::new()),
        loop_name: String::new(),
        scheduled_for: t(slot),
        attempt,
        status,
        source: RunSource::Scheduled,
        due_at: Some(t(slot)),
        started_at: (status != RunStatus::Skipped).then_some(at),
        finished_at: Some(at),
        exit_code: (status != RunStatus::Skipped)
            .then_some(i32::from(status != RunStatus::Succeeded)),
        duration_ms: Some(1),
        stdout: Some("out".into()),
        stderr: None,
        error: (status == RunStatus::Failed).then(|| "exited with status 1".into()),
        error_output: None,
        pid: None,
        pid_start_time: None,
        claimed_by: Some("old-host".into()),
        lease_expires_at: None,
        summary: None,
        usage,
        failure_class: None,
        retry_at: None,
        session_id: None,
        session_note: None,
        created_at: at,
        updated_at: at,
    }
}

fn spec(name: &str) -> WorkflowSpec {
    parse_spec(&format!(
        r#"{{"name":"{name}","steps":[{{"id":"a","target":{{"type":"agent","provider":"claude","prompt":"hi"}}}}]}}"#
    ))
    .unwrap()
}

fn import_loop(
    name: &str,
    status: LoopStatus,
    next: Option<Instant>,
    history: Vec<Run>,
) -> ImportLoop {
    ImportLoop {
        new: new_loop(name, next),
        state: LoopAdvance {
            status,
            next_run_at: next,
            retry_scheduled_for: None,
        },
        history,
    }
}

fn usage(input: u64, output: u64, cost: Option<f64>) -> Option<Usage> {
    Some(Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cost_usd: cost,
    })
}

/// An import writes its specs, then its loops with their schedule state and history
/// (new ids, the loop's id and name on each run, no process or lease, everything else
/// as given); a batch
/// with any bad part — a taken loop name, a taken spec name, a running history row, two
/// rows of one slot attempt — writes nothing at all.
pub fn import_is_one_transaction_or_nothing(db: &dyn TestDb) {
    let store = db.open();
    let batch = ImportBatch {
        workflows: vec![spec("w")],
        loops: vec![
            import_loop(
                "a",
                LoopStatus::Paused,
                Some(t(600_000)),
                vec![
                    past_run(0, 1, RunStatus::Failed, None),
                    past_run(0, 2, RunStatus::Succeeded, usage(3, 4, None)),
                ],
            ),
            import_loop("b", LoopStatus::Active, Some(t(60_000)), vec![]),
        ],
    };
    // The newest run carries every field an agent run can have.
    let mut agent_run = past_run(0, 2, RunStatus::Succeeded, usage(3, 4, None));
    agent_run.failure_class = Some(loops_core::failure::FailureClass::UsageLimit);
    agent_run.retry_at = Some(t(90_000));
    agent_run.session_id = Some("s-1".into());
    agent_run.session_note = Some("resumed session s-0".into());
    agent_run.account = Some("work".into());
    agent_run.summary = Some("did it".into());
    agent_run.error_output = Some("quoted".into());
    // A finished run keeps no process or lease.
    let mut with_process = agent_run.clone();
    (with_process.pid, with_process.pid_start_time) = (Some(77), Some(5));
    with_process.lease_expires_at = Some(t(5));
    let mut batch = batch;
    batch.loops[0].history[1] = with_process;
    let done = store.import(&batch, t(1_000)).unwrap();
    assert_eq!(done.runs, 2);
    assert_eq!(done.workflows.len(), 1);
    assert_eq!(
        store.get_active_workflow("w").unwrap().unwrap().id,
        done.workflows[0].id
    );
    let a = store.get_loop_by_name("a").unwrap().unwrap();
    assert_eq!(a, done.loops[0]);
    assert_eq!(
        (a.status, a.next_run_at),
        (LoopStatus::Paused, Some(t(600_000)))
    );
    assert_eq!(a.created_at, t(1_000));
    let runs = store
        .list_runs(&crate::RunFilter {
            loop_id: Some(a.id.clone()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(runs.len(), 2);
    for run in &runs {
        assert_eq!((&run.loop_id, run.loop_name.as_str()), (&a.id, "a"));
        assert!(!run.id.as_str().is_empty());
    }
    // Everything but its id, loop, name, process and lease as given.
    let newest = &runs[0];
    assert_eq!(
        newest,
        &Run {
            id: newest.id.clone(),
            loop_id: a.id.clone(),
            loop_name: "a".into(),
            ..agent_run
        }
    );
    let b = store.get_loop_by_name("b").unwrap().unwrap();
    assert_eq!(
        store.due_loops(t(60_000), 10).unwrap().len(),
        1,
        "b is due: {b:?}"
    );

    let before = (store.list_loops(None).unwrap(), super::run_count(&*store));
    let specs_before = store.list_workflows(None).unwrap();
    let bad_batches = [
        // A loop name taken (after a new spec and a new loop in the same batch).
        ImportBatch {
            workflows: vec![spec("w2")],
            loops: vec![
                import_loop("c", LoopStatus::Active, Some(t(1)), vec![]),
                import_loop("a", LoopStatus::Active, Some(t(1)), vec![]),
            ],
        },
        // A spec name taken.
        ImportBatch {
            workflows: vec![spec("w")],
            loops: vec![import_loop("c", LoopStatus::Active, Some(t(1)), vec![])],
        },
        // A running history row.
        ImportBatch {
            workflows: vec![],
            loops: vec![import_loop(
                "c",
                LoopStatus::Active,
                Some(t(1)),
                vec![past_run(0, 1, RunStatus::Running, None)],
            )],
        },
        // Two rows of one slot attempt.
        ImportBatch {
            workflows: vec![],
            loops: vec![import_loop(
                "c",
                LoopStatus::Active,
                Some(t(1)),
                vec![
                    past_run(0, 1, RunStatus::Failed, None),
                    past_run(0, 1, RunStatus::Failed, None),
                ],
            )],
        },
    ];
    for (i, bad) in bad_batches.iter().enumerate() {
        let err = store.import(bad, t(2_000)).unwrap_err();
        match i {
            0 => assert!(
                matches!(err, StoreError::DuplicateName(ref n) if n == "a"),
                "{err:?}"
            ),
            1 => assert!(
                matches!(err, StoreError::DuplicateWorkflow(ref n) if n == "w"),
                "{err:?}"
            ),
            _ => assert!(
                matches!(err, StoreError::InvalidArgument(_)),
                "{i}: {err:?}"
            ),
        }
        assert_eq!(
            (store.list_loops(None).unwrap(), super::run_count(&*store)),
            before,
            "batch {i} wrote something"
        );
        assert_eq!(
            store.list_workflows(None).unwrap(),
            specs_before,
            "batch {i}"
        );
    }
}

/// An imported loop's runner labels (`runsOn`) are stored as `create_loop` stores
/// them on a store with runners; a store without runners refuses the whole batch and
/// writes nothing (its client says so before, see `loops import --drop-runner-labels`).
pub fn import_keeps_runner_labels_or_refuses_them(db: &dyn TestDb) {
    let store = db.open();
    let mut gpu = import_loop("gpu", LoopStatus::Active, Some(t(60_000)), vec![]);
    gpu.new.policy.runs_on = vec!["gpu".to_owned()];
    let batch = ImportBatch {
        workflows: vec![spec("w")],
        loops: vec![
            import_loop("plain", LoopStatus::Active, Some(t(60_000)), vec![]),
            gpu,
        ],
    };
    if store.supports_runners() {
        let done = store.import(&batch, t(1_000)).unwrap();
        assert_eq!(done.loops[1].runs_on, ["gpu"]);
        let stored = store.get_loop_by_name("gpu").unwrap().unwrap();
        assert_eq!(stored.runs_on, ["gpu"]);
        assert_eq!(stored, done.loops[1]);
        let plain = store.get_loop_by_name("plain").unwrap().unwrap();
        assert!(plain.runs_on.is_empty());
    } else {
        let err = store.import(&batch, t(1_000)).unwrap_err();
        assert!(
            matches!(&err, StoreError::InvalidArgument(m) if m.contains("runsOn")),
            "{err:?}"
        );
        assert!(store.list_loops(None).unwrap().is_empty());
        assert!(store.list_workflows(None).unwrap().is_empty());
    }
}

/// Health facts: the newest rows newest first, the last success and the failed
/// attempts after it (found past the `recent` rows too), the window's skipped rows,
/// the window's slots (counted on a grid, or listed), the oldest slot; a loop without
/// runs has empty facts.
pub fn run_facts_reports_recent_rows_success_and_window(db: &dyn TestDb) {
    let store = db.open();
    let m = 60_000;
    // Slots every minute from 0: succeeded at 0 and 1, skipped at 2, then failures
    // at 3 (two attempts), 4, 5; slot 7 has no row.
    let history = vec![
        past_run(0, 1, RunStatus::Succeeded, None),
        past_run(m, 1, RunStatus::Succeeded, None),
        past_run(2 * m, 1, RunStatus::Skipped, None),
        past_run(3 * m, 1, RunStatus::Failed, None),
        past_run(3 * m, 2, RunStatus::TimedOut, None),
        past_run(4 * m, 1, RunStatus::Abandoned, None),
        past_run(5 * m, 1, RunStatus::Failed, None),
        past_run(6 * m, 1, RunStatus::Succeeded, None),
        past_run(8 * m, 1, RunStatus::Failed, None),
    ];
    let done = store
        .import(
            &ImportBatch {
                workflows: vec![],
                loops: vec![
                    import_loop("h", LoopStatus::Active, Some(t(9 * m)), history),
                    import_loop("empty", LoopStatus::Active, Some(t(m)), vec![]),
                ],
            },
            t(10 * m),
        )
        .unwrap();
    let (h, empty) = (&done.loops[0], &done.loops[1]);
    let query = |id: &LoopId, grid: Option<(Instant, u64)>| FactsQuery {
        loop_id: id.clone(),
        window: (t(2 * m), t(8 * m)),
        slot_window: (t(m), t(8 * m)),
        grid,
    };
    let facts = store
        .run_facts(
            &[
                query(&h.id, Some((t(0), m as u64))),
                query(&h.id, None),
                query(&empty.id, Some((t(0), m as u64))),
            ],
            3,
        )
        .unwrap();
    assert_eq!(facts.len(), 3, "one answer per query, in order");
    let f = &facts[0];
    let recent: Vec<RunStatus> = f.recent.iter().map(|r| r.status).collect();
    assert_eq!(
        recent,
        [RunStatus::Failed, RunStatus::Succeeded, RunStatus::Failed]
    );
    let newest = f.newest.as_ref().unwrap();
    assert_eq!((newest.scheduled_for, newest.attempt), (t(8 * m), 1));
    assert_eq!(newest.finished_at, Some(t(8 * m + 1)));
    assert_eq!(newest.error.as_deref(), Some("exited with status 1"));
    // A failed attempt's error is filled in, no other row's.
    assert_eq!(f.recent[0].error.as_deref(), Some("exited with status 1"));
    assert_eq!(f.recent[1].error, None);
    assert_eq!(
        f.last_success.as_ref().and_then(|r| r.finished_at),
        Some(t(6 * m + 1))
    );
    assert_eq!(
        f.last_success.as_ref().map(|r| r.scheduled_for),
        Some(t(6 * m))
    );
    assert_eq!(f.failures_since_success, 1);
    assert_eq!(f.window_skipped, 1);
    assert_eq!(f.oldest_slot, Some(t(0)));
    // Slots 1..=8 with rows: 1, 2, 3, 4, 5, 6, 8 (slot 3's two attempts count once).
    assert_eq!(f.window_slots, SlotRows::OnGrid(7));
    let listed: Vec<Instant> = [1, 2, 3, 4, 5, 6, 8].iter().map(|k| t(k * m)).collect();
    assert_eq!(facts[1].window_slots, SlotRows::Listed(listed));
    let none = &facts[2];
    assert!(none.recent.is_empty() && none.last_success.is_none() && none.newest.is_none());
    assert_eq!((none.failures_since_success, none.window_skipped), (0, 0));
    assert_eq!(none.window_slots, SlotRows::OnGrid(0));
    assert_eq!(none.oldest_slot, None);

    // The newest rows hold no success: the store looks further back for it.
    let facts = store.run_facts(&[query(&h.id, None)], 1).unwrap();
    assert_eq!(facts[0].recent.len(), 1);
    assert_eq!(
        facts[0].last_success.as_ref().map(|r| r.scheduled_for),
        Some(t(6 * m))
    );
    assert_eq!(facts[0].failures_since_success, 1);
    // Without any success: every failed attempt counts.
    let never = store
        .import(
            &ImportBatch {
                workflows: vec![],
                loops: vec![import_loop(
                    "never",
                    LoopStatus::Active,
                    Some(t(9 * m)),
                    vec![
                        past_run(0, 1, RunStatus::Failed, None),
                        past_run(m, 1, RunStatus::Skipped, None),
                        past_run(2 * m, 1, RunStatus::Failed, None),
                        past_run(3 * m, 1, RunStatus::TimedOut, None),
                    ],
                )],
            },
            t(10 * m),
        )
        .unwrap();
    let facts = store
        .run_facts(&[query(&never.loops[0].id, None)], 2)
        .unwrap();
    assert!(facts[0].last_success.is_none());
    assert_eq!(facts[0].failures_since_success, 3);
}

/// Usage: every run and step run with usage that finished at or after the instant,
/// oldest first, a step with its workflow, step id and the loop whose slot ran it.
pub fn usage_since_lists_runs_and_steps_with_usage(db: &dyn TestDb) {
    let store = db.open();
    let done = store
        .import(
            &ImportBatch {
                workflows: vec![spec("w")],
                loops: vec![import_loop(
                    "agent",
                    LoopStatus::Active,
                    Some(t(100_000)),
                    vec![
                        past_run(0, 1, RunStatus::Succeeded, usage(1, 1, Some(0.5))),
                        past_run(10, 1, RunStatus::Failed, usage(2, 2, None)),
                        past_run(20, 1, RunStatus::Succeeded, None),
                        past_run(30, 1, RunStatus::Succeeded, usage(3, 3, None)),
                    ],
                )],
            },
            t(1_000),
        )
        .unwrap();
    let lp = &done.loops[0];
    let wf = &done.workflows[0];
    // A workflow run the loop's slot started, its agent step finished with usage.
    let loop_run = claim(&*store, &claim_req(lp, t(100_000), t(100_000))).unwrap();
    let origin = RunOrigin {
        loop_id: lp.id.clone(),
        loop_run_id: loop_run.id.clone(),
        scheduled_for: t(100_000),
    };
    let (run, _) = store
        .create_workflow_run(wf, Some(&origin), &Default::default(), t(100_001), None)
        .unwrap();
    let mut step = store.step_runs(run.id.as_str()).unwrap().remove(0);
    step.status = StepStatus::Succeeded;
    step.started_at = Some(t(100_002));
    step.finished_at = Some(t(100_005));
    step.usage = usage(7, 8, Some(0.25));
    store.save_step_run(&step, &[], t(100_005), None).unwrap();

    let rows = store.usage_since(t(11)).unwrap();
    let seen: Vec<(Instant, u64)> = rows
        .iter()
        .map(|r| (r.finished_at, r.usage.input_tokens.unwrap_or(0)))
        .collect();
    assert_eq!(
        seen,
        [(t(11), 2), (t(31), 3), (t(100_005), 7)],
        "oldest first, from the instant on"
    );
    assert_eq!(
        rows[0].source,
        UsageSource::Run {
            loop_id: lp.id.clone(),
            loop_name: "agent".into()
        }
    );
    assert_eq!(
        rows[2].source,
        UsageSource::Step {
            workflow_id: wf.id.clone(),
            workflow_name: "w".into(),
            step_id: step.step_id.clone(),
            loop_id: Some(lp.id.clone()),
        }
    );
    assert_eq!(rows[2].usage.cost_usd, Some(0.25));
    assert_eq!(store.usage_since(t(0)).unwrap().len(), 4);
    assert!(store.usage_since(t(200_000)).unwrap().is_empty());
}

/// The dashboard's reads: every loop's newest `recent` runs in one call, in the order
/// asked, each newest first (an unknown loop, or one without runs, gets none); and
/// the runs created since an instant, counted by status.
pub fn recent_runs_and_status_counts_serve_the_dashboard(db: &dyn TestDb) {
    let store = db.open();
    let m = 60_000;
    let history = |n: i64| {
        (0..n)
            .map(|k| {
                let status = if k % 3 == 2 {
                    RunStatus::Failed
                } else {
                    RunStatus::Succeeded
                };
                past_run(k * m, 1, status, None)
            })
            .collect::<Vec<_>>()
    };
    let done = store
        .import(
            &ImportBatch {
                workflows: vec![],
                loops: vec![
                    import_loop("many", LoopStatus::Active, Some(t(30 * m)), history(25)),
                    import_loop("few", LoopStatus::Active, Some(t(30 * m)), history(3)),
                    import_loop("none", LoopStatus::Active, Some(t(30 * m)), vec![]),
                ],
            },
            t(40 * m),
        )
        .unwrap();
    let (many, few, none) = (&done.loops[0], &done.loops[1], &done.loops[2]);
    let unknown = LoopId::new("ffffffffffff");
    let asked = [few.id.clone(), unknown, many.id.clone(), none.id.clone()];
    let strips = store.recent_runs(&asked, 20).unwrap();
    assert_eq!(strips.len(), 4);
    assert_eq!(strips[0].len(), 3);
    assert!(strips[1].is_empty() && strips[3].is_empty());
    assert_eq!(strips[2].len(), 20);
    // Newest first: the last slot first, the 20th newest last.
    assert_eq!(strips[2][0].scheduled_for, t(24 * m));
    assert_eq!(strips[2][19].scheduled_for, t(5 * m));
    assert_eq!(strips[2][0].status, RunStatus::Succeeded);
    assert_eq!(strips[2][1].status, RunStatus::Failed);
    assert!(strips[2]
        .windows(2)
        .all(|w| w[0].created_at > w[1].created_at));
    let ids = store
        .list_runs(&crate::RunFilter {
            loop_id: Some(few.id.clone()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        strips[0].iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        ids.iter().map(|r| r.id.clone()).collect::<Vec<_>>()
    );
    assert_eq!(strips[0][0].exit_code, Some(1));
    assert!(store.recent_runs(&[], 20).unwrap().is_empty());
    // Counts: 25 + 3 runs; created from slot 20 on: the last 5 of `many`.
    let mut all = store.run_status_counts(t(0)).unwrap();
    all.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        all,
        vec![(RunStatus::Failed, 9), (RunStatus::Succeeded, 19)]
    );
    let mut late = store.run_status_counts(t(20 * m)).unwrap();
    late.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        late,
        vec![(RunStatus::Failed, 2), (RunStatus::Succeeded, 3)]
    );
}

/// The dashboard's counts stay exact over runs created across several hours, whatever
/// wrote or removed them — claims, finalizations, pruning, removing a loop, an import —
/// and wherever the window starts: before everything, on an hour's first millisecond or
/// its last, inside an hour, on a run's own creation instant, after everything. Each
/// is checked against a count of the runs themselves.
pub fn status_counts_follow_every_write_across_hours(db: &dyn TestDb) {
    let store = db.open();
    let h = 3_600_000;
    // `t(b)` is the first millisecond of an hour (the suite's T0 is not on one).
    let b = h - t(0).timestamp_millis().rem_euclid(h);
    let check = |step: &str| {
        let runs = store.list_runs(&RunFilter::default()).unwrap();
        let mut sinces = vec![
            t(b - 10 * h),
            t(b - 1),
            t(b),
            t(b + 1),
            t(b + h / 2),
            t(b + h),
            t(b + 2 * h - 1),
            t(b + 3 * h + 17),
            t(b + 100 * h),
        ];
        sinces.extend(runs.iter().map(|r| r.created_at));
        for since in sinces {
            let mut want: Vec<(RunStatus, u64)> = Vec::new();
            for run in runs.iter().filter(|r| r.created_at >= since) {
                match want.iter_mut().find(|(s, _)| *s == run.status) {
                    Some((_, n)) => *n += 1,
                    None => want.push((run.status, 1)),
                }
            }
            want.sort_by_key(|(s, _)| s.as_str());
            let mut got = store.run_status_counts(since).unwrap();
            got.sort_by_key(|(s, _)| s.as_str());
            assert_eq!(got, want, "{step}: counts since {since}");
        }
    };
    check("empty");
    // Runs of two loops every 20 minutes over four hours, from the hour before `b`.
    let a = store.create_loop(new_loop("a", None), t(0)).unwrap();
    let c = store.create_loop(new_loop("c", None), t(0)).unwrap();
    let mut runs = Vec::new();
    for k in 0..12 {
        for lp in [&a, &c] {
            let at = t(b - h + k * h / 3 + i64::from(lp.name == "c"));
            let mut req = claim_req(lp, at, at);
            req.source = RunSource::AdHoc;
            runs.push(claim(&*store, &req).unwrap());
        }
    }
    check("claimed");
    // Most finish, some failed; every fifth still runs.
    for (k, run) in runs.iter().enumerate() {
        let status = match k % 5 {
            0 => continue,
            1 => RunStatus::Failed,
            2 => RunStatus::TimedOut,
            _ => RunStatus::Succeeded,
        };
        let at = run.created_at + chrono::TimeDelta::milliseconds(10);
        finish(&*store, &run.id, outcome(status, at)).unwrap();
    }
    check("finished");
    // Pruned: the runs that finished in the first two hours.
    let pruned = store
        .prune_runs(
            &PrunePolicy {
                older_than: Some(t(b + h)),
                keep_per_loop: None,
                keep_events: None,
            },
            false,
        )
        .unwrap();
    assert!(pruned > 0);
    check("pruned");
    // A loop removed with its runs.
    assert!(store.remove_loop(&c.id).unwrap());
    check("removed");
    // History imported across the same hours, skipped slots and abandoned runs among it.
    let history = (0..9)
        .map(|k| {
            let status = [
                RunStatus::Skipped,
                RunStatus::Abandoned,
                RunStatus::Succeeded,
            ][usize::try_from(k % 3).unwrap()];
            past_run(b - h + k * h / 2 - 1, 1, status, None)
        })
        .collect();
    store
        .import(
            &ImportBatch {
                workflows: vec![],
                loops: vec![import_loop("d", LoopStatus::Active, None, history)],
            },
            t(b + 5 * h),
        )
        .unwrap();
    check("imported");
}
