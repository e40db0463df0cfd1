//! The Kafka lanes' statements: the outbox relay's batch, its marks and deferrals,
//! dead-lettering and the rows held behind it, redrives, and the request consumer's
//! rejected records.

/// The channel outbox inserts notify and relays listen on.
pub const LISTEN_OUTBOX: &str = "LISTEN protomolt_jobs_outbox";

/// Wakes idle relays when the transaction that wrote an outbox row commits.
pub const NOTIFY_OUTBOX: &str = "SELECT pg_notify('protomolt_jobs_outbox', '')";

/// Locks the relay's next batch: PENDING rows due for (re)publishing, oldest first,
/// skipping rows another relay holds. Only a job's earliest PENDING row is taken, so
/// one job's events are published in order even with several relays. A job with a
/// FAILED (dead-lettered) row has its later rows HELD, outside this scan, until an
/// operator redrives it ([`REDRIVE_FAILED_EVENT`]), so consumers never see a gap and
/// stuck jobs cost the lane nothing. The FAILED check here still guards a row written
/// PENDING by a transaction racing the one that dead-lettered its job's row.
/// `$1` batch size.
pub const CLAIM_OUTBOX_BATCH: &str = "\
SELECT o.event_id, o.job_id, o.payload, o.attempts,
       (SELECT w.trace_context FROM workflow_run w WHERE w.job_id = o.job_id) AS trace_context
  FROM workflow_run_events_outbox o
 WHERE o.status = 'PENDING' AND o.next_attempt_at <= now()
   AND NOT EXISTS (SELECT 1 FROM workflow_run_events_outbox e
                    WHERE e.job_id = o.job_id AND e.status IN ('PENDING', 'FAILED') AND e.seq < o.seq)
 ORDER BY o.created_at, o.seq
 FOR UPDATE SKIP LOCKED
 LIMIT $1";

/// Holds a job's rows behind one that was just dead-lettered. `$1` the FAILED row's id.
pub const HOLD_BEHIND_FAILED: &str = "\
UPDATE workflow_run_events_outbox o SET status = 'HELD'
  FROM workflow_run_events_outbox f
 WHERE f.event_id = $1 AND o.job_id = f.job_id AND o.seq > f.seq AND o.status = 'PENDING'";

/// An operator's redrive of a dead-lettered outbox row: it and the job's HELD rows are
/// PENDING again (the row with a fresh budget), so they publish in order, unless an
/// earlier FAILED row of the job still holds them. `$1` event id; returns the rows
/// released.
pub const REDRIVE_FAILED_EVENT: &str = "\
WITH failed AS (
    SELECT job_id FROM workflow_run_events_outbox
     WHERE event_id = $1 AND status = 'FAILED'
       FOR UPDATE)
UPDATE workflow_run_events_outbox o
   SET status = 'PENDING', next_attempt_at = now(),
       attempts = CASE WHEN o.event_id = $1 THEN 0 ELSE o.attempts END
  FROM failed r
 WHERE o.job_id = r.job_id
   AND (o.event_id = $1 OR o.status = 'HELD')
   AND NOT EXISTS (SELECT 1 FROM workflow_run_events_outbox f
                    WHERE f.job_id = r.job_id AND f.status = 'FAILED'
                      AND f.event_id <> $1 AND f.seq < o.seq)
RETURNING o.event_id";

/// The jobs that have a dead-lettered (FAILED) outbox row, of workflow `$1` (NULL:
/// any), the one dead-lettered earliest first, at most `$2`.
pub const JOBS_WITH_FAILED_EVENTS: &str = "\
SELECT o.job_id FROM workflow_run_events_outbox o
 WHERE o.status = 'FAILED'
   AND ($1::text IS NULL
        OR EXISTS (SELECT 1 FROM workflow_run w WHERE w.job_id = o.job_id AND w.workflow_name = $1))
 GROUP BY o.job_id
 ORDER BY min(o.seq)
 LIMIT $2";

/// An operator's redrive of jobs' events (`redrive-events`): every FAILED row of the
/// jobs `$1` PENDING again with a fresh budget. Their HELD rows stay HELD until the
/// row ahead of them publishes ([`RELEASE_HELD_OF_JOBS`]): a redrive of rows still
/// refused never leaves blocked PENDING rows for every relay batch to walk past.
/// Returns the job of each row redriven.
pub const REDRIVE_JOB_EVENTS: &str = "\
UPDATE workflow_run_events_outbox
   SET status = 'PENDING', next_attempt_at = now(), attempts = 0
 WHERE job_id = ANY($1) AND status = 'FAILED'
RETURNING job_id";

/// HELD rows of the jobs `$1` (their latest rows just published) that nothing holds
/// back any more (no FAILED or PENDING row ahead of them): PENDING, so they publish,
/// in order.
pub const RELEASE_HELD_OF_JOBS: &str = "\
UPDATE workflow_run_events_outbox h SET status = 'PENDING', next_attempt_at = now()
 WHERE h.status = 'HELD' AND h.job_id = ANY($1)
   AND NOT EXISTS (SELECT 1 FROM workflow_run_events_outbox f
                    WHERE f.job_id = h.job_id AND f.status IN ('FAILED', 'PENDING') AND f.seq < h.seq)";

/// HELD rows of any job that nothing holds back any more (one written HELD while its
/// job's redrive committed, a row whose head was published by a relay of an older
/// version): PENDING. The relay runs it now and then. Returns how many.
pub const RELEASE_UNBLOCKED_HELD: &str = "\
UPDATE workflow_run_events_outbox h SET status = 'PENDING', next_attempt_at = now()
 WHERE h.status = 'HELD'
   AND NOT EXISTS (SELECT 1 FROM workflow_run_events_outbox f
                    WHERE f.job_id = h.job_id AND f.status IN ('FAILED', 'PENDING') AND f.seq < h.seq)";

/// Puts a row an outage kept from the broker back for later without spending an
/// attempt, so the next batch reaches other rows (other partitions may be healthy).
/// `$1` event ids, `$2` delay in milliseconds.
pub const DEFER_AFTER_OUTAGE: &str = "\
UPDATE workflow_run_events_outbox
   SET next_attempt_at = now() + $2::bigint * interval '1 millisecond'
 WHERE event_id = ANY($1) AND status = 'PENDING'";

/// Marks rows the broker acknowledged. `$1` event ids.
pub const MARK_PUBLISHED: &str = "\
UPDATE workflow_run_events_outbox SET status = 'PUBLISHED', published_at = now()
 WHERE event_id = ANY($1) AND status = 'PENDING'";

/// Records a failed publish: one more attempt, the error, a backoff; FAILED (the
/// dead-letter state, never picked again) once `$4` attempts are spent. `$1` event id,
/// `$2` error, `$3` backoff in milliseconds, `$4` attempts allowed.
pub const MARK_PUBLISH_FAILED: &str = "\
UPDATE workflow_run_events_outbox
   SET attempts = attempts + 1, last_error = $2,
       next_attempt_at = now() + $3::bigint * interval '1 millisecond',
       status = CASE WHEN attempts + 1 >= $4 THEN 'FAILED' ELSE 'PENDING' END
 WHERE event_id = $1
RETURNING status, attempts";

/// Counts of the lanes' backlog, for metrics: PENDING, FAILED and HELD outbox rows,
/// and rejected requests (each from its own partial index).
pub const LANE_COUNTS: &str = "\
SELECT (SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'PENDING') AS pending,
       (SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'FAILED') AS failed,
       (SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'HELD') AS held,
       (SELECT count(*) FROM workflow_run_request_rejects) AS rejected";

/// Keeps a poison record of the request topic, once per record: a record is its
/// place and its bytes (a digest of the key's length, the key and the payload), so a
/// redelivery is kept once and a new record at a reused offset (a recreated topic) is
/// kept too. `$1` topic, `$2` partition, `$3` offset, `$4` key, `$5` payload, `$6`
/// error.
pub const INSERT_REQUEST_REJECT: &str = "\
INSERT INTO workflow_run_request_rejects (topic, partition, record_offset, record_key, payload, error, record_digest)
VALUES ($1, $2, $3, $4, $5, $6,
        sha256(int4send(COALESCE(octet_length($4::bytea), -1)) || COALESCE($4::bytea, ''::bytea)
               || COALESCE($5::bytea, ''::bytea)))
ON CONFLICT ON CONSTRAINT request_rejects_once_per_record DO NOTHING";

/// One outbox row by id (operators and tests). `$1` event id.
pub const OUTBOX_ROW: &str = "\
SELECT status, attempts, last_error FROM workflow_run_events_outbox WHERE event_id = $1";
