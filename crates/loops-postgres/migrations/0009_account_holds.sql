-- 0009_account_holds (issue #20, item 2): a provider and account held by a usage limit
-- (`loops_core::hold`). While `held_until` is ahead, no runner claims a slot of a loop
-- whose agent target has this provider and account profile ('default' without one); a
-- finalization writes the row (a run met the limit) and deletes it (a run on the key
-- did not), in its own transaction, under an advisory lock of the key so that one
-- `held` notification is queued per key however many runners meet the limit at once.
-- `probes` counts consecutive usage-limit runs without a reset instant (the probe
-- doubles by it), `notified` whether the key's `held` notification was queued.
CREATE TABLE account_holds (
    provider    TEXT NOT NULL,
    account     TEXT NOT NULL,
    held_until  BIGINT NOT NULL,
    reason      TEXT NOT NULL,
    since       BIGINT NOT NULL,
    probes      BIGINT NOT NULL,
    notified    BOOLEAN NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (provider, account)
);
