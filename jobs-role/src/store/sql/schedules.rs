//! Schedules (migration V29): the `workflow_schedules` rows the verbs manage and every
//! node's firing loop fires.

/// A schedule row's columns, as [`crate::store::ScheduleRow`] reads them.
macro_rules! schedule_columns {
    () => {
        "name, spec, revision, next_fire_at, paused, paused_reason, last_tick_at, last_fired_at, \
         last_error, id_salt, created_at, updated_at"
    };
}

/// Makes or replaces schedule `$1` (`$2` its spec, `$3` its first tick or NULL, `$4`
/// paused or NULL to keep a replaced schedule's pause, `$5` the pause's reason): a
/// replaced schedule's revision moves on, so a fire prepared from its old spec
/// fires nothing. Answers the row and whether it was made.
pub const PUT_SCHEDULE: &str = concat!(
    "\
INSERT INTO workflow_schedules (name, spec, next_fire_at, paused, paused_reason)
VALUES ($1, $2, $3, COALESCE($4, false), CASE WHEN COALESCE($4, false) THEN $5 END)
ON CONFLICT (name) DO UPDATE
   SET spec = EXCLUDED.spec, revision = workflow_schedules.revision + 1,
       next_fire_at = EXCLUDED.next_fire_at,
       paused = COALESCE($4, workflow_schedules.paused),
       paused_reason = CASE WHEN $4 IS NULL THEN workflow_schedules.paused_reason
                            WHEN $4 THEN $5 END,
       last_error = NULL, updated_at = now()
RETURNING (xmax = 0) AS created, ",
    schedule_columns!()
);

/// One schedule (`$1`).
pub const SCHEDULE: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM workflow_schedules WHERE name = $1"
);

/// Every schedule by name, at most `$1`.
pub const LIST_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM workflow_schedules ORDER BY name LIMIT $1"
);

/// Deletes schedule `$1`; answers a row when there was one. Its jobs stay.
pub const DELETE_SCHEDULE: &str = "DELETE FROM workflow_schedules WHERE name = $1 RETURNING name";

/// Pauses (`$2` true, `$3` the reason) or resumes (`$2` false, `$4` its next tick)
/// schedule `$1`; answers whether it was paused before (no row: no such schedule).
/// Resuming moves `next_fire_at` to a tick after now: the ticks of the pause are not
/// caught up.
pub const SET_SCHEDULE_PAUSED: &str = "\
UPDATE workflow_schedules s
   SET paused = $2, paused_reason = CASE WHEN $2 THEN $3 END,
       next_fire_at = CASE WHEN old.paused AND NOT $2 THEN $4 ELSE s.next_fire_at END,
       updated_at = now()
  FROM (SELECT name, paused FROM workflow_schedules WHERE name = $1 FOR UPDATE) old
 WHERE s.name = old.name
RETURNING old.paused AS was_paused";

/// The database's clock, and the soonest tick of any schedule not paused: the firing
/// loop sleeps until then (every node reads the same clock, whatever its own says).
pub const SCHEDULE_CLOCK: &str = "\
SELECT now() AS now,
       (SELECT min(next_fire_at) FROM workflow_schedules WHERE NOT paused AND next_fire_at IS NOT NULL) AS soonest";

/// The schedules due at `$1`, soonest first, at most `$2` (read without a lock: the
/// fire locks each one, skipping those another node holds).
pub const DUE_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM workflow_schedules WHERE NOT paused AND next_fire_at <= $1 ORDER BY next_fire_at LIMIT $2"
);

/// Locks schedule `$1` for a fire prepared from revision `$2` due at `$3`, skipping it
/// when another node holds it; no row: it was fired, changed or paused meanwhile.
pub const LOCK_DUE_SCHEDULE: &str = "\
SELECT name FROM workflow_schedules
 WHERE name = $1 AND revision = $2 AND next_fire_at = $3 AND NOT paused
   FOR UPDATE SKIP LOCKED";

/// Bounds a firing transaction: a node frozen while it holds a schedule's lock (a
/// SIGSTOP, a long pause) loses its session after `$1` idle, so the schedule's lock
/// is freed for another node well within a tick's grace; and waits for row locks
/// (a job's, to cancel it) by `$2`.
pub const FIRING_SETTINGS: &str = "\
SELECT set_config('idle_in_transaction_session_timeout', $1, true),
       set_config('lock_timeout', $2, true), set_config('statement_timeout', '0', true)";

/// Schedule `$1`'s unfinished jobs but this fire's own (`$2`: a tick fired again
/// finds its job there, and it is not a previous one): how many have started
/// (RUNNING, or WAITING on a step) and how many are QUEUED.
pub const LIVE_SCHEDULE_JOBS: &str = "\
SELECT count(*) FILTER (WHERE status = 'QUEUED') AS queued,
       count(*) FILTER (WHERE status <> 'QUEUED') AS started
  FROM workflow_run
 WHERE schedule_name = $1 AND status IN ('QUEUED', 'RUNNING', 'WAITING') AND job_id <> ALL($2)";

/// The ids of schedule `$1`'s unfinished jobs but this fire's own (`$2`): what
/// `cancel-previous` cancels, in id order (the lock order of every act).
pub const LIVE_SCHEDULE_JOB_IDS: &str = "\
SELECT job_id FROM workflow_run
 WHERE schedule_name = $1 AND status IN ('QUEUED', 'RUNNING', 'WAITING') AND NOT cancel_requested
   AND job_id <> ALL($2)
 ORDER BY job_id";

/// After a fire: schedule `$1`'s next tick `$2` (NULL: none left), its newest tick
/// `$3` (NULL: the fire made no job), and `$4` why a tick made no job (NULL: none;
/// the error stays until a tick makes a job).
pub const ADVANCE_SCHEDULE: &str = "\
UPDATE workflow_schedules
   SET next_fire_at = $2,
       last_tick_at = COALESCE($3, last_tick_at),
       last_fired_at = CASE WHEN $3 IS NULL THEN last_fired_at ELSE now() END,
       last_error = CASE WHEN $4::text IS NOT NULL THEN $4 WHEN $3 IS NOT NULL THEN NULL ELSE last_error END
 WHERE name = $1";

/// Schedule `$1`'s creation time, locked against a fire (shared: triggers and
/// backfills of one schedule go together); no row: no such schedule.
pub const LOCK_SCHEDULE_FOR_JOBS: &str =
    "SELECT created_at FROM workflow_schedules WHERE name = $1 FOR SHARE";

/// Schedule `$1`'s newest `$2` jobs by tick.
pub const SCHEDULE_JOBS: &str = "\
SELECT json_build_object('jobId', job_id, 'status', status, 'scheduledFor', scheduled_for,
                         'createdAt', created_at, 'finishedAt', finished_at,
                         'verdict', verdict, 'error', error, 'cancelReason', cancel_reason)
  FROM workflow_run
 WHERE schedule_name = $1
 ORDER BY scheduled_for DESC, job_id DESC
 LIMIT $2";

/// Each schedule's (the first `$1` by name) newest `$2` jobs by tick, for
/// `list-schedules`: one statement, each schedule's read from the by-schedule index.
pub const RECENT_SCHEDULE_JOBS: &str = "\
SELECT s.name,
       COALESCE((SELECT json_agg(json_build_object('jobId', j.job_id, 'status', j.status,
                                                  'scheduledFor', j.scheduled_for)
                                 ORDER BY j.scheduled_for DESC)
                   FROM (SELECT job_id, status, scheduled_for FROM workflow_run w
                          WHERE w.schedule_name = s.name
                          ORDER BY scheduled_for DESC LIMIT $2) j), '[]') AS jobs
  FROM workflow_schedules s ORDER BY s.name LIMIT $1";

/// Moves schedule `$1` (as read: revision `$2`, due at `$3`) past ticks that can
/// never make their job (PostgreSQL refused a value of it) to `$4`, with the error
/// `$5`; no row: it was fired, changed or paused meanwhile.
pub const SKIP_SCHEDULE_TICKS: &str = "\
UPDATE workflow_schedules SET next_fire_at = $4, last_error = $5
 WHERE name = $1 AND revision = $2 AND next_fire_at = $3 AND NOT paused";

/// Pauses schedule `$1` (as read: revision `$2`, due at `$3`) whose stored spec this
/// node cannot read, with the reason `$4`: no node fires it again until it is put
/// again, and the pause says why.
pub const PAUSE_UNREADABLE_SCHEDULE: &str = "\
UPDATE workflow_schedules SET paused = true, paused_reason = $4, last_error = $4, updated_at = now()
 WHERE name = $1 AND revision = $2 AND next_fire_at IS NOT DISTINCT FROM $3 AND NOT paused";
