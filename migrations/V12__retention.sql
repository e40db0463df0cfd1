-- Retention, off until an operator sets it ([jobs.retention]): the pruner deletes
-- finished jobs older than their status's retention (with their outbox rows), and
-- PUBLISHED outbox rows older than the published-events retention. These indexes let
-- it find the oldest of each without scanning the table. (Built in the migration's
-- transaction: on a large table the build holds writes for its duration.)
CREATE INDEX workflow_run_finished ON workflow_run (status, finished_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX outbox_published ON workflow_run_events_outbox (published_at)
    WHERE status = 'PUBLISHED';

COMMENT ON TABLE workflow_run_events_outbox IS
    'One row per commit point, inserted in the same transaction as the job mutation; the relay publishes it. Rows are retained unless [jobs.retention] says otherwise; FAILED rows are the dead-letter queue and are never pruned.';
