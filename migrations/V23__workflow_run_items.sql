-- The elements of map steps (`forEach`): one row per element whose call ended, written
-- as it ends (through the group commit, fenced on the claim) so a resume calls only
-- the elements with none. A separate table rather than entries in the job row's
-- `checkpoints` array: writing the k-th element must not rewrite the k-1 before it
-- (a job with 10,000 elements would write O(n^2) bytes); each element costs one row
-- here, and the map step's own checkpoint (its list, in element order) is written
-- once, when every element is done.
--
-- `response` holds the element's response (proto3 JSON); `error` the error of an
-- element that failed for good under `onItemFailure: "collect"` (with "fail", a failed
-- element is not kept: a retry calls it again). Exactly one of the two is set.
-- Rows go with their job (retention deletes the job row; the cascade deletes these),
-- and `retry-job` with `fromStep` deletes those of the steps it re-runs.
CREATE TABLE workflow_run_items (
    job_id     uuid        NOT NULL REFERENCES workflow_run (job_id) ON DELETE CASCADE,
    step       text        NOT NULL,
    item       integer     NOT NULL CHECK (item >= 0),
    response   jsonb,
    error      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, step, item),
    CHECK ((response IS NULL) <> (error IS NULL))
);

COMMENT ON TABLE workflow_run_items IS
    'One row per element of a map step whose call ended (response, or error under onItemFailure collect); a resume calls only the elements without one.';
