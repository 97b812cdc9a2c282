-- Issue #11 item 8: run filters (`loops runs --status S --since D --until T`, alone or
-- with a loop or labels), each served by an index rather than a scan of the history.
-- Newest first is `created_at DESC, rowid DESC`; the rowid every index ends with gives
-- the tie-break, so one status comes out of the index already in order.

-- Runs of one or more statuses across all loops, within a creation window.
CREATE INDEX runs_status_created ON runs (status, created_at);
-- Runs of one or more statuses of one loop (or of each loop carrying a label).
CREATE INDEX runs_loop_status_created ON runs (loop_id, status, created_at);
