-- Issue #11, notifications: a pending delivery is claimed by the one runner that
-- delivers it (the daemon's notifier, or the `tick` / `run-now` that finalized its run),
-- until an expiry. A runner that dies mid-delivery leaves its claim behind; another
-- runner takes it over once the claimer's process is gone or the claim expired, so a
-- delivery interrupted by a crash is resumed, and two runners never deliver it at once.
ALTER TABLE notification_deliveries ADD COLUMN claimed_by TEXT;
ALTER TABLE notification_deliveries ADD COLUMN claim_expires_at INTEGER;
