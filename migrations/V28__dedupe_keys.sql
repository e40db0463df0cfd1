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

-- What a deduplicated submission was answered: its own job id (which made no job)
-- and the job that stood for it, so the same submission sent again (a client's
-- retry, a request record redelivered) is answered the same, never decided anew.
-- Kept 7 days (the sweeper deletes older ones).
CREATE TABLE workflow_dedupe_answers (
    job_id uuid PRIMARY KEY,
    stands_for uuid NOT NULL,
    answered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_dedupe_answers_by_time ON workflow_dedupe_answers (answered_at);
