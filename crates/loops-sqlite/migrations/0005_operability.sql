-- Issue #11's foundation: labels, jitter, notifications.

-- Labels: the loop's sorted list, and an index of (label, loop) for filtering by any
-- set of labels without scanning every loop. Both are written in the same transaction.
ALTER TABLE loops ADD COLUMN labels_json TEXT NOT NULL DEFAULT '[]';
CREATE TABLE loop_labels (
    label   TEXT NOT NULL,
    loop_id TEXT NOT NULL REFERENCES loops (id) ON DELETE CASCADE,
    PRIMARY KEY (label, loop_id)
) WITHOUT ROWID;
CREATE INDEX loop_labels_loop ON loop_labels (loop_id);

-- Jitter: each slot starts a stable delay in [0, jitter_ms) after it; `due_at` is the
-- next slot (or retry) plus its delay, and is what the due index scans.
ALTER TABLE loops ADD COLUMN jitter_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE loops ADD COLUMN due_at INTEGER;
UPDATE loops SET due_at = next_run_at;
CREATE INDEX loops_due_at ON loops (status, due_at);
-- When a run's attempt became due (its slot or retry plus the jitter): lag counts from it.
ALTER TABLE runs ADD COLUMN due_at INTEGER;

-- Notifications: a loop's settings (JSON, NULL for none; the store-wide default lives
-- in `meta` under 'notify_default'), and one row per delivery of one notification.
ALTER TABLE loops ADD COLUMN notify_json TEXT;
CREATE TABLE notification_deliveries (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    loop_id     TEXT NOT NULL,
    event       TEXT NOT NULL,
    channel     TEXT NOT NULL,
    target      TEXT NOT NULL,
    status      TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    last_error  TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX notification_deliveries_run ON notification_deliveries (run_id);
-- Deliveries still to be made (a daemon that stopped mid-delivery resumes them).
CREATE INDEX notification_deliveries_pending ON notification_deliveries (created_at)
    WHERE status = 'pending';
