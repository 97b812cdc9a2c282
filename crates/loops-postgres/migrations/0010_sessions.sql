-- 0010_sessions (issue #20, item 9): the conversation an agent run reported
-- (`sessionId`: claude's session_id, codex's thread_id, opencode's sessionID; only a
-- well-formed id, an identifier and not output), and what became of `--session
-- continue` on the run, in our own words (`sessionNote`: "resumed session <id>", or
-- "session <id> could not be resumed; started fresh"). NULL for runs that reported no
-- session and for runs recorded before. The index serves the lookup of a loop's last
-- run with a session (`last_session_run`).
ALTER TABLE runs ADD COLUMN session_id TEXT;
ALTER TABLE runs ADD COLUMN session_note TEXT;
CREATE INDEX runs_loop_session ON runs (loop_id, created_at) WHERE session_id IS NOT NULL;
