-- Deduplicated submissions (issue 34): a submission may carry a dedupe key (scoped to
-- its workflow: <workflow>:<key>) and a mode. `singleton`: while a job of the key is
-- QUEUED, RUNNING or WAITING, a new submission answers it. `debounce`: a submission
-- while a job of the key is still QUEUED and never claimed replaces its input and
-- pushes its start back by the window. `throttle`: the first submission of a window
-- makes the job; the rest of the window answer it. Submissions of one key are decided
-- one at a time, under an advisory lock on the key.
ALTER TABLE workflow_run ADD COLUMN dedupe_key text;
COMMENT ON COLUMN workflow_run.dedupe_key IS 'The dedupe key the job was submitted with (<workflow>:<key>): later submissions of the key may answer this job.';

CREATE INDEX workflow_run_by_dedupe_key ON workflow_run (dedupe_key, created_at DESC)
    WHERE dedupe_key IS NOT NULL;
