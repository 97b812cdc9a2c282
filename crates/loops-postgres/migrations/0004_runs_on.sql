-- 0004_runs_on: the runner labels a loop requires (`create --on`; issue #12): a runner
-- claims a loop's scheduled slots only when it advertises every one of them. A JSON
-- array of labels, sorted; '[]' (any runner) for every loop that had none.
ALTER TABLE loops ADD COLUMN runs_on_json TEXT NOT NULL DEFAULT '[]';
