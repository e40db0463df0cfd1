-- ProtoMolt Jobs, schema version 1: one row per job, one outbox row per commit point.
--
-- Constraints cover what the SQL itself relies on (statuses, counters, leases).
-- The JSON columns are deliberately not shape-checked here: the worker re-parses
-- the definition, the input and every checkpoint on each claim and fails a job
-- loud, naming what drifted, when any of them no longer parses.

CREATE TABLE workflow_run (
    job_id              uuid        PRIMARY KEY,
    workflow_name       text        NOT NULL
        CONSTRAINT workflow_run_name_length CHECK (char_length(workflow_name) BETWEEN 1 AND 200),
    workflow_definition jsonb       NOT NULL,
    input               jsonb       NOT NULL,
    status              text        NOT NULL DEFAULT 'QUEUED'
        CONSTRAINT workflow_run_status_known
        CHECK (status IN ('QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'DEAD')),
    attempt             integer     NOT NULL DEFAULT 0
        CONSTRAINT workflow_run_attempt_non_negative CHECK (attempt >= 0),
    max_attempts        integer     NOT NULL DEFAULT 3
        CONSTRAINT workflow_run_max_attempts_positive CHECK (max_attempts >= 1),
    run_after           timestamptz NOT NULL DEFAULT now(),
    outstanding_step    text,
    checkpoints         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    result              jsonb,
    verdict             text,
    error               text,
    lease_owner         text,
    lease_until         timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,

    CONSTRAINT workflow_run_attempts_within_budget CHECK (attempt <= max_attempts),
    CONSTRAINT workflow_run_running_is_leased
        CHECK (status <> 'RUNNING' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT workflow_run_lease_only_while_running
        CHECK (status = 'RUNNING' OR (lease_owner IS NULL AND lease_until IS NULL)),
    CONSTRAINT workflow_run_waiting_names_its_step
        CHECK (status <> 'WAITING' OR outstanding_step IS NOT NULL),
    CONSTRAINT workflow_run_completed_has_verdict
        CHECK (status <> 'COMPLETED' OR verdict IS NOT NULL),
    CONSTRAINT workflow_run_failure_has_error
        CHECK (status NOT IN ('FAILED', 'DEAD') OR error IS NOT NULL)
);

COMMENT ON TABLE workflow_run IS
    'One row is the entire runtime state of one job: read it to know where the job stands.';
COMMENT ON COLUMN workflow_run.job_id IS
    'Client-generated uuid (minted when absent); doubles as the idempotency key of submission.';
COMMENT ON COLUMN workflow_run.workflow_name IS 'Name of the workflow the job runs.';
COMMENT ON COLUMN workflow_run.workflow_definition IS
    'Snapshot of the workflow envelope at submission: a workflow edited later never shifts a live job.';
COMMENT ON COLUMN workflow_run.input IS 'Snapshot of the input (proto3 JSON of the input type).';
COMMENT ON COLUMN workflow_run.status IS
    'QUEUED -> RUNNING -> COMPLETED | WAITING | FAILED | QUEUED (retry, sweep); QUEUED -> DEAD when attempts are exhausted.';
COMMENT ON COLUMN workflow_run.attempt IS 'Claims so far; incremented by each claim.';
COMMENT ON COLUMN workflow_run.max_attempts IS 'Attempts allowed before a retryable failure lands DEAD.';
COMMENT ON COLUMN workflow_run.run_after IS 'When the row becomes claimable (pushed into the future by backoff).';
COMMENT ON COLUMN workflow_run.outstanding_step IS 'The external step a WAITING job is parked on.';
COMMENT ON COLUMN workflow_run.checkpoints IS
    'Ordered array, one entry per executed step: {"name", "skipped", "response"} (response: proto3 JSON of the output type).';
COMMENT ON COLUMN workflow_run.result IS 'The workflow output of a COMPLETED job.';
COMMENT ON COLUMN workflow_run.verdict IS 'One-line summary of a COMPLETED job, or the violations of a validation verdict.';
COMMENT ON COLUMN workflow_run.error IS 'The verbatim error of a FAILED or DEAD job (the last error for DEAD), prefixed with its kind.';
COMMENT ON COLUMN workflow_run.lease_owner IS 'worker_id of the worker holding a RUNNING job.';
COMMENT ON COLUMN workflow_run.lease_until IS 'When the sweeper may requeue a RUNNING job whose worker went quiet.';
COMMENT ON COLUMN workflow_run.finished_at IS 'When the job reached COMPLETED, FAILED or DEAD.';

-- The claim: status = 'QUEUED' AND run_after <= now() ORDER BY created_at LIMIT 1.
-- A partial index holds only queued rows, already in created_at order, with
-- run_after beside it so the time filter is checked inside the index: the claim
-- reads the oldest eligible entry instead of sorting every queued row.
CREATE INDEX workflow_run_claimable ON workflow_run (created_at, run_after) WHERE status = 'QUEUED';

-- The sweeper: RUNNING rows whose lease has passed.
CREATE INDEX workflow_run_leases ON workflow_run (lease_until) WHERE status = 'RUNNING';

-- list-jobs: newest first, optionally by status or by workflow name.
CREATE INDEX workflow_run_newest ON workflow_run (created_at DESC, job_id DESC);
CREATE INDEX workflow_run_by_status ON workflow_run (status, created_at DESC, job_id DESC);
CREATE INDEX workflow_run_by_name ON workflow_run (workflow_name, created_at DESC, job_id DESC);

CREATE TABLE workflow_run_events_outbox (
    event_id     uuid        PRIMARY KEY,
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    job_id       uuid        NOT NULL REFERENCES workflow_run (job_id) ON DELETE CASCADE,
    event_type   text        NOT NULL
        CONSTRAINT outbox_event_type_known
        CHECK (event_type IN ('ACCEPTED', 'STEP_CHECKPOINT', 'WAITING', 'COMPLETED', 'FAILED', 'DEAD')),
    payload      bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'PENDING'
        CONSTRAINT outbox_status_known CHECK (status IN ('PENDING', 'PUBLISHED', 'FAILED')),
    attempts     integer     NOT NULL DEFAULT 0
        CONSTRAINT outbox_attempts_non_negative CHECK (attempts >= 0),
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,

    CONSTRAINT outbox_published_has_time CHECK (status <> 'PUBLISHED' OR published_at IS NOT NULL)
);

COMMENT ON TABLE workflow_run_events_outbox IS
    'One row per commit point, inserted in the same transaction as the job mutation; the relay publishes it. Rows are retained; FAILED rows are the dead-letter queue.';
COMMENT ON COLUMN workflow_run_events_outbox.event_id IS 'The event''s own id, also WorkflowRunEvent.event_id: consumers dedupe on it.';
COMMENT ON COLUMN workflow_run_events_outbox.seq IS 'Insertion order, the tie-breaker after created_at.';
COMMENT ON COLUMN workflow_run_events_outbox.payload IS 'The encoded, validated protomolt.jobs.v1.WorkflowRunEvent.';
COMMENT ON COLUMN workflow_run_events_outbox.status IS 'PENDING until the broker acks (then PUBLISHED); FAILED after 10 failed publishes, never retried.';
COMMENT ON COLUMN workflow_run_events_outbox.attempts IS 'Failed publish attempts so far.';
COMMENT ON COLUMN workflow_run_events_outbox.last_error IS 'The last publish error, verbatim.';

-- The relay: PENDING rows oldest first.
CREATE INDEX outbox_pending ON workflow_run_events_outbox (created_at, seq) WHERE status = 'PENDING';
-- A job's events in order (get-job, tests, operators).
CREATE INDEX outbox_by_job ON workflow_run_events_outbox (job_id, seq);
