-- 0003_reports_events: the SQLite backend's migrations 8-10 in PostgreSQL's terms —
-- the indexes of `loops health` and `loops usage`, and the store's event log (the HTTP
-- API's live events).

-- health: a loop's skipped slots of the last day (the slot range of one loop).
CREATE INDEX runs_skipped_slot ON runs (loop_id, scheduled_for) WHERE status = 'skipped';
-- usage: runs and step runs that carry an agent's usage, by when they finished.
CREATE INDEX runs_usage ON runs (finished_at) WHERE usage_json IS NOT NULL;
CREATE INDEX workflow_step_runs_usage ON workflow_step_runs (finished_at)
    WHERE usage_json IS NOT NULL;
-- health: a loop's newest runs, newest first (by creation, then slot and attempt), with
-- the columns `loops health` reads of them, so its newest rows come out of the index.
CREATE INDEX runs_loop_recent ON runs
    (loop_id, created_at DESC, scheduled_for DESC, attempt DESC)
    INCLUDE (status, started_at, finished_at);

-- One row per change a watcher cares about (loop created / changed / removed, run
-- started / finished, a workflow run's event), inserted in the same transaction as the
-- change. Writers append under a transaction-level advisory lock held to their commit,
-- so numbers become visible in order (a reader that saw up to n never later finds a
-- lower one). Numbers come from an identity and are never given twice; the highest
-- number of rows since pruned is kept in meta ('events_pruned_through').
CREATE TABLE events (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             TEXT NOT NULL,
    loop_id          TEXT COLLATE "C",
    run_id           TEXT COLLATE "C",
    workflow_run_id  TEXT COLLATE "C",
    data_json        TEXT NOT NULL,
    created_at       BIGINT NOT NULL
);
CREATE INDEX events_run ON events (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX events_workflow_run ON events (workflow_run_id) WHERE workflow_run_id IS NOT NULL;
CREATE INDEX events_loop ON events (loop_id) WHERE loop_id IS NOT NULL;
CREATE INDEX events_created ON events (created_at);
