//! `loops usage`: the agent usage stored on runs and on workflow step runs, added up
//! by [`loops_core::usage::roll_up`].

use super::{Client, Result};
use loops_core::usage::{self, GroupBy, UsageEntry, UsageReport};
use loops_core::workflow::StepTarget;
use loops_core::{Instant, LoopId, Target, WorkflowId};
use loops_store::UsageSource;
use std::collections::HashMap;

impl Client {
    /// Tokens and cost reported by agent runs and agent steps that finished at or after
    /// `since`, grouped `by` loop, provider or day, with totals. A step counts for the
    /// loop whose slot ran its workflow (`workflow NAME` when it ran inline), its
    /// provider from the spec version it ran. Reads through the store's index of rows
    /// with usage. Every budget is shown against its spend in its current window.
    pub fn usage(&self, since: Instant, by: GroupBy) -> Result<UsageReport> {
        let rows = self.store.usage_since(since)?;
        let mut loops: HashMap<LoopId, Option<(String, Option<String>)>> = HashMap::new();
        let mut specs: HashMap<WorkflowId, Option<loops_core::workflow::Workflow>> = HashMap::new();
        let mut entries = Vec::with_capacity(rows.len());
        for row in rows {
            let (owner, provider, step) = match &row.source {
                UsageSource::Run { loop_id, loop_name } => {
                    let found = self.loop_owner(&mut loops, loop_id)?;
                    let provider = found.and_then(|(_, p)| p);
                    (loop_name.clone(), provider, false)
                }
                UsageSource::Step {
                    workflow_id,
                    workflow_name,
                    step_id,
                    loop_id,
                } => {
                    let owner = match loop_id {
                        Some(id) => self.loop_owner(&mut loops, id)?.map(|(name, _)| name),
                        None => None,
                    }
                    .unwrap_or_else(|| format!("workflow {workflow_name}"));
                    if !specs.contains_key(workflow_id) {
                        let spec = self.store.get_workflow(workflow_id.as_str())?;
                        specs.insert(workflow_id.clone(), spec);
                    }
                    let provider = specs
                        .get(workflow_id)
                        .and_then(Option::as_ref)
                        .and_then(|w| w.spec.steps.iter().find(|s| &s.id == step_id))
                        .and_then(|s| match &s.target {
                            StepTarget::Agent(a) => Some(a.provider.to_string()),
                            StepTarget::Command(_) => None,
                        });
                    (owner, provider, true)
                }
            };
            entries.push(UsageEntry {
                finished_at: row.finished_at,
                owner,
                provider,
                step,
                usage: row.usage,
            });
        }
        let mut report = usage::roll_up(&entries, by, since);
        report.budgets = self.all_budget_status(chrono::Utc::now())?;
        Ok(report)
    }

    /// A loop's name and its agent provider, looked up once per loop; `None` once the
    /// loop is gone.
    fn loop_owner(
        &self,
        cache: &mut HashMap<LoopId, Option<(String, Option<String>)>>,
        id: &LoopId,
    ) -> Result<Option<(String, Option<String>)>> {
        if let Some(found) = cache.get(id) {
            return Ok(found.clone());
        }
        let found = self.store.get_loop(id)?.map(|lp| {
            let provider = match &lp.target {
                Target::Agent(a) => Some(a.provider.to_string()),
                _ => None,
            };
            (lp.name, provider)
        });
        cache.insert(id.clone(), found.clone());
        Ok(found)
    }
}
