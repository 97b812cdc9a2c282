-- 0002_runners: several daemons ("runners") share one store, each with a lease of its
-- own (issue #12). A runner's epoch is its fencing token, drawn from the same counter
-- as the daemon lease's tokens (meta 'daemon_lease_token'), so no two leases of either
-- kind ever share one. Expiry is judged by the database's clock, the one clock every
-- host shares. Rows of runners that ended are kept a while for `loops runners`.
CREATE TABLE runners (
    epoch          BIGINT PRIMARY KEY,
    runner_id      TEXT NOT NULL,
    host           TEXT NOT NULL,
    pid            BIGINT NOT NULL,
    pid_start_time BIGINT,
    labels_json    TEXT NOT NULL DEFAULT '[]',
    capacity       BIGINT NOT NULL,
    started_at     BIGINT NOT NULL,
    heartbeat_at   BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    released_at    BIGINT
);
CREATE INDEX runners_expiry ON runners (expires_at);

-- The epoch of the runner that claimed (or took over) a running row: its run lease
-- ends when that runner's lease does.
ALTER TABLE runs ADD COLUMN runner_epoch BIGINT;
CREATE INDEX runs_running_epoch ON runs (runner_epoch) WHERE status = 'running';
