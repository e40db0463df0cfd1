//! The statements of parked jobs: parking itself (a settlement: [`SETTLE_WAITING`],
//! [`SETTLE_SLEEPING`]), `complete-step` and `reject-step` deciding under the row
//! lock, the sweep that ends waits that ran out and wakes sleeps beside them.

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
           AND (waits -> 0 ->> 'kind') IS DISTINCT FROM 'sleep'
         ORDER BY wait_until
         FOR UPDATE SKIP LOCKED
         LIMIT $1) parked
 WHERE w.job_id = parked.job_id AND w.status = 'WAITING' AND w.wait_until < now()
RETURNING w.job_id, w.workflow_name, w.status, w.attempt, w.error, parked.outstanding_step AS step, w.metadata";

/// Wakes WAITING rows whose first wait to end is a sleep that has ended (a sleep
/// beside a step that waits for an answer or an event): QUEUED now, the attempt given
/// back, the waits kept (the claim finds the sleep over and parks again on the
/// others, whose deadlines are kept). `$1` the most rows at once.
pub const WAKE_PARKED_SLEEPS: &str = "\
UPDATE workflow_run w
   SET status = 'QUEUED', attempt = w.attempt - 1, outstanding_step = NULL, outstanding_steps = NULL,
       pending_request = NULL, wait_until = NULL, wait_timeout_ms = NULL, on_timeout = NULL,
       run_after = now(), updated_at = now()
  FROM (SELECT job_id FROM workflow_run
         WHERE status = 'WAITING' AND wait_until <= now() AND waits -> 0 ->> 'kind' = 'sleep'
         ORDER BY wait_until
         FOR UPDATE SKIP LOCKED
         LIMIT $1) sleeping
 WHERE w.job_id = sleeping.job_id AND w.status = 'WAITING'
RETURNING w.job_id";

/// Locks a job for `complete-step`. `$1` job id.
pub const LOCK_JOB: &str = "\
SELECT w.status, w.outstanding_step, w.outstanding_steps, w.waits, w.workflow_name,
       COALESCE(w.workflow_definition, s.definition) AS workflow_definition, w.checkpoints, w.attempt,
       w.metadata
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

/// The waits a job parks on, as the subquery `c` of [`SETTLE_WAITING`] and
/// [`SETTLE_SLEEPING`]: `$4` per step its entry of V22's `waits` (its `kind`, request,
/// own wait, sleep or key; without `untilMs`). A wait that ends (a `timeoutMs`, a
/// sleep's `forMs` or `wakeMs`) ends at the `untilMs` the step had when the job last
/// parked on it (an answer to another step let a branch run in between; a sleep
/// never moves), else at `wakeMs`, else now plus its `forMs` or `timeoutMs`, by the
/// database's clock. An event wait keeps the time it first parked (`sinceMs`): its
/// lookback counts back from there, however often the job resumes in between. `c.waits` and `c.steps` put the first wait to end first (those
/// that wait for ever last, ties in the order given); `c.wake_ms` is the earliest
/// sleep's end.
macro_rules! parked_waits {
    () => {
        "
  FROM (SELECT jsonb_agg(x.e ORDER BY (x.e ->> 'untilMs')::bigint NULLS LAST, x.o) AS waits,
               array_agg(x.e ->> 'step' ORDER BY (x.e ->> 'untilMs')::bigint NULLS LAST, x.o) AS steps,
               min((x.e ->> 'untilMs')::bigint) FILTER (WHERE x.e ->> 'kind' = 'sleep') AS wake_ms
          FROM (SELECT (CASE WHEN n ? 'timeoutMs' OR n ? 'forMs' OR n ? 'wakeMs'
                       THEN n || jsonb_build_object('untilMs', COALESCE(
                           (SELECT (p ->> 'untilMs')::bigint
                              FROM workflow_run old, jsonb_array_elements(COALESCE(old.waits, '[]'::jsonb)) AS p
                             WHERE old.job_id = $1 AND p ->> 'step' = n ->> 'step' AND p ? 'untilMs'),
                           (n ->> 'wakeMs')::bigint,
                           floor(extract(epoch FROM now()) * 1000)::bigint
                             + COALESCE((n ->> 'forMs')::bigint, (n ->> 'timeoutMs')::bigint)))
                       ELSE n END)
                    || (CASE WHEN n ->> 'kind' = 'event'
                        THEN jsonb_build_object('sinceMs', COALESCE(
                           (SELECT (p ->> 'sinceMs')::bigint
                              FROM workflow_run old, jsonb_array_elements(COALESCE(old.waits, '[]'::jsonb)) AS p
                             WHERE old.job_id = $1 AND p ->> 'step' = n ->> 'step' AND p ? 'sinceMs'),
                           floor(extract(epoch FROM now()) * 1000)::bigint))
                        ELSE '{}'::jsonb END) AS e, o
                  FROM jsonb_array_elements($4::jsonb) WITH ORDINALITY AS t(n, o)) x) c"
    };
}

/// Parks WAITING on steps that wait for an answer or an event (and on sleeps beside
/// them), clearing an earlier attempt's error: every step before them succeeded. The
/// park owes the job a catch-up on the events kept for its keys until the catch-up
/// sets `events_caught_up_at` (see `REQUEUE_MISSED_SIGNALS`).
/// `$4` their waits (see `parked_waits!`); the single-step columns describe the
/// first to end.
pub const SETTLE_WAITING: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = 'WAITING', error = NULL,
       waits = c.waits, outstanding_steps = c.steps, outstanding_step = c.steps[1],
       pending_request = c.waits -> 0 -> 'request',
       wait_timeout_ms = (c.waits -> 0 ->> 'timeoutMs')::bigint,
       on_timeout = c.waits -> 0 ->> 'onTimeout',
       wait_until = to_timestamp(((c.waits -> 0 ->> 'untilMs')::bigint) / 1000.0),
       lease_owner = NULL, lease_until = NULL, releases = 0, events_caught_up_at = NULL,
       updated_at = now()",
    parked_waits!()
));

/// Parks a job whose every wait is a sleep: QUEUED again, claimable when the first
/// sleep ends (exactly that millisecond, as `run_after`: the claim stays what it is
/// for `runAt`), the waits kept for the claim that wakes it. A park is not a
/// failure: the attempt is given back, as `complete-step` gives it back. `$4` the
/// sleeps (see `parked_waits!`).
pub const SETTLE_SLEEPING: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = 'QUEUED', error = NULL, attempt = attempt - 1,
       waits = c.waits, outstanding_steps = NULL, outstanding_step = NULL, pending_request = NULL,
       wait_timeout_ms = NULL, on_timeout = NULL, wait_until = NULL,
       run_after = timestamptz 'epoch' + c.wake_ms * interval '1 millisecond',
       lease_owner = NULL, lease_until = NULL, releases = 0, updated_at = now()",
    parked_waits!()
));

/// [`SETTLE_WAITING`] for a park on child steps, whose children may end while the
/// segment runs: `$5` the parent's `child_ends` as the claim read it. A child that
/// ends counts itself on the parent's row (migration V25's trigger), so a park that
/// finds the count moved (the row is re-read under its lock when a child's end
/// committed first) resumes at once, QUEUED with the waits kept and its attempt given
/// back, instead of waiting on a child that already ended.
pub const SETTLE_WAITING_ON_CHILDREN: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = CASE WHEN child_ends = $5 THEN 'WAITING' ELSE 'QUEUED' END,
       attempt = CASE WHEN child_ends = $5 THEN attempt ELSE attempt - 1 END,
       run_after = CASE WHEN child_ends = $5 THEN run_after ELSE now() END,
       error = NULL, waits = c.waits,
       outstanding_steps = CASE WHEN child_ends = $5 THEN c.steps END,
       outstanding_step = CASE WHEN child_ends = $5 THEN c.steps[1] END,
       pending_request = CASE WHEN child_ends = $5 THEN c.waits -> 0 -> 'request' END,
       wait_timeout_ms = CASE WHEN child_ends = $5 THEN (c.waits -> 0 ->> 'timeoutMs')::bigint END,
       on_timeout = CASE WHEN child_ends = $5 THEN c.waits -> 0 ->> 'onTimeout' END,
       wait_until = CASE WHEN child_ends = $5 THEN to_timestamp(((c.waits -> 0 ->> 'untilMs')::bigint) / 1000.0) END,
       lease_owner = NULL, lease_until = NULL, releases = 0, events_caught_up_at = NULL,
       updated_at = now()",
    parked_waits!()
));
