-- Workflow specs, their runs, step runs and the per-run event log (issue #4).
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    status      TEXT NOT NULL,
    spec_json   TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
-- Names are unique among active specs only: archived versions keep theirs.
CREATE UNIQUE INDEX workflows_active_name ON workflows(name) WHERE status = 'active';
CREATE INDEX workflows_name ON workflows(name, version);

CREATE TABLE workflow_runs (
    id               TEXT PRIMARY KEY,
    workflow_id      TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    workflow_name    TEXT NOT NULL,
    loop_id          TEXT,
    loop_run_id      TEXT,
    scheduled_for    INTEGER,
    idempotency_key  TEXT,
    status           TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    duration_ms      INTEGER,
    error            TEXT,
    cancel_requested TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
-- A slot never has two workflow runs.
CREATE UNIQUE INDEX workflow_runs_key ON workflow_runs(idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflow_runs_workflow ON workflow_runs(workflow_id, created_at DESC);
CREATE INDEX workflow_runs_created ON workflow_runs(created_at DESC);

CREATE TABLE workflow_step_runs (
    id               TEXT PRIMARY KEY,
    workflow_run_id  TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
    step_id          TEXT NOT NULL,
    sequence         INTEGER NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    started_at       INTEGER,
    finished_at      INTEGER,
    exit_code        INTEGER,
    pid              INTEGER,
    pid_start_time   INTEGER,
    duration_ms      INTEGER,
    stdout           TEXT,
    stderr           TEXT,
    error            TEXT,
    account_profile  TEXT,
    account_tool     TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (workflow_run_id, step_id)
);
CREATE INDEX workflow_step_runs_run ON workflow_step_runs(workflow_run_id, sequence);

CREATE TABLE workflow_events (
    id               TEXT PRIMARY KEY,
    workflow_run_id  TEXT NOT NULL REFERENCES workflow_runs(id) ON DELETE CASCADE,
    sequence         INTEGER NOT NULL,
    event_type       TEXT NOT NULL,
    step_id          TEXT,
    payload_json     TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    UNIQUE (workflow_run_id, sequence)
);
