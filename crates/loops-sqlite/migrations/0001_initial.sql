-- 0001_initial: loops, their runs, the daemon lease and a key/value meta table.
-- Instants are INTEGER milliseconds since the Unix epoch (UTC): compact and sortable.
-- Enumerations are stored as their lowercase text form, without CHECK constraints, so
-- a later value does not force a table rebuild; the reader rejects unknown values.

-- Marks the file as a loops database (ASCII "loop"), visible to file(1) and to open().
PRAGMA application_id = 1819242352;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE loops (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    description         TEXT,
    status              TEXT NOT NULL,
    schedule_json       TEXT NOT NULL,
    target_json         TEXT NOT NULL,
    next_run_at         INTEGER,
    retry_scheduled_for INTEGER,
    catch_up            TEXT NOT NULL,
    catch_up_limit      INTEGER NOT NULL,
    overlap             TEXT NOT NULL,
    max_attempts        INTEGER NOT NULL,
    retry_delay_ms      INTEGER NOT NULL,
    lease_ms            INTEGER NOT NULL,
    expires_at          INTEGER,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);

-- due_loops / next_due_at: a range scan over active loops by next slot.
CREATE INDEX loops_due ON loops (status, next_run_at);
-- expire_loops: only active loops that have an expiry are candidates.
CREATE INDEX loops_expiry ON loops (expires_at)
    WHERE status = 'active' AND expires_at IS NOT NULL;

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    loop_id          TEXT NOT NULL REFERENCES loops (id) ON DELETE CASCADE,
    loop_name        TEXT NOT NULL,
    scheduled_for    INTEGER NOT NULL,
    attempt          INTEGER NOT NULL,
    status           TEXT NOT NULL,
    source           TEXT NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    exit_code        INTEGER,
    duration_ms      INTEGER,
    stdout           TEXT,
    stderr           TEXT,
    error            TEXT,
    pid              INTEGER,
    pid_start_time   INTEGER,
    claimed_by       TEXT,
    lease_expires_at INTEGER,
    summary          TEXT,
    usage_json       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- The final guard of a claim: one row per slot attempt. Also serves slot lookups
    -- and the foreign key's cascade.
    UNIQUE (loop_id, scheduled_for, attempt)
);

-- list_runs of one loop, newest first (rowid breaks ties within a millisecond).
CREATE INDEX runs_loop_created ON runs (loop_id, created_at);
-- list_runs of all loops, newest first.
CREATE INDEX runs_created ON runs (created_at);
-- prune_runs by age.
CREATE INDEX runs_finished ON runs (finished_at);
-- Running rows are few: expired_running_runs and the overlap check stay tiny scans.
CREATE INDEX runs_running_lease ON runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_running_loop ON runs (loop_id) WHERE status = 'running';
-- next_retryable_slot starts from failed attempts, not from every run of the loop.
CREATE INDEX runs_failed_slot ON runs (loop_id, scheduled_for)
    WHERE status IN ('failed', 'timed_out', 'abandoned');

-- At most one row: the daemon that may write to this store. The fencing token lives
-- in meta ('daemon_lease_token') so it keeps increasing across releases.
CREATE TABLE daemon_lease (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    runner_id      TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    pid_start_time INTEGER,
    host           TEXT NOT NULL,
    token          INTEGER NOT NULL,
    acquired_at    INTEGER NOT NULL,
    heartbeat_at   INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL
);
