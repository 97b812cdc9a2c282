-- 0001_initial: the whole schema of the SQLite backend's migrations 1-7 (loops, runs,
-- the daemon lease, meta, workflows, labels, jitter, notifications and their claims),
-- in PostgreSQL's terms. Later changes are new files, never edits of this one.
--
-- Instants are BIGINT milliseconds since the Unix epoch (UTC), as on SQLite, so both
-- backends round-trip the same values. Enumerations are lowercase TEXT without CHECK
-- constraints: the reader rejects values it does not know. Names and ids use the "C"
-- collation, so listings sort as on SQLite (bytewise) and id-prefix lookups are
-- b-tree range scans. `seq` (an identity) is the insertion order that breaks ties
-- between rows created in the same millisecond (SQLite's rowid).

CREATE TABLE meta (
    key   TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE loops (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    name                TEXT COLLATE "C" NOT NULL UNIQUE,
    description         TEXT,
    status              TEXT NOT NULL,
    schedule_json       TEXT NOT NULL,
    target_json         TEXT NOT NULL,
    next_run_at         BIGINT,
    retry_scheduled_for BIGINT,
    catch_up            TEXT NOT NULL,
    catch_up_limit      BIGINT NOT NULL,
    overlap             TEXT NOT NULL,
    max_attempts        BIGINT NOT NULL,
    retry_delay_ms      BIGINT NOT NULL,
    lease_ms            BIGINT NOT NULL,
    expires_at          BIGINT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    jitter_ms           BIGINT NOT NULL DEFAULT 0,
    -- The next slot (or retry) plus its slot's jitter: what the due index scans.
    due_at              BIGINT,
    labels_json         TEXT NOT NULL DEFAULT '[]',
    notify_json         TEXT
);
-- due_loops / next_due_at: a range scan over active loops by due instant.
CREATE INDEX loops_due_at ON loops (due_at) WHERE status = 'active';
-- expire_loops: only active loops that have an expiry are candidates.
CREATE INDEX loops_expiry ON loops (expires_at)
    WHERE status = 'active' AND expires_at IS NOT NULL;

CREATE TABLE loop_labels (
    label   TEXT COLLATE "C" NOT NULL,
    loop_id TEXT COLLATE "C" NOT NULL REFERENCES loops (id) ON DELETE CASCADE,
    PRIMARY KEY (label, loop_id)
);
CREATE INDEX loop_labels_loop ON loop_labels (loop_id);

CREATE TABLE runs (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY,
    id               TEXT COLLATE "C" PRIMARY KEY,
    loop_id          TEXT COLLATE "C" NOT NULL REFERENCES loops (id) ON DELETE CASCADE,
    loop_name        TEXT NOT NULL,
    scheduled_for    BIGINT NOT NULL,
    attempt          BIGINT NOT NULL,
    status           TEXT NOT NULL,
    source           TEXT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    exit_code        BIGINT,
    duration_ms      BIGINT,
    stdout           TEXT,
    stderr           TEXT,
    error            TEXT,
    pid              BIGINT,
    pid_start_time   BIGINT,
    claimed_by       TEXT,
    lease_expires_at BIGINT,
    summary          TEXT,
    usage_json       TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    due_at           BIGINT,
    -- The final guard of a claim: one row per slot attempt, whichever runner, on
    -- whichever host, inserts it.
    CONSTRAINT runs_slot_attempt UNIQUE (loop_id, scheduled_for, attempt)
);
CREATE INDEX runs_loop_created ON runs (loop_id, created_at, seq);
CREATE INDEX runs_created ON runs (created_at, seq);
CREATE INDEX runs_finished ON runs (finished_at);
CREATE INDEX runs_running_lease ON runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_running_loop ON runs (loop_id) WHERE status = 'running';
CREATE INDEX runs_failed_slot ON runs (loop_id, scheduled_for)
    WHERE status IN ('failed', 'timed_out', 'abandoned');
CREATE INDEX runs_status_created ON runs (status, created_at, seq);
CREATE INDEX runs_loop_status_created ON runs (loop_id, status, created_at, seq);

-- At most one row: the single fenced daemon lease of the Store trait (SQLite's
-- model). The token's high-water mark lives in meta ('daemon_lease_token').
CREATE TABLE daemon_lease (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    runner_id      TEXT NOT NULL,
    pid            BIGINT NOT NULL,
    pid_start_time BIGINT,
    host           TEXT NOT NULL,
    token          BIGINT NOT NULL,
    acquired_at    BIGINT NOT NULL,
    heartbeat_at   BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL
);

CREATE TABLE workflows (
    id          TEXT COLLATE "C" PRIMARY KEY,
    name        TEXT COLLATE "C" NOT NULL,
    version     BIGINT NOT NULL,
    status      TEXT NOT NULL,
    spec_json   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX workflows_active_name ON workflows (name) WHERE status = 'active';
CREATE INDEX workflows_name ON workflows (name, version);

CREATE TABLE workflow_runs (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY,
    id               TEXT COLLATE "C" PRIMARY KEY,
    workflow_id      TEXT COLLATE "C" NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    workflow_name    TEXT COLLATE "C" NOT NULL,
    loop_id          TEXT,
    loop_run_id      TEXT,
    scheduled_for    BIGINT,
    idempotency_key  TEXT,
    status           TEXT NOT NULL,
    attempt          BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    duration_ms      BIGINT,
    error            TEXT,
    cancel_requested TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
-- A slot never has two workflow runs.
CREATE UNIQUE INDEX workflow_runs_key ON workflow_runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflow_runs_workflow ON workflow_runs (workflow_id, created_at DESC);
CREATE INDEX workflow_runs_created ON workflow_runs (created_at DESC, seq DESC);

CREATE TABLE workflow_step_runs (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    workflow_run_id     TEXT COLLATE "C" NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    step_id             TEXT NOT NULL,
    sequence            BIGINT NOT NULL,
    status              TEXT NOT NULL,
    attempts            BIGINT NOT NULL DEFAULT 0,
    started_at          BIGINT,
    finished_at         BIGINT,
    exit_code           BIGINT,
    pid                 BIGINT,
    pid_start_time      BIGINT,
    duration_ms         BIGINT,
    stdout              TEXT,
    stderr              TEXT,
    error               TEXT,
    account_profile     TEXT,
    account_tool        TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    summary             TEXT,
    usage_json          TEXT,
    exit_status_unknown BOOLEAN NOT NULL DEFAULT FALSE,
    UNIQUE (workflow_run_id, step_id)
);
CREATE INDEX workflow_step_runs_run ON workflow_step_runs (workflow_run_id, sequence);

CREATE TABLE workflow_events (
    id               TEXT COLLATE "C" PRIMARY KEY,
    workflow_run_id  TEXT COLLATE "C" NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    sequence         BIGINT NOT NULL,
    event_type       TEXT NOT NULL,
    step_id          TEXT,
    payload_json     TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    UNIQUE (workflow_run_id, sequence)
);

CREATE TABLE notification_deliveries (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY,
    id               TEXT COLLATE "C" PRIMARY KEY,
    run_id           TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    loop_id          TEXT NOT NULL,
    event            TEXT NOT NULL,
    channel          TEXT NOT NULL,
    target           TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         BIGINT NOT NULL,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    claimed_by       TEXT,
    claim_expires_at BIGINT
);
CREATE INDEX notification_deliveries_run ON notification_deliveries (run_id);
CREATE INDEX notification_deliveries_pending ON notification_deliveries (created_at, seq)
    WHERE status = 'pending';
