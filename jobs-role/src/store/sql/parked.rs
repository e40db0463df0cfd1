//! The statements of jobs parked on external steps: `complete-step` and
//! `reject-step` deciding under the row lock, and the sweep that ends waits that ran
//! out. (Parking itself is a settlement: `SETTLE_WAITING`.)

/// Ends WAITING rows whose wait for their external step ran out: FAILED or DEAD per
/// the step's `onTimeout`, with the TIMEOUT error naming the step and the wait; the
/// attempt the park held counts as spent. `$1` the most rows at once.
pub const TIME_OUT_PARKED_STEPS: &str = "\
UPDATE workflow_run w
   SET status = CASE WHEN w.on_timeout = 'dead' THEN 'DEAD' ELSE 'FAILED' END,
       error = 'TIMEOUT: step ''' || w.outstanding_step || ''' was not answered within '
               || w.wait_timeout_ms || ' ms',
       outstanding_step = NULL, outstanding_steps = NULL, waits = NULL, pending_request = NULL,
       wait_until = NULL, wait_timeout_ms = NULL, on_timeout = NULL,
       finished_at = now(), updated_at = now()
  FROM (SELECT job_id, outstanding_step FROM workflow_run
         WHERE status = 'WAITING' AND wait_until < now()
         ORDER BY wait_until
         FOR UPDATE SKIP LOCKED
         LIMIT $1) parked
 WHERE w.job_id = parked.job_id AND w.status = 'WAITING' AND w.wait_until < now()
RETURNING w.job_id, w.workflow_name, w.status, w.attempt, w.error, parked.outstanding_step AS step";

/// Locks a job for `complete-step`. `$1` job id.
pub const LOCK_JOB: &str = "\
SELECT w.status, w.outstanding_step, w.outstanding_steps, w.waits, w.workflow_name,
       COALESCE(w.workflow_definition, s.definition) AS workflow_definition, w.checkpoints, w.attempt
  FROM workflow_run w LEFT JOIN workflow_snapshot s ON s.digest = w.definition_digest
 WHERE w.job_id = $1
   FOR UPDATE OF w";

/// Appends the supplied checkpoint of the parked step and requeues. The parked
/// attempt is given back (a park is not a failure), so the claim that resumes the
/// job counts it again and a job on its last attempt still resumes. `$1` job id,
/// `$2` the checkpoint entry, `$3` the waits of the steps still waited for (NULL or
/// `[]` for none): kept, so each ends when it would have when the job parks on them
/// again.
pub const ACCEPT_PARKED_STEP: &str = "\
UPDATE workflow_run SET checkpoints = checkpoints || jsonb_build_array($2::jsonb), status = 'QUEUED',
       attempt = attempt - 1, outstanding_step = NULL, outstanding_steps = NULL, waits = $3::jsonb,
       pending_request = NULL,
       run_after = now(), updated_at = now(),
       wait_until = NULL, wait_timeout_ms = NULL, on_timeout = NULL
 WHERE job_id = $1 AND status = 'WAITING'";

/// Appends the supplied checkpoint of one of the steps a job is parked on and keeps
/// it WAITING on the others (their answers are what lets anything run next). `$1`
/// job id, `$2` the checkpoint entry, `$3` the steps still waited for, `$4` their
/// waits (the first, whose wait ends first, is what the single-step columns show).
pub const ANSWER_ONE_PARKED_STEP: &str = "\
UPDATE workflow_run SET checkpoints = checkpoints || jsonb_build_array($2::jsonb),
       outstanding_steps = $3::text[], waits = $4::jsonb, outstanding_step = $3[1],
       pending_request = $4::jsonb -> 0 -> 'request',
       wait_timeout_ms = ($4::jsonb -> 0 ->> 'timeoutMs')::bigint,
       on_timeout = $4::jsonb -> 0 ->> 'onTimeout',
       wait_until = to_timestamp((($4::jsonb -> 0 ->> 'untilMs')::bigint) / 1000.0),
       updated_at = now()
 WHERE job_id = $1 AND status = 'WAITING'";

/// Fails a parked job whose supplied response broke its rules (a verdict). `$1` job
/// id, `$2` error, `$3` verdict.
pub const REJECT_PARKED_STEP: &str = "\
UPDATE workflow_run SET status = 'FAILED', error = $2, verdict = $3, outstanding_step = NULL, outstanding_steps = NULL, waits = NULL,
       pending_request = NULL, wait_until = NULL, wait_timeout_ms = NULL, on_timeout = NULL,
       finished_at = now(), updated_at = now()
 WHERE job_id = $1 AND status = 'WAITING'";
