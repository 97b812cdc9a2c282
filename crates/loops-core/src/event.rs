//! The store's event log: one sequenced entry per change a watcher cares about — a loop
//! created, changed or removed, a run started or finished, a workflow run's event —
//! written by the store in the same transaction as the change itself, so the log never
//! says something that did not commit and never misses something that did. The HTTP
//! API streams it (`GET /v1/events`, resumable with `Last-Event-ID`).
//!
//! This module builds the entries' bodies from the domain's records, so every backend
//! writes the same documents. Bodies carry no secrets: no target (prompts, env values),
//! no captured output.

use crate::workflow::NewEvent;
use crate::{Instant, Loop, LoopId, LoopStatus, Run, RunId, WorkflowRunId};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fmt;
use std::str::FromStr;

string_enum!(
    /// What an entry of the event log records.
    EventKind {
        /// A loop was created (`data.loop`).
        LoopCreated = "loop.created",
        /// A loop's definition or status changed: edited, renamed, paused, resumed,
        /// stopped, archived, unarchived, expired or parked (`data.loop`). A
        /// scheduling pass moving its next slot is not a change (the run events say
        /// where the loop's next slot is).
        LoopChanged = "loop.changed",
        /// A loop and its history were removed (`data.loop`: id and name).
        LoopRemoved = "loop.removed",
        /// A run was claimed and started (`data.run`, `data.loop`).
        RunStarted = "run.started",
        /// A run ended, or a slot was recorded `skipped` (`data.run`, `data.loop`).
        RunFinished = "run.finished",
        /// A workflow run's event log got an entry (`data.eventType`: `created`,
        /// `step_started`, `step_succeeded`, …).
        WorkflowEvent = "workflow.event",
    }
);

/// What an event says, before the store gives it its sequence number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventBody {
    pub kind: EventKind,
    /// The loop it is about, if any.
    pub loop_id: Option<LoopId>,
    /// The run it is about, if any (its events go when retention prunes the run).
    pub run_id: Option<RunId>,
    /// The workflow run it is about, if any (pruned with it).
    pub workflow_run_id: Option<WorkflowRunId>,
    /// The document (see [`EventKind`]).
    pub data: serde_json::Value,
}

/// An entry of the event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Its place in the log: only grows, never reused (also after pruning).
    pub seq: u64,
    /// When it was written (the instant of the change).
    #[serde(with = "crate::timefmt")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Instant,
    #[serde(flatten)]
    pub body: EventBody,
}

/// The few fields of a loop an event carries (no target: that is where secrets live).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopBrief {
    pub id: LoopId,
    pub name: String,
    pub status: LoopStatus,
    pub next_run_at: Option<Instant>,
    pub due_at: Option<Instant>,
}

impl LoopBrief {
    /// The brief of a loop.
    pub fn of(lp: &Loop) -> Self {
        Self {
            id: lp.id.clone(),
            name: lp.name.clone(),
            status: lp.status,
            next_run_at: lp.next_run_at,
            due_at: lp.due_at,
        }
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "nextRunAt": self.next_run_at.as_ref().map(crate::format_instant),
            "dueAt": self.due_at.as_ref().map(crate::format_instant),
        })
    }
}

fn loop_json(lp: &Loop) -> serde_json::Value {
    let mut v = LoopBrief::of(lp).to_json();
    if let Some(obj) = v.as_object_mut() {
        obj.insert("labels".into(), json!(lp.labels));
        obj.insert(
            "updatedAt".into(),
            json!(crate::format_instant(&lp.updated_at)),
        );
    }
    v
}

/// A run without its output (and without its agent's text).
fn run_json(run: &Run) -> serde_json::Value {
    let at = |t: &Option<Instant>| t.as_ref().map(crate::format_instant);
    json!({
        "id": run.id,
        "loopId": run.loop_id,
        "loopName": run.loop_name,
        "scheduledFor": crate::format_instant(&run.scheduled_for),
        "attempt": run.attempt,
        "status": run.status,
        "source": run.source,
        "dueAt": at(&run.due_at),
        "startedAt": at(&run.started_at),
        "finishedAt": at(&run.finished_at),
        "exitCode": run.exit_code,
        "durationMs": run.duration_ms,
        "error": run.error,
    })
}

impl EventBody {
    fn about_loop(kind: EventKind, id: &LoopId, data: serde_json::Value) -> Self {
        Self {
            kind,
            loop_id: Some(id.clone()),
            run_id: None,
            workflow_run_id: None,
            data,
        }
    }

    /// `loop.created`.
    pub fn loop_created(lp: &Loop) -> Self {
        Self::about_loop(
            EventKind::LoopCreated,
            &lp.id,
            json!({ "loop": loop_json(lp) }),
        )
    }

    /// `loop.changed`.
    pub fn loop_changed(lp: &Loop) -> Self {
        Self::about_loop(
            EventKind::LoopChanged,
            &lp.id,
            json!({ "loop": loop_json(lp) }),
        )
    }

    /// `loop.removed`.
    pub fn loop_removed(id: &LoopId, name: &str) -> Self {
        Self::about_loop(
            EventKind::LoopRemoved,
            id,
            json!({ "loop": { "id": id, "name": name } }),
        )
    }

    fn about_run(kind: EventKind, run: &Run, lp: Option<&LoopBrief>) -> Self {
        Self {
            kind,
            loop_id: Some(run.loop_id.clone()),
            run_id: Some(run.id.clone()),
            workflow_run_id: None,
            data: json!({
                "run": run_json(run),
                "loop": lp.map(LoopBrief::to_json),
            }),
        }
    }

    /// `run.started`: `lp` is the loop as the claim left it (its next slot moved on).
    pub fn run_started(run: &Run, lp: Option<&LoopBrief>) -> Self {
        Self::about_run(EventKind::RunStarted, run, lp)
    }

    /// `run.finished` (also a slot recorded `skipped`): `lp` is the loop as the run's
    /// end left it.
    pub fn run_finished(run: &Run, lp: Option<&LoopBrief>) -> Self {
        Self::about_run(EventKind::RunFinished, run, lp)
    }

    /// `workflow.event`: the `sequence`-th entry of a workflow run's own log.
    pub fn workflow_event(
        run: &WorkflowRunId,
        workflow_name: &str,
        loop_id: Option<&LoopId>,
        sequence: u64,
        event: &NewEvent,
    ) -> Self {
        Self {
            kind: EventKind::WorkflowEvent,
            loop_id: loop_id.cloned(),
            run_id: None,
            workflow_run_id: Some(run.clone()),
            data: json!({
                "workflowRunId": run,
                "workflowName": workflow_name,
                "loopId": loop_id,
                "sequence": sequence,
                "eventType": event.event_type,
                "stepId": event.step_id,
                "payload": event.payload,
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_their_names() {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "loop.created",
                "loop.changed",
                "loop.removed",
                "run.started",
                "run.finished",
                "workflow.event"
            ]
        );
    }

    #[test]
    fn an_event_is_flat_json() {
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        let e = Event {
            seq: 7,
            at,
            body: EventBody::loop_removed(&LoopId::new("abc"), "n"),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["seq"], 7);
        assert_eq!(v["kind"], "loop.removed");
        assert_eq!(v["loopId"], "abc");
        assert_eq!(v["data"]["loop"]["name"], "n");
        assert_eq!(v["at"], "2023-11-14T22:13:20.000Z");
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }
}
