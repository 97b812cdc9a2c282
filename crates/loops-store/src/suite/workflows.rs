//! Workflow specs, workflow runs, step runs and their event logs.

use super::{acquired, claim, claim_req, holder, new_loop, t, TestDb};
use crate::{DaemonLease, Fence, PrunePolicy, StoreError};
use loops_core::workflow::{parse_spec, NewEvent, RunOrigin, WorkflowSpec};
use loops_core::{StepId, StepStatus, WorkflowEventType, WorkflowRunStatus, WorkflowStatus};

/// A two-step spec (`b` after `a`) named `name`.
fn spec(name: &str) -> WorkflowSpec {
    let step = |id: &str, deps: &str| {
        format!(
            r#"{{"id":"{id}","dependsOn":[{deps}],"target":{{"type":"command","command":"true"}}}}"#
        )
    };
    parse_spec(&format!(
        r#"{{"name":"{name}","steps":[{},{}]}}"#,
        step("a", ""),
        step("b", r#""a""#)
    ))
    .unwrap()
}

/// An event about `step` (or the run) to append.
fn event(step: Option<&str>) -> NewEvent {
    let step = step.map(StepId::new);
    NewEvent::new(
        WorkflowEventType::StepStarted,
        step.as_ref(),
        Default::default(),
    )
}

/// A spec is stored as version 1 (or its own), a second active spec of the name is
/// refused unless it replaces the first (archived, the new one a version higher),
/// archived specs stay listed and findable by id and prefix.
pub fn workflow_specs_are_versioned_replaced_and_archived(db: &dyn TestDb) {
    let store = db.open();
    let v1 = store.create_workflow(&spec("w"), false, t(0)).unwrap();
    assert_eq!((v1.name.as_str(), v1.version), ("w", 1));
    assert_eq!(v1.status, WorkflowStatus::Active);
    assert_eq!(v1.spec.steps.len(), 2);
    assert_eq!(store.get_workflow(v1.id.as_str()).unwrap().unwrap(), v1);
    assert_eq!(store.get_active_workflow("w").unwrap().unwrap(), v1);
    assert!(store.get_active_workflow("nope").unwrap().is_none());

    let err = store.create_workflow(&spec("w"), false, t(1)).unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateWorkflow(ref n) if n == "w"),
        "{err:?}"
    );
    let v2 = store.create_workflow(&spec("w"), true, t(2)).unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.spec.version, 2, "the stored spec carries its version");
    assert_ne!(v2.id, v1.id);
    assert_eq!(
        store.get_workflow(v1.id.as_str()).unwrap().unwrap().status,
        WorkflowStatus::Archived
    );
    assert_eq!(store.get_active_workflow("w").unwrap().unwrap().id, v2.id);
    let mut own = spec("x");
    own.version = 7;
    assert_eq!(store.create_workflow(&own, false, t(3)).unwrap().version, 7);

    let all = store.list_workflows(None).unwrap();
    let listed: Vec<_> = all.iter().map(|w| (w.name.as_str(), w.version)).collect();
    assert_eq!(
        listed,
        [("w", 1), ("w", 2), ("x", 7)],
        "by name, then version"
    );
    let active = store.list_workflows(Some(WorkflowStatus::Active)).unwrap();
    assert_eq!(active.len(), 2);
    let prefix = &v2.id.as_str()[..4];
    let found = store.workflows_with_id_prefix(prefix, 10).unwrap();
    assert!(found.iter().any(|w| w.id == v2.id), "prefix {prefix}");
    assert!(found.iter().all(|w| w.id.as_str().starts_with(prefix)));

    let archived = store.archive_workflow(v2.id.as_str(), t(4)).unwrap();
    assert_eq!(archived.status, WorkflowStatus::Archived);
    assert!(store.get_active_workflow("w").unwrap().is_none());
    // The name is free again.
    let next = store.create_workflow(&spec("w"), false, t(5)).unwrap();
    assert_eq!(next.status, WorkflowStatus::Active);
}

/// A workflow run starts `running` with every step `pending` in spec order and a
/// first event; the run of a loop's slot is created once, whoever asks again.
pub fn a_slot_has_one_workflow_run_with_its_steps_pending(db: &dyn TestDb) {
    let store = db.open();
    let wf = store.create_workflow(&spec("w"), false, t(0)).unwrap();
    let (run, created) = store
        .create_workflow_run(&wf, None, &Default::default(), t(1), None)
        .unwrap();
    assert!(created);
    assert_eq!(run.status, WorkflowRunStatus::Running);
    assert_eq!(run.workflow_name, "w");
    assert_eq!(run.started_at, Some(t(1)));
    assert_eq!(
        store.get_workflow_run(run.id.as_str()).unwrap().unwrap(),
        run
    );
    let steps = store.step_runs(run.id.as_str()).unwrap();
    let ids: Vec<_> = steps.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert!(steps.iter().all(|s| s.status == StepStatus::Pending));
    assert_eq!(steps.iter().map(|s| s.sequence).collect::<Vec<_>>(), [0, 1]);
    let events = store.workflow_events(run.id.as_str(), None).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].sequence, 1);

    let lp = store.create_loop(new_loop("l", Some(t(0))), t(0)).unwrap();
    let loop_run = claim(&*store, &claim_req(&lp, t(0), t(2))).unwrap();
    let origin = RunOrigin {
        loop_id: lp.id.clone(),
        loop_run_id: loop_run.id.clone(),
        scheduled_for: t(0),
    };
    // The params it was created with are the run's: a continued slot keeps them,
    // whatever values come later.
    let params: loops_core::workflow_params::ParamValues =
        [("branch".to_owned(), "main 'x'".to_owned())].into();
    let (first, created) = store
        .create_workflow_run(&wf, Some(&origin), &params, t(3), None)
        .unwrap();
    assert!(created);
    assert_eq!(first.scheduled_for, Some(t(0)));
    assert_eq!(first.params, params);
    assert_eq!(
        first.idempotency_key.as_deref(),
        Some(origin.key().as_str())
    );
    let (again, created) = store
        .create_workflow_run(&wf, Some(&origin), &Default::default(), t(4), None)
        .unwrap();
    assert!(!created, "a slot never has two workflow runs");
    assert_eq!(again, first);
    assert_eq!(
        store
            .get_workflow_run(first.id.as_str())
            .unwrap()
            .unwrap()
            .params,
        params
    );
    assert!(run.params.is_empty(), "none given, none stored");

    let newest: Vec<_> = store
        .list_workflow_runs(Some("w"), None)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(newest, [first.id.clone(), run.id.clone()], "newest first");
    assert_eq!(store.list_workflow_runs(None, Some(1)).unwrap().len(), 1);
    assert!(store
        .list_workflow_runs(Some("x"), None)
        .unwrap()
        .is_empty());
    let prefix = &run.id.as_str()[..4];
    let found = store.workflow_runs_with_id_prefix(prefix, 10).unwrap();
    assert!(found.iter().any(|r| r.id == run.id), "prefix {prefix}");
}

/// Saving a run or a step writes its fields and appends its events, numbered on from
/// the run's last; a listing with a limit returns the last events, in order.
pub fn workflow_saves_append_events_in_sequence(db: &dyn TestDb) {
    let store = db.open();
    let wf = store.create_workflow(&spec("w"), false, t(0)).unwrap();
    let (mut run, _) = store
        .create_workflow_run(&wf, None, &Default::default(), t(1), None)
        .unwrap();
    let mut step = store.step_runs(run.id.as_str()).unwrap().remove(0);
    step.status = StepStatus::Succeeded;
    step.attempts = 1;
    step.started_at = Some(t(2));
    step.finished_at = Some(t(5));
    step.exit_code = Some(0);
    step.pid = Some(4242);
    step.pid_start_time = Some(u64::from(u32::MAX) + 1);
    step.duration_ms = Some(3);
    step.stdout = Some("out".to_owned());
    step.summary = Some("done".to_owned());
    step.error_output = Some("quoted".to_owned());
    store
        .save_step_run(&step, &[event(Some("a")), event(Some("a"))], t(5), None)
        .unwrap();
    let saved = store.step_runs(run.id.as_str()).unwrap().remove(0);
    step.updated_at = t(5);
    assert_eq!(saved, step);

    run.status = WorkflowRunStatus::Succeeded;
    run.finished_at = Some(t(6));
    run.duration_ms = Some(5);
    run.attempt = 1;
    store
        .save_workflow_run(&run, &[event(None)], t(6), None)
        .unwrap();
    let saved = store.get_workflow_run(run.id.as_str()).unwrap().unwrap();
    assert_eq!(saved.status, WorkflowRunStatus::Succeeded);
    assert_eq!(saved.finished_at, Some(t(6)));
    assert_eq!(saved.duration_ms, Some(5));
    assert_eq!(saved.attempt, 1);
    assert_eq!(saved.updated_at, t(6));

    let events = store.workflow_events(run.id.as_str(), None).unwrap();
    let seq: Vec<_> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(seq, [1, 2, 3, 4]);
    assert_eq!(events[1].step_id.as_ref().map(StepId::as_str), Some("a"));
    assert_eq!(events[3].step_id, None);
    assert_eq!(events[3].created_at, t(6));
    let last: Vec<_> = store
        .workflow_events(run.id.as_str(), Some(2))
        .unwrap()
        .into_iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(last, [3, 4]);
}

/// A cancel request is recorded on a running run only; pruning deletes finished runs
/// by the loop runs' rules, per workflow, never running ones.
pub fn workflow_cancel_requests_and_pruning(db: &dyn TestDb) {
    let store = db.open();
    let wf = store.create_workflow(&spec("w"), false, t(0)).unwrap();
    let other = store.create_workflow(&spec("v"), false, t(0)).unwrap();
    let (running, _) = store
        .create_workflow_run(&wf, None, &Default::default(), t(1), None)
        .unwrap();
    let asked = store
        .request_workflow_cancel(running.id.as_str(), "stop it", t(2))
        .unwrap();
    assert_eq!(asked.cancel_requested.as_deref(), Some("stop it"));
    let mut finished = Vec::new();
    for (i, w) in [&wf, &wf, &wf, &other].into_iter().enumerate() {
        let at = t(10 + i as i64);
        let (mut run, _) = store
            .create_workflow_run(w, None, &Default::default(), at, None)
            .unwrap();
        run.status = WorkflowRunStatus::Failed;
        run.finished_at = Some(at);
        store.save_workflow_run(&run, &[], at, None).unwrap();
        finished.push(run.id);
    }
    let done = store
        .request_workflow_cancel(finished[0].as_str(), "too late", t(20))
        .unwrap();
    assert_eq!(
        done.cancel_requested, None,
        "only a running run is cancelled"
    );

    assert_eq!(
        store
            .prune_workflow_runs(&PrunePolicy::default(), false)
            .unwrap(),
        0
    );
    // Keep the newest finished run of each workflow: w's two older ones go.
    let keep = PrunePolicy {
        older_than: None,
        keep_per_loop: Some(1),
        keep_events: None,
    };
    assert_eq!(store.prune_workflow_runs(&keep, true).unwrap(), 2);
    assert_eq!(store.list_workflow_runs(None, None).unwrap().len(), 5);
    assert_eq!(store.prune_workflow_runs(&keep, false).unwrap(), 2);
    assert!(store
        .get_workflow_run(finished[0].as_str())
        .unwrap()
        .is_none());
    assert!(store.step_runs(finished[0].as_str()).unwrap().is_empty());
    assert!(store
        .workflow_events(finished[0].as_str(), None)
        .unwrap()
        .is_empty());
    // Older than everything: every finished run, never the running one.
    let age = PrunePolicy {
        older_than: Some(t(100)),
        keep_per_loop: None,
        keep_events: None,
    };
    assert_eq!(store.prune_workflow_runs(&age, false).unwrap(), 2);
    let left: Vec<_> = store
        .list_workflow_runs(None, None)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, [running.id]);
}

/// The runner's writes carry the daemon's fence: after a take-over they fail with
/// `LeaseLost` and write nothing.
pub fn workflow_writes_are_fenced(db: &dyn TestDb) {
    let store = db.open();
    let never = |_: &DaemonLease| false;
    let always = |_: &DaemonLease| true;
    let wf = store.create_workflow(&spec("w"), false, t(0)).unwrap();
    let old = acquired(
        store
            .acquire_daemon_lease(&holder("d1"), 60_000, t(0), &never)
            .unwrap(),
    );
    let old_fence = Fence { token: old.token };
    let (mut run, _) = store
        .create_workflow_run(&wf, None, &Default::default(), t(1), Some(&old_fence))
        .unwrap();
    acquired(
        store
            .acquire_daemon_lease(&holder("d2"), 60_000, t(2), &always)
            .unwrap(),
    );
    let lost = |r: Result<(), StoreError>| {
        assert!(matches!(r, Err(StoreError::LeaseLost)), "{r:?}");
    };
    lost(
        store
            .create_workflow_run(&wf, None, &Default::default(), t(3), Some(&old_fence))
            .map(|_| ()),
    );
    let mut step = store.step_runs(run.id.as_str()).unwrap().remove(0);
    step.status = StepStatus::Running;
    lost(store.save_step_run(&step, &[event(Some("a"))], t(3), Some(&old_fence)));
    run.status = WorkflowRunStatus::Failed;
    lost(store.save_workflow_run(&run, &[event(None)], t(3), Some(&old_fence)));

    assert_eq!(store.list_workflow_runs(None, None).unwrap().len(), 1);
    assert_eq!(
        store
            .get_workflow_run(run.id.as_str())
            .unwrap()
            .unwrap()
            .status,
        WorkflowRunStatus::Running
    );
    assert!(store
        .step_runs(run.id.as_str())
        .unwrap()
        .iter()
        .all(|s| s.status == StepStatus::Pending));
    assert_eq!(
        store.workflow_events(run.id.as_str(), None).unwrap().len(),
        1
    );
}
