//! A workflow run's own log as every backend appends to it: each new entry's sequence
//! number (after the run's last), its payload JSON, and its mirror in the store's event
//! log (`loops_core::event::EventBody::workflow_event`), written in the same
//! transaction.

use crate::codec::Result;
use crate::StoreError;
use loops_core::event::EventBody;
use loops_core::workflow::NewEvent;
use loops_core::{LoopId, StepId, WorkflowRunId};

/// One new entry of a workflow run's log, as a backend inserts it.
#[derive(Debug, Clone)]
pub struct LogEntry<'a> {
    /// Its number in the run's log.
    pub sequence: i64,
    /// `event_type`.
    pub event_type: &'static str,
    /// `step_id`.
    pub step_id: Option<&'a str>,
    /// `payload_json`.
    pub payload: String,
    /// Its entry in the store's event log.
    pub mirror: EventBody,
}

/// `events` of workflow run `run_id` (of `workflow_name`, started by `loop_id`) as the
/// entries numbered from `first` (the run's last number + 1).
pub fn entries<'a>(
    run_id: &str,
    workflow_name: &str,
    loop_id: Option<&LoopId>,
    first: i64,
    events: &'a [NewEvent],
) -> Result<Vec<LogEntry<'a>>> {
    let run = WorkflowRunId::new(run_id);
    (first..)
        .zip(events)
        .map(|(sequence, event)| {
            Ok(LogEntry {
                sequence,
                event_type: event.event_type.as_str(),
                step_id: event.step_id.as_ref().map(StepId::as_str),
                payload: serde_json::to_string(&event.payload)
                    .map_err(|e| StoreError::Decode(e.to_string()))?,
                mirror: EventBody::workflow_event(
                    &run,
                    workflow_name,
                    loop_id,
                    u64::try_from(sequence).unwrap_or(0),
                    event,
                ),
            })
        })
        .collect()
}
