-- Parked steps that end: an external step may declare `waitTimeoutMs` (or the node a
-- default, [jobs].wait_timeout_ms, off unless set). Parking stamps when the wait ends
-- and how the job ends then (`onTimeout`: fail, the default, or dead); the sweeper
-- settles WAITING rows past `wait_until` FAILED or DEAD with
-- `TIMEOUT: step 'review' was not answered within 86400000 ms`.
ALTER TABLE workflow_run
    ADD COLUMN wait_until timestamptz,
    ADD COLUMN wait_timeout_ms bigint
        CONSTRAINT workflow_run_wait_timeout_positive CHECK (wait_timeout_ms > 0),
    ADD COLUMN on_timeout text
        CONSTRAINT workflow_run_on_timeout_known CHECK (on_timeout IN ('fail', 'dead')),
    ADD CONSTRAINT workflow_run_wait_only_while_waiting
        CHECK (status = 'WAITING' OR (wait_until IS NULL AND wait_timeout_ms IS NULL AND on_timeout IS NULL)),
    ADD CONSTRAINT workflow_run_wait_is_whole
        CHECK ((wait_until IS NULL) = (wait_timeout_ms IS NULL) AND (wait_until IS NULL) = (on_timeout IS NULL));

COMMENT ON COLUMN workflow_run.wait_until IS
    'When a WAITING job''s wait for its external step ends (NULL: it waits for ever).';
COMMENT ON COLUMN workflow_run.wait_timeout_ms IS 'The wait the step (or the node default) allowed, for the TIMEOUT error.';
COMMENT ON COLUMN workflow_run.on_timeout IS 'How the job ends when the wait runs out: fail (FAILED) or dead (DEAD).';

-- The sweeper: WAITING rows whose wait ran out, oldest first.
CREATE INDEX workflow_run_waits ON workflow_run (wait_until) WHERE status = 'WAITING' AND wait_until IS NOT NULL;
