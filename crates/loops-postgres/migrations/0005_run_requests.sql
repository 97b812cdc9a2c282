-- 0005_run_requests: `run-now --on-runner` (issue #12) asks the live runners to start a
-- run of a loop now. A request is pending until a runner answers it (the run it
-- started, or why it could not) or it expires (its requester waits no longer); its
-- requester deletes it once it read the answer. Instants in milliseconds by the
-- server's clock, as runner leases.
CREATE TABLE run_requests (
    id TEXT PRIMARY KEY,
    loop_id TEXT NOT NULL,
    allow_overlap BOOLEAN NOT NULL,
    requested_by TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    answered_at BIGINT,
    answered_by TEXT,
    run_id TEXT,
    source TEXT,
    refused TEXT
);
-- What an idle runner looks for on a wake-up: few rows, all pending.
CREATE INDEX run_requests_pending ON run_requests (requested_at) WHERE answered_at IS NULL;
