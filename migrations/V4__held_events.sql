-- ProtoMolt Jobs, schema version 4: events held behind a dead-lettered one.
--
-- A job's events are never published past one of its FAILED outbox rows. Until now
-- the rows behind it stayed PENDING, and every relay batch walked all of them (oldest
-- first) before reaching a row it could publish: a few thousand stuck jobs slowed the
-- whole events lane. Now such rows are HELD, out of the relay's PENDING index: the
-- transaction that dead-letters a row holds the job's later rows, and an event
-- written for a job that has a FAILED or HELD row is written HELD. An operator's
-- redrive makes the FAILED row and the job's HELD rows PENDING again, in order.

ALTER TABLE workflow_run_events_outbox DROP CONSTRAINT outbox_status_known;
ALTER TABLE workflow_run_events_outbox
    ADD CONSTRAINT outbox_status_known CHECK (status IN ('PENDING', 'PUBLISHED', 'FAILED', 'HELD'));

UPDATE workflow_run_events_outbox o SET status = 'HELD'
 WHERE o.status = 'PENDING'
   AND EXISTS (SELECT 1 FROM workflow_run_events_outbox f
                WHERE f.job_id = o.job_id AND f.status = 'FAILED' AND f.seq < o.seq);

COMMENT ON COLUMN workflow_run_events_outbox.status IS
    'PENDING until the broker acks (then PUBLISHED); FAILED after 10 refused publishes, never retried by the relay; HELD while an earlier row of the same job is FAILED (an operator''s redrive releases both, in order).';

-- Counting and redriving a job's held rows.
CREATE INDEX outbox_held ON workflow_run_events_outbox (job_id, seq) WHERE status = 'HELD';
-- Counting dead-lettered rows without scanning the retained PUBLISHED ones.
CREATE INDEX outbox_failed ON workflow_run_events_outbox (job_id, seq) WHERE status = 'FAILED';
