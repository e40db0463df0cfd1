-- An operator's retry-job with fromStep runs checkpointed steps again, on purpose. A
-- step's call carries `idempotency-key: <job_id>/<step>`, which a target honouring
-- keys would answer from its cache: the re-run would do nothing. `reruns` counts those
-- retries, and a re-run's key carries it (`<job_id>/<step>/rerun-<n>`). A retry that
-- only resumes (no fromStep) leaves it alone: the step it resumes never checkpointed,
-- and may have done its effect already, so it keeps its key.
ALTER TABLE workflow_run
    ADD COLUMN reruns integer NOT NULL DEFAULT 0
        CONSTRAINT workflow_run_reruns_non_negative CHECK (reruns >= 0);

COMMENT ON COLUMN workflow_run.reruns IS
    'Operator retries that re-ran checkpointed steps (retry-job with fromStep); part of every later step call''s idempotency key.';
