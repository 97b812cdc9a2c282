-- 0013_step_provider (issue #20, item 7): an agent step run's provider, written when its
-- workflow run is created (NULL for command steps), so that a workflow's agent steps
-- spend from their provider's store-wide budgets as agent loops' runs do. Step runs that
-- reported usage before, or have not finished (a run in flight across the upgrade), take
-- it from their workflow's stored spec.
ALTER TABLE workflow_step_runs ADD COLUMN provider TEXT;
-- A stored spec that is not JSON (hostile state) leaves the backfill undone, not the
-- migration.
DO $$
BEGIN
    UPDATE workflow_step_runs s SET provider = (
        SELECT step.value -> 'target' ->> 'provider'
        FROM workflow_runs r
        JOIN workflows w ON w.id = r.workflow_id,
             jsonb_array_elements(w.spec_json::jsonb -> 'steps') AS step(value)
        WHERE r.id = s.workflow_run_id
          AND step.value ->> 'id' = s.step_id
          AND step.value -> 'target' ->> 'type' = 'agent'
        LIMIT 1
    )
    WHERE s.usage_json IS NOT NULL OR s.finished_at IS NULL;
EXCEPTION WHEN invalid_text_representation OR invalid_parameter_value THEN
    NULL;
END
$$;
-- The store-wide budgets' spend of a provider's steps in a window.
CREATE INDEX workflow_step_runs_provider_usage ON workflow_step_runs (provider, finished_at)
    WHERE usage_json IS NOT NULL;
