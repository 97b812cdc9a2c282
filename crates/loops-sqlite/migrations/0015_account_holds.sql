-- 0015_account_holds (issue #20, item 2): a provider and account held by a usage limit
-- (`loops_core::hold`). While `held_until` is ahead, no slot of a loop whose agent
-- target has this provider and account profile ('default' without one) is claimed; a
-- finalization writes the row (a run met the limit) and deletes it (a run on the key
-- did not), in its own transaction. `probes` counts consecutive usage-limit runs
-- without a reset instant (the probe doubles by it), `notified` whether the one
-- `held` notification of the key was queued.
CREATE TABLE account_holds (
    provider    TEXT NOT NULL,
    account     TEXT NOT NULL,
    held_until  INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    since       INTEGER NOT NULL,
    probes      INTEGER NOT NULL,
    notified    INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (provider, account)
);
