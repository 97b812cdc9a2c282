-- 0015_running_indexes (issue #21): the indexes of the running runs keep one entry a
-- row. A run leaves them when it finishes, but its entry stays until a vacuum, and a
-- scan visits the row of every entry it meets. An entry found dead is marked and
-- skipped from then on, except inside a deduplicated posting list holding one live
-- row too: with one key shared by every running run (`runs_running_keys`), such a list
-- was visited whole by every scan, each finished run since the last vacuum
-- (BENCHMARKS.md §32).
ALTER INDEX runs_running_lease SET (deduplicate_items = off);
ALTER INDEX runs_running_loop SET (deduplicate_items = off);
ALTER INDEX runs_running_epoch SET (deduplicate_items = off);
ALTER INDEX runs_running_keys SET (deduplicate_items = off);
-- Rebuilt so that posting lists made before go too (these hold the runs in flight and
-- the dead entries since the last vacuum: small).
REINDEX INDEX runs_running_lease;
REINDEX INDEX runs_running_loop;
REINDEX INDEX runs_running_epoch;
REINDEX INDEX runs_running_keys;
