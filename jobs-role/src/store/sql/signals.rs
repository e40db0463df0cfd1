//! The statements of events sent to jobs (`send-event`, the signals topic), called
//! signals here to tell them from the outbox's events: keeping them for the lookback,
//! finding the jobs waiting on a key, and the lock that orders a send against a job
//! that parks on the same key.

/// Orders the sends of a key with the jobs that catch up on it after parking: a send
/// either sees the parked job, or the job's catch-up sees the kept event (taken
/// before any job row lock, so the two never deadlock). `$1` the keys, locked in the
/// order of their lock ids (two callers locking several keys never deadlock).
pub const LOCK_EVENT_KEYS: &str = "\
SELECT pg_advisory_xact_lock(7363, h)
  FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($1::text[]) AS k ORDER BY 1) AS keys";

/// Bounds a send's or a catch-up's waits for locks and its idle time inside the
/// transaction (a connection cut mid-send must not hold the key for long).
pub const SIGNAL_SETTINGS: &str = "SET LOCAL lock_timeout = '5s'; \
SET LOCAL idle_in_transaction_session_timeout = '30s'";

/// Keeps a sent event, answering its id; nothing when the id was sent before. `$1`
/// id, `$2` key, `$3` payload.
pub const KEEP_SIGNAL: &str = "\
INSERT INTO workflow_events_received (event_id, event_key, payload) VALUES ($1, $2, $3)
    ON CONFLICT (event_key, event_id) DO NOTHING
RETURNING event_id";

/// Keeps at most `$2` events of key `$1`, dropping the oldest.
pub const TRIM_SIGNALS_OF_KEY: &str = "\
DELETE FROM workflow_events_received
 WHERE event_id IN (SELECT event_id FROM workflow_events_received WHERE event_key = $1
                     ORDER BY received_at DESC, event_id DESC OFFSET $2)";

/// The WAITING jobs with an event step waiting on key `$1`, locked in id order (two
/// senders never deadlock), with their waits, checkpoints and workflow snapshot.
/// Found through the V24 index on the keys of the waiting jobs' event waits.
pub const LOCK_JOBS_WAITING_ON_KEY: &str = "\
SELECT w.job_id, w.waits, w.checkpoints, COALESCE(w.workflow_definition, s.definition) AS workflow_definition
  FROM workflow_run w LEFT JOIN workflow_snapshot s ON s.digest = w.definition_digest
 WHERE w.status = 'WAITING'
   AND jsonb_path_query_array(w.waits, '$[*] ? (@.kind == \"event\").key') ? $1
 ORDER BY w.job_id
   FOR UPDATE OF w";

/// A job's waits and snapshot, unlocked (to learn the keys to lock first). `$1` job
/// id.
pub const JOB_WAITS: &str = "\
SELECT w.status, w.waits, COALESCE(w.workflow_definition, s.definition) AS workflow_definition
  FROM workflow_run w LEFT JOIN workflow_snapshot s ON s.digest = w.definition_digest
 WHERE w.job_id = $1";

/// The kept events of key `$1` sent no earlier than `$2` milliseconds since the epoch
/// (the step's first park less its lookback) that step `$4` of job `$3` has not
/// taken (no checkpoint of that step names their id), oldest first, at most 100.
pub const KEPT_SIGNALS_FOR_JOB: &str = "\
SELECT e.event_id, e.payload FROM workflow_events_received e
 WHERE e.event_key = $1 AND e.received_at >= timestamptz 'epoch' + $2::bigint * interval '1 millisecond'
   AND NOT EXISTS (SELECT 1 FROM workflow_run w
                    WHERE w.job_id = $3
                      AND w.checkpoints @> jsonb_build_array(jsonb_build_object('name', $4::text, 'eventId', e.event_id)))
 ORDER BY e.received_at, e.event_id
 LIMIT 100";

/// Marks job `$1`'s catch-up on the events kept for its keys as done (in the
/// catch-up's transaction: [`REQUEUE_MISSED_SIGNALS`] then leaves it alone).
pub const EVENTS_CAUGHT_UP: &str =
    "UPDATE workflow_run SET events_caught_up_at = clock_timestamp() WHERE job_id = $1";

/// Requeues WAITING jobs parked on an event step a while ago (`$2` ms: their own
/// catch-up had its time) whose catch-up on the events kept for their keys never
/// completed after that park (a park clears `events_caught_up_at`, the catch-up sets
/// it): the claim parks them again and the worker's catch-up offers them the events
/// (a node that died between a park and its catch-up, or a catch-up that failed,
/// loses nothing, however long before the park the event was sent). `$1` the most
/// rows at once. The conditions are migration V33's partial index's predicate, word
/// for word, so the sweep reads that index (the few owed rows), not every WAITING
/// row.
pub const REQUEUE_MISSED_SIGNALS: &str = "\
UPDATE workflow_run w
   SET status = 'QUEUED', attempt = w.attempt - 1, outstanding_step = NULL, outstanding_steps = NULL,
       pending_request = NULL, wait_until = NULL, wait_timeout_ms = NULL, on_timeout = NULL,
       run_after = now(), updated_at = now()
  FROM (SELECT j.job_id
          FROM workflow_run j
         WHERE j.status = 'WAITING'
           AND j.updated_at < now() - $2::bigint * interval '1 millisecond'
           AND j.events_caught_up_at IS NULL
           AND jsonb_typeof(j.waits) = 'array'
           AND jsonb_path_exists(j.waits, '$[*] ? (@.kind == \"event\")')
         LIMIT $1
         FOR UPDATE SKIP LOCKED) missed
 WHERE w.job_id = missed.job_id AND w.status = 'WAITING'
RETURNING w.job_id";

/// Deletes up to `$2` kept events received more than `$1` milliseconds ago (the
/// longest lookback a step may ask), oldest first; answers how many.
pub const PRUNE_SIGNALS: &str = "\
DELETE FROM workflow_events_received
 WHERE event_id IN (SELECT event_id FROM workflow_events_received
                     WHERE received_at < now() - $1::bigint * interval '1 millisecond'
                     ORDER BY received_at
                     LIMIT $2)";
