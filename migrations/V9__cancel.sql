-- Operators can cancel a job (cancel-job). QUEUED and WAITING jobs become CANCELLED at
-- once; a RUNNING job is marked cancel-requested, and the worker holding it (told by
-- a NOTIFY on protomolt_jobs_cancel, or at its next lease renewal) abandons the
-- segment and settles CANCELLED through its fenced path; the sweeper settles it when
-- that worker is gone. CANCELLED is terminal: nothing claims it again.
ALTER TABLE workflow_run DROP CONSTRAINT workflow_run_status_known;
ALTER TABLE workflow_run
    ADD CONSTRAINT workflow_run_status_known
        CHECK (status IN ('QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'DEAD', 'CANCELLED'));

ALTER TABLE workflow_run
    ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false,
    ADD COLUMN cancel_reason text
        CONSTRAINT workflow_run_cancel_reason_length CHECK (char_length(cancel_reason) <= 500),
    ADD CONSTRAINT workflow_run_cancel_has_reason
        CHECK (NOT cancel_requested OR cancel_reason IS NOT NULL),
    ADD CONSTRAINT workflow_run_cancelled_has_reason
        CHECK (status <> 'CANCELLED' OR (cancel_reason IS NOT NULL AND finished_at IS NOT NULL));

COMMENT ON COLUMN workflow_run.status IS
    'QUEUED -> RUNNING -> COMPLETED | WAITING | FAILED | QUEUED (retry, sweep); QUEUED -> DEAD when attempts are exhausted; QUEUED | WAITING | RUNNING -> CANCELLED by an operator.';
COMMENT ON COLUMN workflow_run.cancel_requested IS
    'An operator cancelled the job while it was RUNNING: its worker (or the sweeper) settles it CANCELLED; no settlement moves it back to QUEUED or WAITING.';
COMMENT ON COLUMN workflow_run.cancel_reason IS 'The reason the operator gave to cancel-job.';
COMMENT ON COLUMN workflow_run.finished_at IS 'When the job reached COMPLETED, FAILED, DEAD or CANCELLED.';

-- The outbox's new event types: CANCELLED, and RETRIED for the operator's retry-job.
ALTER TABLE workflow_run_events_outbox DROP CONSTRAINT outbox_event_type_known;
ALTER TABLE workflow_run_events_outbox
    ADD CONSTRAINT outbox_event_type_known
        CHECK (event_type IN ('ACCEPTED', 'STEP_CHECKPOINT', 'WAITING', 'COMPLETED', 'FAILED', 'DEAD',
                              'CANCELLED', 'RETRIED'));
