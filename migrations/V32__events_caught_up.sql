-- When a parked job last caught up on the events kept for its keys (issue 38). A job
-- that parks on an event step takes, right after the park commits, the events sent on
-- its keys before it parked (within each step's lookback); when that catch-up fails
-- (the disk full, the database gone, the node killed), the job is owed one. The
-- sweeper requeues a WAITING job on event steps whose catch-up is older than its park
-- (`updated_at`), whatever the age of the events it missed (before, only events of
-- the last two minutes were looked for, and an event kept longer before the park was
-- never delivered). Rows WAITING at the migration are taken as caught up.
ALTER TABLE workflow_run ADD COLUMN events_caught_up_at timestamptz;
UPDATE workflow_run SET events_caught_up_at = now() WHERE status = 'WAITING';
COMMENT ON COLUMN workflow_run.events_caught_up_at IS 'When the job last took the events kept for its event steps'' keys after parking (NULL: never); a WAITING job whose catch-up is older than its park is requeued by the sweeper.';
