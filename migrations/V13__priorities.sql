-- Priorities: 0 to 9, higher first, 5 unless the submission says; FIFO within one
-- priority. The claim reads this index one priority at a time, highest first, each a
-- range scan on run_after <= now() (so rows backing off, or scheduled for later, are
-- never walked, whatever their priority), and stops as soon as it has its rows.
ALTER TABLE workflow_run
    ADD COLUMN priority smallint NOT NULL DEFAULT 5
        CONSTRAINT workflow_run_priority_range CHECK (priority BETWEEN 0 AND 9);

COMMENT ON COLUMN workflow_run.priority IS
    'Claim order: 9 first, 0 last (default 5); within one priority, by run_after then created_at.';
COMMENT ON COLUMN workflow_run.run_after IS
    'When the row becomes claimable: now at submission, or the submission''s runAt / delayMs; pushed into the future by backoff.';

CREATE INDEX workflow_run_eligible_by_priority ON workflow_run (priority, run_after, created_at)
    WHERE status = 'QUEUED';
DROP INDEX workflow_run_eligible;
