-- 0006_error_output_notify_changes: the SQLite backend's migration 12 in PostgreSQL's
-- terms (issue #19). A run's (and a workflow step's) `error` keeps our own words only
-- ("claude exited with status 1"); what a failure quotes from the run's output (an agent's
-- reported error, its telling stderr line) is `error_output`, output like
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
UPDATE events SET data_json = jsonb_set(data_json::jsonb, '{run,error}', to_jsonb(
       CASE WHEN data_json::jsonb #>> '{run,exitCode}' = '0' THEN 'the agent reported an error'
            ELSE 'exited with status ' || (data_json::jsonb #>> '{run,exitCode}') END))::text
 WHERE kind = 'run.finished'
   AND data_json::jsonb #>> '{run,exitCode}' IS NOT NULL
   AND data_json::jsonb #>> '{run,error}'
       <> 'exited with status ' || (data_json::jsonb #>> '{run,exitCode}')
   AND (data_json::jsonb #>> '{run,error}' LIKE '%exited with status%'
        OR (data_json::jsonb #>> '{run,exitCode}' = '0'
            AND data_json::jsonb #>> '{run,status}' = 'failed'));
UPDATE events SET data_json = jsonb_set(data_json::jsonb, '{payload,error}', to_jsonb(
       CASE WHEN data_json::jsonb #>> '{payload,exitCode}' = '0' THEN 'the agent reported an error'
            ELSE 'exited with status ' || (data_json::jsonb #>> '{payload,exitCode}') END))::text
 WHERE kind = 'workflow.event'
   AND data_json::jsonb #>> '{payload,exitCode}' IS NOT NULL
   AND data_json::jsonb #>> '{payload,error}'
       <> 'exited with status ' || (data_json::jsonb #>> '{payload,exitCode}')
   AND (data_json::jsonb #>> '{payload,error}' LIKE '%exited with status%'
        OR (data_json::jsonb #>> '{payload,exitCode}' = '0'
            AND data_json::jsonb #>> '{eventType}' = 'step_failed'));
UPDATE workflow_events SET payload_json = jsonb_set(payload_json::jsonb, '{error}', to_jsonb(
       CASE WHEN payload_json::jsonb #>> '{exitCode}' = '0' THEN 'the agent reported an error'
            ELSE 'exited with status ' || (payload_json::jsonb #>> '{exitCode}') END))::text
 WHERE payload_json::jsonb #>> '{exitCode}' IS NOT NULL
   AND payload_json::jsonb #>> '{error}'
       <> 'exited with status ' || (payload_json::jsonb #>> '{exitCode}')
   AND (payload_json::jsonb #>> '{error}' LIKE '%exited with status%'
        OR (payload_json::jsonb #>> '{exitCode}' = '0' AND event_type = 'step_failed'));

-- `--notify-on always` now means every finished slot (issue #19); what it meant before,
-- failure and recovery, is called `changes`. Stored settings — each loop's and the
-- store-wide default — are renamed, so every existing loop notifies as it did.
UPDATE loops SET notify_json = jsonb_set(notify_json::jsonb, '{on}', '"changes"')::text
 WHERE notify_json IS NOT NULL AND notify_json::jsonb ->> 'on' = 'always';
-- (Other meta values need not be JSON: the CASE casts only the default's.)
UPDATE meta SET value = jsonb_set(value::jsonb, '{on}', '"changes"')::text
 WHERE CASE WHEN key = 'notify_default' THEN value::jsonb ->> 'on' = 'always' ELSE false END;
