-- An agent step's parsed result, like a loop run's: the provider's final message and
-- its token/cost usage (JSON). NULL for command steps and for steps that never ran.
ALTER TABLE workflow_step_runs ADD COLUMN summary TEXT;
ALTER TABLE workflow_step_runs ADD COLUMN usage_json TEXT;
