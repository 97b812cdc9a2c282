-- Issue #11 (health): a loop's newest runs with every column `loops health` reads of
-- them (all but the error, read by rowid for failed attempts only), so its newest 20
-- rows come out of this index without a table row being read. Ordered by creation,
-- then slot and attempt (rows of one loop created in the same millisecond).
CREATE INDEX runs_loop_recent ON runs
    (loop_id, created_at, scheduled_for, attempt, status, started_at, finished_at);
