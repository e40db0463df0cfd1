-- ProtoMolt Jobs, schema version 3: two counters where there was one.
--
-- Until now `attempt` was both the retry budget and the fencing token of every
-- post-claim write. A park/resume and a shutdown release had to give the attempt
-- back, which made an (owner, attempt) pair reusable and stranded a resumed job on
-- its last attempt. Now:
--   claims   - the fencing token: +1 on every claim, never decreased, also across
--              releases and resumptions; every post-claim write is fenced on it.
--   attempt  - the retry budget: the attempt in progress while RUNNING or WAITING,
--              the attempts spent otherwise. A claim counts one; a release and the
--              answer to a parked step give it back, since neither is a failure.
--   releases - claims given back in a row without progress (shutdown, a transient
--              store failure); reset by every checkpoint and settlement. The worker
--              lands a job DEAD when it reaches jobs.max_releases, so a job that can
--              never be checkpointed does not loop for ever.

ALTER TABLE workflow_run
    ADD COLUMN claims integer NOT NULL DEFAULT 0
        CONSTRAINT workflow_run_claims_non_negative CHECK (claims >= 0),
    ADD COLUMN releases integer NOT NULL DEFAULT 0
        CONSTRAINT workflow_run_releases_non_negative CHECK (releases >= 0);

-- Existing rows: every claim so far incremented `attempt`, so it is the best lower
-- bound of the claims made; a live claim keeps its token.
UPDATE workflow_run SET claims = attempt;

COMMENT ON COLUMN workflow_run.claims IS
    'Fencing token: claims so far, +1 per claim, never decreased; post-claim writes match (job_id, lease_owner, claims).';
COMMENT ON COLUMN workflow_run.attempt IS
    'Retry budget: the attempt in progress while RUNNING or WAITING, else the attempts spent; a release or a parked step''s answer gives the claim''s attempt back.';
COMMENT ON COLUMN workflow_run.releases IS
    'Claims given back in a row without progress; reset by a checkpoint or a settlement; at jobs.max_releases the job lands DEAD.';

-- A QUEUED row always has an attempt left: the claim no longer needs to skip rows
-- whose budget is spent, and no transition can strand one. Rows the old counting
-- stranded (QUEUED on their last attempt after a park/resume) get that attempt back.
UPDATE workflow_run SET attempt = max_attempts - 1
 WHERE status = 'QUEUED' AND attempt >= max_attempts;
ALTER TABLE workflow_run
    ADD CONSTRAINT workflow_run_queued_has_an_attempt_left
        CHECK (status <> 'QUEUED' OR attempt < max_attempts);
