-- ProtoMolt Jobs, schema version 2: what the Kafka lanes need.

-- The relay backs off per failed publish: a row is not retried before next_attempt_at.
ALTER TABLE workflow_run_events_outbox
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now();
COMMENT ON COLUMN workflow_run_events_outbox.next_attempt_at IS
    'When the relay may try a PENDING row again after a failed publish (exponential backoff).';

-- Poison records of the request topic: bytes that are not a WorkflowRunRequest, or
-- carry no usable job_id, so no job row can hold them. Kept here (the dead-letter
-- store) with where they came from, then committed past.
CREATE TABLE workflow_run_request_rejects (
    reject_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    record_offset bigint     NOT NULL,
    record_key   bytea,
    payload      bytea,
    error        text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT request_rejects_once_per_record UNIQUE (topic, partition, record_offset)
);
COMMENT ON TABLE workflow_run_request_rejects IS
    'Dead-letter store of the request consumer: records that could not become a job row, with topic, partition, offset and the error.';
