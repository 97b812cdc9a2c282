-- Issue #13, the HTTP API's live events: the store's event log. One row per change a
-- watcher cares about (loop created / changed / removed, run started / finished, a
-- workflow run's event), inserted in the same transaction as the change. `seq` is
-- AUTOINCREMENT so a number is never given twice, also after the newest rows were
-- pruned: a client resuming with `Last-Event-ID` never mistakes a new event for one it
-- saw. Rows go with their run / workflow run when retention prunes it, with their loop
-- when it is removed, and by age (the retention's `--keep-for`).
CREATE TABLE events (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT NOT NULL,
    loop_id          TEXT,
    run_id           TEXT,
    workflow_run_id  TEXT,
    data_json        TEXT NOT NULL,
    created_at       INTEGER NOT NULL
);
CREATE INDEX events_run ON events(run_id) WHERE run_id IS NOT NULL;
CREATE INDEX events_workflow_run ON events(workflow_run_id) WHERE workflow_run_id IS NOT NULL;
CREATE INDEX events_loop ON events(loop_id) WHERE loop_id IS NOT NULL;
CREATE INDEX events_created ON events(created_at);
