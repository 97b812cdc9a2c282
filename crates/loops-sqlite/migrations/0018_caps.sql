-- 0018_caps (issue #20, item 6): what a run counts against under the daemons'
-- concurrency caps (`loops_core::caps::RunKeys`), recorded at claim: its loop's target
-- kind, an agent run's provider, and its account (the profile its loop's pool chose,
-- else the target's; NULL for an agent without either, counted as 'default'). NULL
-- kind for runs recorded before (they count against no cap). The partial index serves
-- the count of running rows by key in every counted claim.
ALTER TABLE runs ADD COLUMN run_kind TEXT;
ALTER TABLE runs ADD COLUMN provider TEXT;
ALTER TABLE runs ADD COLUMN account TEXT;
CREATE INDEX runs_running_keys ON runs (run_kind, provider, account) WHERE status = 'running';
-- The caps each daemon runs with (`daemon run --max-concurrent-per`, as the flag reads
-- them back), for `show`, `health` and `daemon status`; a row per runner id, replaced
-- at start and removed at a clean stop.
CREATE TABLE concurrency_caps (
    runner_id   TEXT PRIMARY KEY,
    caps        TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
);
