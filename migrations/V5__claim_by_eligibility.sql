-- Claims range-scan QUEUED rows by the time they became eligible.
--
-- V1's index was ordered on created_at, so a claim (run_after <= now(), oldest first)
-- walked every older row still backing off before it reached an eligible one: with
-- 1M rows in backoff a claim took 33x longer. Ordered on run_after, the claim reads
-- only eligible rows, the first ones it meets; created_at breaks ties in FIFO order
-- (a fresh submission is eligible from its creation, so new work stays FIFO, and a
-- retried job takes its place by the time its backoff ends).
CREATE INDEX workflow_run_eligible ON workflow_run (run_after, created_at) WHERE status = 'QUEUED';
DROP INDEX workflow_run_claimable;
