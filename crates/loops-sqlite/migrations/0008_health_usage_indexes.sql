-- Issue #11: indexes for `loops health` and `loops usage`, so neither reads the run
-- history row by row. All partial: each holds only the rows its query asks for.

-- health: a loop's skipped slots of the last day (the slot range of one loop).
CREATE INDEX runs_skipped_slot ON runs (loop_id, scheduled_for) WHERE status = 'skipped';
-- usage: runs and step runs that carry an agent's usage, by when they finished.
CREATE INDEX runs_usage ON runs (finished_at) WHERE usage_json IS NOT NULL;
CREATE INDEX workflow_step_runs_usage ON workflow_step_runs (finished_at)
    WHERE usage_json IS NOT NULL;
