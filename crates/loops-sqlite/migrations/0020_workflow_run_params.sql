-- 0020_workflow_run_params (issue #23, item 3): the values of its spec's params a
-- workflow run uses (a JSON object of text by name; NULL when the spec declares none),
-- kept so that a continued run uses the values it started with.
ALTER TABLE workflow_runs ADD COLUMN params_json TEXT;
