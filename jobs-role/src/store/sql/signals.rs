//! The statements of events sent to jobs (`send-event`, the signals topic), called
//! signals here to tell them from the outbox's events: keeping them for the lookback,
//! finding the jobs waiting on a key, and the lock that orders a send against a job
//! that parks on the same key.

/// Orders the sends of one key with the jobs that catch up on it after parking: a
/// send either sees the parked job, or the job's catch-up sees the kept event (taken
/// before any job row lock, so the two never deadlock). `$1` the key.
pub const LOCK_EVENT_KEY: &str = "SELECT pg_advisory_xact_lock(7363, hashtext($1))";

/// Keeps a sent event, answering its id; nothing when the id was sent before. `$1`
/// id, `$2` key, `$3` payload.
pub const KEEP_SIGNAL: &str = "\
INSERT INTO workflow_events_received (event_id, event_key, payload) VALUES ($1, $2, $3)
    ON CONFLICT (event_id) DO NOTHING
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
SELECT w.job_id, w.waits, COALESCE(w.workflow_definition, s.definition) AS workflow_definition
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

/// The kept events of key `$1` sent within the last `$2` milliseconds that job `$3`
/// has not taken (no checkpoint of it names their id), oldest first, at most 100.
pub const KEPT_SIGNALS_FOR_JOB: &str = "\
SELECT e.event_id, e.payload FROM workflow_events_received e
 WHERE e.event_key = $1 AND e.received_at >= now() - $2::bigint * interval '1 millisecond'
   AND NOT EXISTS (SELECT 1 FROM workflow_run w
                    WHERE w.job_id = $3
                      AND w.checkpoints @> jsonb_build_array(jsonb_build_object('eventId', e.event_id)))
 ORDER BY e.received_at, e.event_id
 LIMIT 100";

/// Deletes up to `$2` kept events received more than `$1` milliseconds ago (the
/// longest lookback a step may ask), oldest first; answers how many.
pub const PRUNE_SIGNALS: &str = "\
DELETE FROM workflow_events_received
 WHERE event_id IN (SELECT event_id FROM workflow_events_received
                     WHERE received_at < now() - $1::bigint * interval '1 millisecond'
                     ORDER BY received_at
                     LIMIT $2)";
