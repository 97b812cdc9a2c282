-- Issue #19: a run's (and a workflow step's) `error` keeps our own words only
-- ("claude exited with status 1"); what a failure quotes from the run's output (an
-- agent's reported error, its telling stderr line) is `error_output`, output like
-- stdout/stderr: redacted wherever they are, never in the event log.
ALTER TABLE runs ADD COLUMN error_output TEXT;
ALTER TABLE workflow_step_runs ADD COLUMN error_output TEXT;

-- Rows recorded before quoted the output in `error`: an agent that exited with a code
-- ("claude exited with status 1: <stderr line>", "<its message> (codex exited with
-- status 1)"), or exited 0 but reported an error (the whole error is its message). That
-- error moves to `error_output` whole, and `error` says what happened in our words.
UPDATE runs SET error_output = error,
       error = CASE WHEN exit_code = 0 THEN 'the agent reported an error'
                    ELSE 'exited with status ' || exit_code END
 WHERE exit_code IS NOT NULL AND error IS NOT NULL
   AND error <> 'exited with status ' || exit_code
   AND (error LIKE '%exited with status%' OR (exit_code = 0 AND status = 'failed'));
UPDATE workflow_step_runs SET error_output = error,
       error = CASE WHEN exit_code = 0 THEN 'the agent reported an error'
                    ELSE 'exited with status ' || exit_code END
 WHERE exit_code IS NOT NULL AND error IS NOT NULL
   AND error <> 'exited with status ' || exit_code
   AND (error LIKE '%exited with status%' OR (exit_code = 0 AND status = 'failed'));

-- The event log and the workflow runs' own logs copied those errors: the same rule
-- rewrites them to our words (the log never held output, and holds none now).
UPDATE events SET data_json = json_set(data_json, '$.run.error',
       CASE WHEN json_extract(data_json, '$.run.exitCode') = 0 THEN 'the agent reported an error'
            ELSE 'exited with status ' || json_extract(data_json, '$.run.exitCode') END)
 WHERE kind = 'run.finished'
   AND json_extract(data_json, '$.run.exitCode') IS NOT NULL
   AND json_extract(data_json, '$.run.error')
       <> 'exited with status ' || json_extract(data_json, '$.run.exitCode')
   AND (json_extract(data_json, '$.run.error') LIKE '%exited with status%'
        OR (json_extract(data_json, '$.run.exitCode') = 0
            AND json_extract(data_json, '$.run.status') = 'failed'));
UPDATE events SET data_json = json_set(data_json, '$.payload.error',
       CASE WHEN json_extract(data_json, '$.payload.exitCode') = 0 THEN 'the agent reported an error'
            ELSE 'exited with status ' || json_extract(data_json, '$.payload.exitCode') END)
 WHERE kind = 'workflow.event'
   AND json_extract(data_json, '$.payload.exitCode') IS NOT NULL
   AND json_extract(data_json, '$.payload.error')
       <> 'exited with status ' || json_extract(data_json, '$.payload.exitCode')
   AND (json_extract(data_json, '$.payload.error') LIKE '%exited with status%'
        OR (json_extract(data_json, '$.payload.exitCode') = 0
            AND json_extract(data_json, '$.eventType') = 'step_failed'));
UPDATE workflow_events SET payload_json = json_set(payload_json, '$.error',
       CASE WHEN json_extract(payload_json, '$.exitCode') = 0 THEN 'the agent reported an error'
            ELSE 'exited with status ' || json_extract(payload_json, '$.exitCode') END)
 WHERE json_extract(payload_json, '$.exitCode') IS NOT NULL
   AND json_extract(payload_json, '$.error')
       <> 'exited with status ' || json_extract(payload_json, '$.exitCode')
   AND (json_extract(payload_json, '$.error') LIKE '%exited with status%'
        OR (json_extract(payload_json, '$.exitCode') = 0 AND event_type = 'step_failed'));

-- `--notify-on always` now means every finished slot (issue #19); what it meant before,
-- failure and recovery, is called `changes`. Stored settings — each loop's and the
-- store-wide default — are renamed, so every existing loop notifies as it did.
UPDATE loops SET notify_json = json_set(notify_json, '$.on', 'changes')
 WHERE notify_json IS NOT NULL AND json_extract(notify_json, '$.on') = 'always';
UPDATE meta SET value = json_set(value, '$.on', 'changes')
 WHERE key = 'notify_default' AND json_valid(value) AND json_extract(value, '$.on') = 'always';
