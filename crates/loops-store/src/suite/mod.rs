//! The behaviour suite: the [`Store`] contract (see the crate docs) written once, as
//! tests every backend runs through the trait.
//!
//! A backend implements [`TestDb`] — an empty database of its own, on which it can
//! open any number of stores, as separate processes (or hosts) would — and calls
//! [`store_suite!`](crate::store_suite) once in a test file:
//!
//! ```text
//! struct MyDb { /* a temp dir, a schema, … */ }
//! impl loops_store::suite::TestDb for MyDb { /* … */ }
//! loops_store::store_suite!(MyDb::new());
//! ```
//!
//! The macro expands to one `#[test]` per function of this module, each on a database
//! of its own (the expression is evaluated once per test). The functions are public,
//! so a backend can also call one by hand.
//!
//! This module is compiled only with the crate's `suite` feature: it is test code (it
//! panics on a broken contract) and production builds leave it out. A backend enables
//! the feature in its `[dev-dependencies]`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agent_ops;
mod budgets;
mod claims;
mod definitions;
mod events;
mod leases;
mod loops;
mod notify;
mod reports;
mod runs;
mod workflows;

pub use agent_ops::*;
pub use budgets::*;
pub use claims::*;
pub use definitions::*;
pub use events::*;
pub use leases::*;
pub use loops::*;
pub use notify::*;
pub use reports::*;
pub use runs::*;
pub use workflows::*;

use crate::{
    BatchClaim, ClaimRefused, ClaimRequest, DaemonLease, LeaseAcquire, LeaseHolder, LoopAdvance,
    OnRefusal, RunFilter, RunWrite, RunWritten, Store, StoreError,
};
use loops_core::{
    Anchor, CommandTarget, Instant, Loop, LoopId, LoopStatus, NewLoop, Policy, Run, RunId,
    RunOutcome, RunSource, RunStatus, Schedule, Target,
};

/// One empty database of the backend under test, for one test of the suite.
pub trait TestDb: Send + Sync {
    /// A new store on this database, with a connection of its own, as another process
    /// (or host) would open it. Every store opened on one `TestDb` shares its data.
    fn open(&self) -> Box<dyn Store>;

    /// Makes the row of loop `id` undecodable, as a newer build or a hand edit could
    /// leave it: its `catch_up` becomes `sometimes`, a value this build does not know.
    /// (A backend writes it with its own client, past the store.)
    fn spoil_loop_row(&self, id: &LoopId);
}

impl<T: TestDb + ?Sized> TestDb for Box<T> {
    fn open(&self) -> Box<dyn Store> {
        (**self).open()
    }

    fn spoil_loop_row(&self, id: &LoopId) {
        (**self).spoil_loop_row(id);
    }
}

/// Expands to one `#[test]` per function of [`suite`](crate::suite), each running on
/// the `TestDb` that `$make` evaluates to (once per test, so each gets an empty
/// database).
#[macro_export]
macro_rules! store_suite {
    ($make:expr) => {
        $crate::store_suite!(@tests $make;
            // loops
            create_get_by_name_prefix_and_duplicate,
            prefix_lookup_respects_limit,
            list_loops_orders_by_name_and_filters_status,
            update_loop_schedule_roundtrip_and_missing,
            due_loops_order_limit_and_paused_excluded,
            next_due_at_empty,
            expire_loops_marks_only_active_past_expiry,
            due_loops_unless_expiring_yields_to_expiry,
            remove_loop_deletes_its_runs,
            due_loops_reports_an_unreadable_row_in_its_place,
            park_loop_pauses_it_and_records_why_in_one_write,
            labels_and_notify_round_trip,
            jitter_moves_the_due_instant_with_each_slot,
            move_slots_back_moves_only_loops_still_as_read,
            after_name_starts_a_page_after_that_name,
            after_id_walks_the_loops_in_id_order,
            // maintenance
            another_handle_is_the_same_store,
            // claims
            claim_semantics,
            claim_overlap_skip_reports_busy,
            claim_status_rules_and_ad_hoc,
            skipped_slot_is_done,
            racing_claims_have_exactly_one_winner,
            claim_runs_claims_each_in_order_and_advances_only_the_winners,
            a_busy_loop_is_skipped_and_advanced_in_the_claims_transaction,
            claim_and_advance_is_one_write,
            kept_refusals_say_why_and_change_nothing,
            // runs
            finalize_is_guarded,
            mark_run_pid_records_and_guards,
            record_run_writes_applies_in_order_and_fails_rows_alone,
            a_batch_of_finalizations_ends_where_one_by_one_ends,
            a_finished_runs_unreadable_loop_fails_only_its_own_write,
            deferred_retry_is_the_oldest_failed_slot_with_attempts_left,
            heartbeat_extends_only_listed_rows_of_the_runner,
            running_runs_and_their_leases,
            list_runs_newest_first_with_filter_and_limit,
            prune_policies,
            take_over_run_moves_a_running_row_to_a_new_runner,
            // daemon lease and fencing
            daemon_lease_lifecycle,
            takeover_is_only_asked_about_a_live_foreign_holder,
            fenced_writes_after_losing_the_lease_write_nothing,
            // workflows
            workflow_specs_are_versioned_replaced_and_archived,
            a_slot_has_one_workflow_run_with_its_steps_pending,
            workflow_saves_append_events_in_sequence,
            workflow_cancel_requests_and_pruning,
            workflow_writes_are_fenced,
            // loop definitions, labels and run filters (#11)
            update_loop_definition_replaces_the_definition_keeping_id_and_history,
            update_loop_definition_is_guarded_and_writes_nothing_when_refused,
            loop_rows_matching_filters_by_labels_and_hides_archived,
            each_loop_row_hands_out_the_listing_rows_in_order,
            loops_by_next_slot_and_counted,
            list_runs_filters_by_status_window_loop_and_labels,
            // notifications and the live views' run lookups
            notify_default_round_trips_and_clears,
            failure_is_queued_once_per_slot_after_the_last_attempt,
            recovery_is_queued_on_the_first_success_after_a_failed_slot,
            the_default_applies_to_loops_without_settings_of_their_own,
            deliveries_are_claimed_by_one_runner_and_recorded,
            runs_by_id_prefix_and_created_since,
            // the event log (#13)
            loop_changes_are_logged_in_order,
            run_starts_and_ends_are_logged_with_their_loop,
            a_batch_of_claims_logs_each_loop_as_it_left_it,
            pruning_takes_events_along_and_numbers_are_never_reused,
            the_event_log_is_trimmed_to_its_newest_entries,
            workflow_events_are_mirrored_and_pruned_with_their_run,
            // imports and roll-ups
            import_is_one_transaction_or_nothing,
            import_keeps_runner_labels_or_refuses_them,
            run_facts_reports_recent_rows_success_and_window,
            usage_since_lists_runs_and_steps_with_usage,
            recent_runs_and_status_counts_serve_the_dashboard,
            status_counts_follow_every_write_across_hours,
            // agent operations (#20)
            failure_classes_round_trip_into_runs_and_health_facts,
            the_circuit_breaker_state_lives_in_the_loops_row,
            a_usage_limit_holds_every_loop_of_its_account_across_stores,
            a_workflow_step_at_its_usage_limit_holds_its_key_across_stores,
            a_stop_condition_ends_the_loop_in_the_finalizations_transaction,
            session_ids_round_trip_and_the_last_session_is_found,
            budgets_hold_a_spent_loop_and_key_until_the_window_resets,
            counted_claims_never_exceed_a_cap_across_stores,
            a_pooled_run_spends_its_accounts_budget_and_the_pool_moves_on,
            workflow_agent_steps_spend_their_providers_budget,
            provider_options_round_trip_in_the_agent_target,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let db = $make;
                $crate::suite::$name(&db);
            }
        )*
    };
}

// ---- helpers shared by the suite's tests ----

const T0: i64 = 1_700_000_000_000;

/// `T0 + offset_ms`.
fn t(offset_ms: i64) -> Instant {
    chrono::DateTime::from_timestamp_millis(T0 + offset_ms).unwrap()
}

/// An interval loop (every minute, fixed rate) running `echo hi`, default policy.
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
            idle_timeout: None,
            account: None,
        }),
        policy: Policy::default(),
        labels: Vec::new(),
        notify: None,
        next_run_at: next,
    }
}

fn with_attempts(mut n: NewLoop, attempts: u32) -> NewLoop {
    n.policy.max_attempts = attempts;
    n
}

/// Archives `lp` at `now`, its slot kept.
fn archive(store: &dyn Store, lp: &Loop, now: Instant) {
    let archived = LoopAdvance {
        status: LoopStatus::Archived,
        next_run_at: lp.next_run_at,
        retry_scheduled_for: None,
    };
    store
        .update_loop_schedule(&lp.id, &archived, now, None)
        .unwrap();
}

/// A scheduled claim of `slot` by `runner-a`.
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

/// One unfenced claim that leaves its loop as it is.
fn claim(store: &dyn Store, req: &ClaimRequest) -> Result<Run, ClaimRefused> {
    store.claim_run(req, None, None).unwrap()
}

/// A batch claim as the scheduling pass makes it.
fn pass_over(
    request: ClaimRequest,
    advance: Option<LoopAdvance>,
    skip: Vec<Instant>,
) -> BatchClaim {
    BatchClaim {
        caps: Default::default(),
        request,
        advance,
        on_refusal: OnRefusal::PassOver { skip_slots: skip },
    }
}

fn outcome(status: RunStatus, at: Instant) -> RunOutcome {
    RunOutcome {
        status,
        finished_at: at,
        exit_code: Some(if status == RunStatus::Succeeded { 0 } else { 1 }),
        stdout: "out".to_owned(),
        stderr: "err".to_owned(),
        error: None,
        error_output: None,
        summary: None,
        usage: None,
        failure_class: None,
        retry_at: None,
        stop: None,
        session_id: None,
        session_note: None,
    }
}

/// Finalizes `run` alone (unfenced, at its finish instant): the row's own result.
fn finish(store: &dyn Store, run: &RunId, outcome: RunOutcome) -> Result<Run, StoreError> {
    let at = outcome.finished_at;
    let write = RunWrite::Finished {
        run: run.clone(),
        outcome,
    };
    match one(store.record_run_writes(&[write], at, None).unwrap())? {
        RunWritten::Finished { run, .. } => Ok(*run),
        other => panic!("a finalization answered {other:?}"),
    }
}

/// Records `run`'s pid alone (unfenced): the row's own result.
fn spawned(
    store: &dyn Store,
    run: &RunId,
    pid: u32,
    pid_start_time: Option<u64>,
    at: Instant,
) -> Result<(), StoreError> {
    let write = RunWrite::Spawned {
        run: run.clone(),
        pid,
        pid_start_time,
        session_note: None,
        at,
    };
    match one(store.record_run_writes(&[write], at, None).unwrap())? {
        RunWritten::Spawned => Ok(()),
        other => panic!("a pid record answered {other:?}"),
    }
}

/// The only result of a batch of one.
fn one<T>(mut results: Vec<T>) -> T {
    assert_eq!(results.len(), 1, "one result per write");
    results.remove(0)
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

fn run_count(store: &dyn Store) -> usize {
    store.list_runs(&RunFilter::default()).unwrap().len()
}

#[cfg(test)]
mod tests {
    /// Every test function of the suite is listed in `store_suite!`, so a backend's one
    /// macro call runs all of them.
    #[test]
    fn the_macro_lists_every_test() {
        let sources = [
            include_str!("loops.rs"),
            include_str!("claims.rs"),
            include_str!("runs.rs"),
            include_str!("leases.rs"),
            include_str!("workflows.rs"),
            include_str!("definitions.rs"),
            include_str!("notify.rs"),
            include_str!("events.rs"),
            include_str!("reports.rs"),
            include_str!("agent_ops.rs"),
            include_str!("budgets.rs"),
        ];
        let this = include_str!("mod.rs");
        let listed = &this[this.find("macro_rules! store_suite").unwrap()..];
        let mut count = 0;
        for source in sources {
            for line in source.lines() {
                let Some(rest) = line.strip_prefix("pub fn ") else {
                    continue;
                };
                let name = &rest[..rest.find('(').unwrap()];
                assert!(
                    listed.contains(&format!("{name},")),
                    "{name} is not in store_suite!"
                );
                count += 1;
            }
        }
        assert_eq!(count, 80);
    }
}
