-- The request a parked external step's rules built when the job parked: what its
-- reviewer is asked to approve (get-job's pendingRequest; also in the WAITING event's
-- detail). Cleared when the job stops waiting (answered, rejected, cancelled, timed out)
-- and when an operator retries it.
ALTER TABLE workflow_run ADD COLUMN pending_request jsonb;
