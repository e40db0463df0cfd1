-- The WAITING jobs owed a catch-up on the events kept for their keys, found without
-- a scan (issue 38's follow-up). V32's sweep looked for them among every WAITING row
-- (`events_caught_up_at` older than `updated_at`), every sweep interval on every node:
-- with half a million jobs parked on review steps, 180 ms of scanning each time.
--
-- A park now clears `events_caught_up_at` and the catch-up sets it, so "owed" is
-- `events_caught_up_at IS NULL` on a WAITING row with an event wait, and the partial
-- index below holds only those rows: a handful, for the seconds between a park and
-- its catch-up. The index is keyed on `job_id` and its predicate names no column
-- that a checkpoint write changes (`updated_at` would have been one), so checkpoint
-- writes stay eligible for HOT updates; the catch-up's own stamp no longer is (one
-- write per park on an event step).
--
-- Rows owed under V32's rule keep being owed.
UPDATE workflow_run SET events_caught_up_at = NULL
 WHERE status = 'WAITING' AND events_caught_up_at < updated_at;

CREATE INDEX workflow_run_events_owed ON workflow_run (job_id)
 WHERE status = 'WAITING' AND events_caught_up_at IS NULL
   AND jsonb_typeof(waits) = 'array'
   AND jsonb_path_exists(waits, '$[*] ? (@.kind == "event")');

COMMENT ON COLUMN workflow_run.events_caught_up_at IS 'When the job last took the events kept for its event steps'' keys after parking; a park sets it NULL, and a WAITING job on an event step with NULL here is owed a catch-up (the sweeper requeues it).';
