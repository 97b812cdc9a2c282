-- 0013_failure_classes (issue #20, item 1): what kind of failure a failed run was, read
-- from its process and its agent CLI's output (`failureClass`: usage_limit, rate_limit,
-- overloaded, auth, context_length, tool_denied, timeout, crash, other), and the
-- instant its provider said to come back at (`retryAt`). NULL for runs that did not
-- fail and for runs recorded before.
ALTER TABLE runs ADD COLUMN failure_class TEXT;
ALTER TABLE runs ADD COLUMN retry_at INTEGER;
