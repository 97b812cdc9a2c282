-- 0008_backoff_breaker (issue #20, items 3-4): a loop's agent-operations settings (its
-- retry back-off, its circuit breaker's `maxFailures`, and what later items add: stop
-- conditions, budgets, sessions) as one JSON document, NULL for the defaults; and the
-- engine's state of the loop between runs (its failure streak, why the engine paused
-- it), also JSON, NULL for a loop that never failed. Both are read and written with the
-- loop's row (under its lock); nothing queries inside them.
ALTER TABLE loops ADD COLUMN ops_json TEXT;
ALTER TABLE loops ADD COLUMN ops_state_json TEXT;
