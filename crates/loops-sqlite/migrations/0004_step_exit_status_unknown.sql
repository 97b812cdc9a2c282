-- A step whose process outlived a runner that died: its exit status cannot be known, so
-- it is recorded failed with this flag and never started again (issue #9, item 6).
ALTER TABLE workflow_step_runs ADD COLUMN exit_status_unknown INTEGER NOT NULL DEFAULT 0;
