//! Agent operations (issue #20): what a run's failure was and when its provider said to
//! come back, as the runs and the health facts keep them.

use super::{claim, claim_req, finish, new_loop, outcome, t, TestDb};
use loops_core::failure::FailureClass;
use loops_core::health::FactsQuery;
use loops_core::RunStatus;

/// A finalized run keeps its failure class and its provider's retry instant, in the
/// row and in the health facts of its loop; a success has neither.
pub fn failure_classes_round_trip_into_runs_and_health_facts(db: &dyn TestDb) {
    let store = db.open();
    let lp = store
        .create_loop(new_loop("agent", Some(t(0))), t(0))
        .unwrap();
    let first = claim(&*store, &claim_req(&lp, t(0), t(1))).unwrap();
    let mut out = outcome(RunStatus::Failed, t(2));
    out.failure_class = Some(FailureClass::UsageLimit);
    out.retry_at = Some(t(3_600_000));
    let done = finish(&*store, &first.id, out).unwrap();
    assert_eq!(done.failure_class, Some(FailureClass::UsageLimit));
    assert_eq!(done.retry_at, Some(t(3_600_000)));
    assert_eq!(store.get_run(&first.id).unwrap().unwrap(), done);

    let facts = store
        .run_facts(
            &[FactsQuery {
                loop_id: lp.id.clone(),
                window: (t(0), t(10)),
                slot_window: (t(0), t(10)),
                grid: None,
            }],
            5,
        )
        .unwrap();
    let newest = facts[0].newest.as_ref().unwrap();
    assert_eq!(newest.failure_class, Some(FailureClass::UsageLimit));
    assert_eq!(
        facts[0].recent[0].failure_class,
        Some(FailureClass::UsageLimit)
    );

    let second = claim(&*store, &claim_req(&lp, t(60_000), t(60_001))).unwrap();
    let ok = finish(
        &*store,
        &second.id,
        outcome(RunStatus::Succeeded, t(60_002)),
    )
    .unwrap();
    assert_eq!((ok.failure_class, ok.retry_at), (None, None));
    let listed = store.running_runs(None).unwrap();
    assert!(listed.is_empty());
}
