//! What `loops store copy` moves between backends: everything a store holds, read
//! through the [`Store`](crate::Store) trait from the source and written by the
//! target backend's bulk insert (PostgreSQL's `copy_in`, SQLite's `copy_in`), keeping
//! every id, instant and event number.

use loops_core::event::Event;
use loops_core::workflow::{StepRun, Workflow, WorkflowEvent, WorkflowRun};
use loops_core::{Delivery, Loop, Notify, Run};

/// Everything to copy, read from the source store (runs and workflow runs oldest
/// first, so the target's insertion order is the source's).
#[derive(Debug, Clone, Default)]
pub struct CopySet {
    pub loops: Vec<Loop>,
    pub runs: Vec<Run>,
    pub workflows: Vec<Workflow>,
    pub workflow_runs: Vec<WorkflowRun>,
    pub step_runs: Vec<StepRun>,
    pub workflow_events: Vec<WorkflowEvent>,
    pub deliveries: Vec<Delivery>,
    pub events: Vec<Event>,
    pub notify_default: Option<Notify>,
}
