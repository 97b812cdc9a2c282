-- 0019_step_provider (issue #20, item 7): an agent step run's provider, written when its
-- workflow run is created (NULL for command steps), so that a workflow's agent steps
-- spend from their provider's store-wide budgets as agent loops' runs do. Step runs that
-- reported usage before, or have not finished (a run in flight across the upgrade), take
-- it from their workflow's stored spec.
ALTER TABLE workflow_step_runs ADD COLUMN provider TEXT;
UPDATE workflow_step_runs SET provider = (
    SELECT json_extract(step.value, '$.target.provider')
    FROM workflow_runs r
    JOIN workflows w ON w.id = r.workflow_id,
         json_each(CASE WHEN json_valid(w.spec_json) THEN w.spec_json ELSE '{}' END,
                   '$.steps') AS step
    WHERE r.id = workflow_step_runs.workflow_run_id
      AND json_extract(step.value, '$.id') = workflow_step_runs.step_id
      AND json_extract(step.value, '$.target.type') = 'agent'
)
WHERE usage_json IS NOT NULL OR finished_at IS NULL;
-- The store-wide budgets' spend of a provider's steps in a window.
CREATE INDEX workflow_step_runs_provider_usage ON workflow_step_runs (provider, finished_at)
    WHERE usage_json IS NOT NULL;
