-- Replays must never re-run finished work. A request topic replays when its group's
-- offsets are gone (Kafka expires them after 7 days by default) or the group is
-- renamed; a client may retry a submission long after. Within retention the job's
-- row answers "already submitted"; once retention has deleted it, this table does:
-- the pruner records each id it deletes, and every insert of a job skips an id found
-- here. The ids are kept for `[jobs.retention].pruned_ids_ms` (30 days by default):
-- keep it above the requests topic's retention and the group offsets' expiry.
CREATE TABLE workflow_run_pruned (
    job_id    uuid        PRIMARY KEY,
    pruned_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_run_pruned_by_age ON workflow_run_pruned (pruned_at);
COMMENT ON TABLE workflow_run_pruned IS
    'Ids of jobs retention deleted, kept for jobs.retention.pruned_ids_ms: a submission or a replayed request naming one is never run again.';

-- A dead-lettered request record was kept once per (topic, partition, offset): after a
-- topic is recreated, a new poison record at a reused offset was taken for the old one
-- and silently dropped. The record's own bytes are part of its identity now (a digest
-- of its key and payload, the key's length first so the two cannot run together), so
-- only a redelivery of the same record is a duplicate.
ALTER TABLE workflow_run_request_rejects ADD COLUMN record_digest bytea;
UPDATE workflow_run_request_rejects
   SET record_digest = sha256(int4send(COALESCE(octet_length(record_key), -1))
                              || COALESCE(record_key, ''::bytea) || COALESCE(payload, ''::bytea));
ALTER TABLE workflow_run_request_rejects ALTER COLUMN record_digest SET NOT NULL;
ALTER TABLE workflow_run_request_rejects DROP CONSTRAINT request_rejects_once_per_record;
ALTER TABLE workflow_run_request_rejects
    ADD CONSTRAINT request_rejects_once_per_record UNIQUE (topic, partition, record_offset, record_digest);
-- What the pruner reads them by (jobs.retention.rejects_ms).
CREATE INDEX workflow_run_request_rejects_by_age ON workflow_run_request_rejects (received_at);
COMMENT ON COLUMN workflow_run_request_rejects.record_digest IS
    'SHA-256 of the key''s length, the key and the payload: with topic, partition and offset, what makes a record the same record.';
