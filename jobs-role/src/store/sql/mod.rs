//! Every SQL statement of the jobs role, named. Nothing else in the workspace builds SQL.
//!
//! Worker writes after a claim are **fenced**: they carry `$1` job id, `$2` lease
//! owner and `$3` the claim's token (`claims`, which only ever grows), and match only
//! while the row is still RUNNING under that same claim. A write that matches no row
//! means the claim was lost (swept and re-claimed elsewhere, or released); the store
//! then commits nothing.
//!
//! Two counters, never confused: `claims` is the fencing token (+1 per claim, never
//! decreased); `attempt` is the retry budget (a claim counts one; a release and the
//! answer to a parked step give it back, since neither is a failure).
//!
//! The statements of the Kafka lanes (the outbox relay, redrives, rejected requests)
//! are in [`lanes`], those of retention in [`retention`], those of the workflow
//! snapshots in [`snapshots`], those of parked jobs in [`parked`], of events sent to
//! jobs in [`signals`], of map elements in [`items`]; all are re-exported here, so
//! every statement is `sql::NAME`.

#[macro_use]
mod fences;
pub mod children;
pub mod dedupe;
pub mod flow;
pub mod items;
pub mod lanes;
pub mod limits;
pub mod parked;
pub mod retention;
pub mod schedules;
pub mod server;
pub mod signals;
pub mod snapshots;

pub use children::*;
pub use dedupe::*;
pub use flow::*;
pub use items::*;
pub use lanes::*;
pub use limits::*;
pub use parked::*;
pub use retention::*;
pub use schedules::*;
pub use server::*;
pub use signals::*;
pub use snapshots::*;

/// Serialises migrations across nodes starting together (session-level advisory lock;
/// the key is the ASCII bytes of "pmjobs"). The session's `lock_timeout` is lifted
/// first: a node waits for another node's migration however long it takes (the
/// node's connections bound lock waits otherwise: see `store::session_defaults`).
pub const LOCK_MIGRATIONS: &str = "SET lock_timeout = 0; SELECT pg_advisory_lock(123615239430771)";

/// The newest migration applied (refinery's history table), for readiness.
pub const APPLIED_MIGRATION: &str = "SELECT max(version)::bigint FROM refinery_schema_history";

/// Releases [`LOCK_MIGRATIONS`], and gives the session its `lock_timeout` back.
pub const UNLOCK_MIGRATIONS: &str =
    "SELECT pg_advisory_unlock(123615239430771); RESET lock_timeout";

/// The channel submissions and requeues notify and the idle worker listens on.
pub const QUEUED_CHANNEL: &str = "protomolt_jobs_queued";

/// Subscribes a connection to [`QUEUED_CHANNEL`].
pub const LISTEN_QUEUED: &str = "LISTEN protomolt_jobs_queued";

/// Wakes the idle worker when the transaction commits. `$1` job id (text).
pub const NOTIFY_QUEUED: &str = "SELECT pg_notify('protomolt_jobs_queued', $1::text)";

/// A submission's whole write in one statement, so it costs one round trip: files the
/// job's workflow snapshot unless it is filed already (migration V21), inserts the row
/// `$insert` (naming the snapshot by digest) unless its id exists or retention deleted
/// a job of that id (a replay of a finished submission: see [`PRUNE_JOBS`]), writes
/// the row's first outbox event only if it was inserted, and wakes the relays and,
/// for a QUEUED job, the idle workers when the transaction commits. Answers the new
/// row's status; no row: the id was taken (or pruned), and nothing was written.
///
/// Parameters: `$1` job id, `$2` workflow name, `$3` definition (NULL: the node saw it
/// filed under `$6`, and V21's foreign key refuses the row if it is not), `$4` input,
/// `$6` the definition's digest (NULL: the row carries the definition and V21's
/// trigger files it under a digest it computes), `$7` priority, `$9` the submitter's
/// trace context (or NULL); `$5` and `$8` as the insert says; `$10` the event's id,
/// `$11` its type, `$12` its payload. Runs after [`SUBMISSION_SETTINGS`].
macro_rules! submission {
    ($insert:literal) => {
        concat!(
            "WITH filed AS (
    INSERT INTO workflow_snapshot (digest, definition)
    SELECT $6::text, $3::jsonb WHERE $6::text IS NOT NULL AND $3::jsonb IS NOT NULL
    ON CONFLICT (digest) DO NOTHING),
job AS (
",
            $insert,
            "
     WHERE NOT EXISTS (SELECT 1 FROM workflow_run_pruned p WHERE p.job_id = $1::uuid)
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, status),
event AS (
    INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload, status)
    SELECT $10::uuid, job.job_id, $11::text, $12::bytea,
           CASE WHEN EXISTS (SELECT 1 FROM workflow_run_events_outbox o
                              WHERE o.job_id = job.job_id AND o.status IN ('FAILED', 'HELD'))
                THEN 'HELD' ELSE 'PENDING' END
      FROM job
    ON CONFLICT (event_id) DO NOTHING)
SELECT job.status,
       pg_notify('protomolt_jobs_outbox', '')::text AS relays_woken,
       CASE WHEN job.status = 'QUEUED' THEN pg_notify('protomolt_jobs_queued', $1::uuid::text)::text END
           AS workers_woken
  FROM job"
        )
    };
}

/// Submits a QUEUED job with its ACCEPTED event ([`submission!`]'s parameters): `$5`
/// max attempts, `$8` when it becomes claimable (NULL, or a time past: now, so a past
/// start never jumps the queue), `$15` a delay in ms from now, by the database's clock
/// (used when `$8` is NULL; 0: none), `$13` its metadata (NULL: none), `$14` whether
/// it was submitted by a stored workflow's name.
pub const SUBMIT_JOB: &str = submission!(
    "    INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, max_attempts,
                              definition_digest, priority, run_after, trace_context, metadata,
                              submitted_by_name)
    SELECT $1::uuid, $2::text, CASE WHEN $6::text IS NULL THEN $3::jsonb END, $4::jsonb, $5::integer,
           $6::text, $7::smallint,
           GREATEST(COALESCE($8::timestamptz, now() + $15::bigint * interval '1 millisecond'), now()),
           $9::text, $13::jsonb, $14::boolean"
);

/// Inserts a batch of jobs in one statement, each unless its id exists, sending each
/// distinct snapshot once: PostgreSQL parses it once, however many jobs share it.
/// The rows go in in the order given (callers sort by job id, so two batches holding
/// the same ids lock them in the same order: never a deadlock); the ids answered are
/// the rows inserted (an id taken, or given twice, is inserted at most once).
///
/// Per job: `$1` ids, `$2` workflow names, `$3` which snapshot (1-based into `$6`),
/// `$4` inputs, `$5` max attempts, `$8` priorities, `$9` when each becomes claimable
/// (NULL: now plus its `$17` delay in ms, by the database's clock), `$10` trace contexts (or NULL), `$11` concurrency keys (a JSON list,
/// or NULL), `$12` dedupe keys (or NULL), `$13` and `$14` the schedule and tick that
/// fired each (or NULL), `$15` each one's metadata (or NULL), `$16` whether each was
/// submitted by a stored workflow's name. Per distinct snapshot: `$6`
/// definitions (NULL: filed, as in [`SUBMIT_JOB`]), `$7` digests (NULL: the row
/// carries the definition and V21's trigger files it). Each snapshot is filed once (see [`SUBMIT_JOB`]), in digest order (two
/// batches filing the same new snapshots never deadlock).
pub const INSERT_JOBS: &str = "\
WITH filed AS (
    INSERT INTO workflow_snapshot (digest, definition)
    SELECT d.digest, d.definition FROM unnest($6::jsonb[], $7::text[]) AS d(definition, digest)
     WHERE d.digest IS NOT NULL AND d.definition IS NOT NULL
     ORDER BY d.digest
    ON CONFLICT (digest) DO NOTHING)
INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, max_attempts, definition_digest,
                          priority, run_after, trace_context, concurrency_keys, dedupe_key,
                          schedule_name, scheduled_for, metadata, submitted_by_name)
SELECT j.job_id, j.workflow_name, CASE WHEN d.digest IS NULL THEN d.definition END, j.input, j.max_attempts, d.digest,
       j.priority, GREATEST(COALESCE(j.run_after, now() + j.delay_ms * interval '1 millisecond'), now()),
       j.trace_context,
       CASE WHEN j.keys IS NOT NULL
            THEN ARRAY(SELECT k.key FROM jsonb_array_elements_text(j.keys) WITH ORDINALITY AS k(key, at) ORDER BY k.at) END,
       j.dedupe_key, j.schedule_name, j.scheduled_for, j.metadata, j.by_name
  FROM unnest($1::uuid[], $2::text[], $3::int[], $4::jsonb[], $5::int[], $8::int2[], $9::timestamptz[],
              $10::text[], $11::jsonb[], $12::text[], $13::text[], $14::timestamptz[], $15::jsonb[],
              $16::bool[], $17::bigint[])
           WITH ORDINALITY AS j(job_id, workflow_name, snapshot, input, max_attempts, priority, run_after,
                                trace_context, keys, dedupe_key, schedule_name, scheduled_for, metadata,
                                by_name, delay_ms, at)
  JOIN unnest($6::jsonb[], $7::text[]) WITH ORDINALITY AS d(definition, digest, at)
    ON d.at = j.snapshot
 WHERE NOT EXISTS (SELECT 1 FROM workflow_run_pruned p WHERE p.job_id = j.job_id)
 ORDER BY j.at
ON CONFLICT (job_id) DO NOTHING
RETURNING job_id";

/// Submits a job that failed before it could run (for example a broker-native
/// request naming an unknown workflow) with its FAILED event ([`submission!`]'s
/// parameters): `$5` the error, `$8` the start asked for (NULL: now plus the `$15`
/// delay in ms), kept for the record. An id already taken answers no row ([`SAME_SUBMISSION`] then tells a
/// redelivery from a conflict).
pub const SUBMIT_FAILED_JOB: &str = submission!(
    "    INSERT INTO workflow_run (job_id, workflow_name, workflow_definition, input, status, error,
                              finished_at, definition_digest, priority, run_after, trace_context, metadata,
                              submitted_by_name)
    SELECT $1::uuid, $2::text, CASE WHEN $6::text IS NULL THEN $3::jsonb END, $4::jsonb, 'FAILED', $5::text,
           now(), $6::text, $7::smallint, COALESCE($8::timestamptz, now() + $15::bigint * interval '1 millisecond'),
           $9::text, $13::jsonb, $14::boolean"
);

/// What an existing job was submitted with, to tell a resubmission from a conflict.
/// Runs in the inserting transaction, after the insert found the id taken (so it
/// never needs a second connection). A submission by a stored name matches on the
/// name and input (the stored workflow may have changed since); an inline one on its
/// definition too. `$1` job id, `$2` workflow name, `$3` definition, `$4` input, `$5`
/// submitted by name.
pub const SAME_SUBMISSION: &str = "\
SELECT w.workflow_name = $2 AND w.input = $4::jsonb
       AND ($5 OR COALESCE(w.workflow_definition, s.definition) = $3::jsonb) AS same,
       w.status
  FROM workflow_run w LEFT JOIN workflow_snapshot s ON s.digest = w.definition_digest
 WHERE w.job_id = $1";

/// Writes one outbox row: PENDING, or HELD when the job already has a dead-lettered
/// (FAILED) or held row, so it never overtakes them. An id already there is left
/// alone: a claim's events have ids derived from what they mark
/// (`events::claim_event_id`), so an event written twice is one row. `$1` event id,
/// `$2` job id, `$3` event type, `$4` payload.
pub const INSERT_EVENT: &str = "\
INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload, status)
SELECT $1, $2, $3, $4,
       CASE WHEN EXISTS (SELECT 1 FROM workflow_run_events_outbox
                          WHERE job_id = $2 AND status IN ('FAILED', 'HELD'))
            THEN 'HELD' ELSE 'PENDING' END
ON CONFLICT (event_id) DO NOTHING";

/// Writes the outbox rows of a batch, each as [`INSERT_EVENT`] would (an id already
/// there left alone), in the order given. Per row: `$1` event ids, `$2` job ids, `$3`
/// event types, `$4` payloads.
pub const INSERT_EVENTS: &str = "\
INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload, status)
SELECT e.event_id, e.job_id, e.event_type, e.payload,
       CASE WHEN EXISTS (SELECT 1 FROM workflow_run_events_outbox o
                          WHERE o.job_id = e.job_id AND o.status IN ('FAILED', 'HELD'))
            THEN 'HELD' ELSE 'PENDING' END
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bytea[]) WITH ORDINALITY
           AS e(event_id, job_id, event_type, payload, at)
 ORDER BY e.at
ON CONFLICT (event_id) DO NOTHING";

/// The whole claim of a batch in one statement (answering the snapshot's digest, not
/// the snapshot: see [`JOB_DEFINITION`]): `protomolt_claimable` (migration V26)
/// picks and locks up to `$3` QUEUED rows, skipping rows other workers hold: jobs
/// without concurrency keys by priority, 9 first, then those eligible the longest
/// (one range scan of `workflow_run_eligible_unkeyed` per priority, never walking
/// rows still backing off or scheduled for later), and keyed jobs key by key in turn
/// order, each key giving at most the room its limit leaves, counted under the key's
/// row lock; jobs of paused workflows and keys are left out. `ARRAY(...)` makes it
/// run once. The update flips the rows to RUNNING under that lock, stamps the lease,
/// takes a new fencing token (`claims`) per row and counts the attempt. A QUEUED row
/// always has an attempt left (a CHECK constraint says so), so nothing
/// claimable is ever skipped for its budget.
///
/// Parameters: `$1` lease owner, `$2` lease length in milliseconds, `$3` most rows,
/// `$4` the claim's nonce (see [`RELEASE_UNHEARD_CLAIMS`]).
pub const CLAIM_JOBS: &str = "\
UPDATE workflow_run
   SET status = 'RUNNING', lease_owner = $1,
       lease_until = now() + $2::bigint * interval '1 millisecond',
       claims = claims + 1, attempt = attempt + 1, claim_nonce = $4, throttled = NULL, updated_at = now()
 WHERE job_id = ANY(ARRAY(SELECT unnest(protomolt_claimable($3::integer))))
   AND status = 'QUEUED'
RETURNING job_id, workflow_name, input, claims, attempt, max_attempts, priority, releases, step_reruns, checkpoints, trace_context,
          COALESCE(definition_digest, encode(sha256(convert_to(workflow_definition::text, 'UTF8')), 'hex'))
              AS definition_digest,
          CASE WHEN jsonb_typeof(waits) = 'array' THEN
              (SELECT jsonb_object_agg(p ->> 'step', p -> 'untilMs') FROM jsonb_array_elements(waits) AS p
                WHERE p ->> 'kind' = 'sleep' AND jsonb_typeof(p -> 'untilMs') = 'number') END AS sleeps,
          floor(extract(epoch FROM now()) * 1000)::bigint AS claimed_at_ms, child_ends, metadata";

/// Gives back the RUNNING jobs a claim statement whose answer never came took (the
/// connection broke after it was sent): stamped with `$1` (the node's worker id) and
/// one of the nonces `$2` of such claims, and not run by the node (`$3`, the ids its
/// tasks hold). No task holds them and nothing ran under them, so the attempt is
/// given back (the release is counted, as any release without progress) and they are
/// claimable at once. Only live leases (an expired one is the sweeper's), and not one
/// an operator asked to cancel (the sweeper settles those CANCELLED). Answers the ids
/// given back.
pub const RELEASE_UNHEARD_CLAIMS: &str = "\
UPDATE workflow_run
   SET status = 'QUEUED', attempt = attempt - 1, releases = releases + 1,
       lease_owner = NULL, lease_until = NULL, run_after = now(), updated_at = now()
 WHERE status = 'RUNNING' AND lease_owner = $1 AND claim_nonce = ANY($2) AND NOT (job_id = ANY($3))
   AND lease_until > now() AND NOT cancel_requested
RETURNING job_id";

/// A job's workflow snapshot and its digest, from one row version, for a worker whose
/// cache does not know the digest: the filed snapshot the row names, or the copy a
/// row written before V21 still holds. `$1` job id.
pub const JOB_DEFINITION: &str = "\
SELECT COALESCE(w.workflow_definition, s.definition) AS workflow_definition,
       COALESCE(w.definition_digest, encode(sha256(convert_to(w.workflow_definition::text, 'UTF8')), 'hex'))
           AS definition_digest
  FROM workflow_run w LEFT JOIN workflow_snapshot s ON s.digest = w.definition_digest
 WHERE w.job_id = $1";

/// Opens a group commit: a write waiting longer than this on a row lock (an operator's
/// open transaction on one job) fails the batch, which then commits each write alone,
/// instead of holding every job of the node.
pub const BATCH_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '5s'";

/// The settings of a submission's transaction: [`BATCH_LOCK_TIMEOUT`]'s bound on
/// waiting for a row lock (an id another transaction is inserting and has not
/// committed), the flag by which the triggers of migrations V8 and V21 keep the
/// snapshot digests the submitter computed instead of computing their own, and the
/// snapshot lock shared ([`SNAPSHOT_LOCK_KEY`]: the pruner never deletes a snapshot
/// this submission found filed), with a bound on sitting idle inside the transaction
/// (a connection cut there must not hold the lock for long).
pub const SUBMISSION_SETTINGS: &str = "SET LOCAL lock_timeout = '5s'; \
SET LOCAL idle_in_transaction_session_timeout = '30s'; \
SET LOCAL protomolt.digest_from_node = 'on'; \
SELECT pg_advisory_xact_lock_shared(123615239430773)";

/// Extends the lease, answering whether an operator asked to cancel the job. `$4`
/// lease length in milliseconds.
pub const RENEW_LEASE: &str = concat!(
    fenced!(
        "UPDATE workflow_run SET lease_until = now() + $4::bigint * interval '1 millisecond', updated_at = now()"
    ),
    "\nRETURNING cancel_requested"
);

/// Appends one checkpoint (progress: the release count starts over, and the error of
/// an earlier attempt no longer describes the job, so it is cleared; the events keep
/// it). `$4` the checkpoint entry (a JSON object), `$5` its position.
pub const APPEND_CHECKPOINT: &str = concat!(
    at_position!(fenced!(
        "UPDATE workflow_run SET checkpoints = checkpoints || jsonb_build_array($4::jsonb), releases = 0,
       error = NULL, updated_at = now()"
    )),
    "$5"
);

/// [`APPEND_CHECKPOINT`] as the first statement of a write that also settles: refused
/// with the settlement once an operator asked to cancel.
pub const APPEND_CHECKPOINT_BEFORE_SETTLEMENT: &str = concat!(
    at_position!(unless_cancel_requested!(fenced!(
        "UPDATE workflow_run SET checkpoints = checkpoints || jsonb_build_array($4::jsonb), releases = 0,
       error = NULL, updated_at = now()"
    ))),
    "$5"
);

/// Appends the workflow's final checkpoint and settles COMPLETED, in one row version.
/// `$4` result, `$5` verdict, `$6` the checkpoint entry, `$7` its position.
pub const SETTLE_COMPLETED_WITH_CHECKPOINT: &str = concat!(
    at_position!(unless_cancel_requested!(fenced!(
        "UPDATE workflow_run SET status = 'COMPLETED', result = $4, verdict = $5, error = NULL,
       checkpoints = checkpoints || jsonb_build_array($6::jsonb),
       lease_owner = NULL, lease_until = NULL, releases = 0, finished_at = now(), updated_at = now()"
    ))),
    "$7"
);

/// [`SETTLE_COMPLETED_WITH_CHECKPOINT`] for many claims in one statement (the
/// flusher's commonest write, one row each), each row fenced on its own claim, not
/// cancel-requested, and its checkpoint position, exactly as the single statement.
/// Per claim: `$1` job ids, `$2` owners, `$3` fencing tokens, `$4` results, `$5`
/// verdicts, `$6` checkpoint entries, `$7` their positions. Answers the ids whose
/// fences matched; the ids must be distinct.
pub const SETTLE_MANY_COMPLETED_WITH_CHECKPOINT: &str = "\
UPDATE workflow_run w SET status = 'COMPLETED', result = u.result, verdict = u.verdict, error = NULL,
       checkpoints = w.checkpoints || jsonb_build_array(u.entry),
       lease_owner = NULL, lease_until = NULL, releases = 0, finished_at = now(), updated_at = now()
  FROM unnest($1::uuid[], $2::text[], $3::int[], $4::jsonb[], $5::text[], $6::jsonb[], $7::int[])
           AS u(job_id, owner, token, result, verdict, entry, position)
 WHERE w.job_id = u.job_id AND w.status = 'RUNNING' AND w.lease_owner = u.owner AND w.claims = u.token
   AND NOT w.cancel_requested
   AND CASE WHEN jsonb_typeof(w.checkpoints) = 'array' THEN jsonb_array_length(w.checkpoints) END = u.position
RETURNING w.job_id";

/// What became of claimed jobs, read back after a batch whose `COMMIT` went
/// unanswered (it may or may not have landed) and for writes whose fence matched
/// nothing (a write sent again after its first sending landed): per job its status,
/// holder, fencing token and checkpoint count. `$1` job ids.
pub const CLAIM_WRITES_STATE: &str = "\
SELECT job_id, status, lease_owner, claims,
       CASE WHEN jsonb_typeof(checkpoints) = 'array' THEN jsonb_array_length(checkpoints) END AS checkpoints
  FROM workflow_run WHERE job_id = ANY($1)";

/// Settles COMPLETED. `$4` result, `$5` verdict.
pub const SETTLE_COMPLETED: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = 'COMPLETED', result = $4, verdict = $5, error = NULL,
       lease_owner = NULL, lease_until = NULL, releases = 0, finished_at = now(), updated_at = now()"
));

/// Settles FAILED. `$4` error, `$5` verdict (the violations of a validation verdict).
pub const SETTLE_FAILED: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = 'FAILED', error = $4, verdict = $5,
       lease_owner = NULL, lease_until = NULL, releases = 0, finished_at = now(), updated_at = now()"
));

/// Settles DEAD. `$4` the last error, verbatim.
pub const SETTLE_DEAD: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = 'DEAD', error = $4,
       lease_owner = NULL, lease_until = NULL, releases = 0, finished_at = now(), updated_at = now()"
));

/// Requeues after a retryable failure. `$4` backoff in milliseconds, `$5` the error.
pub const SETTLE_RETRY: &str = unless_cancel_requested!(fenced!(
    "UPDATE workflow_run SET status = 'QUEUED', error = $5,
       run_after = now() + $4::bigint * interval '1 millisecond',
       lease_owner = NULL, lease_until = NULL, releases = 0, updated_at = now()"
));

/// Settles CANCELLED a job an operator asked to cancel while it ran; matches nothing
/// when no cancel was asked for. Returns the attempt, the operator's reason and the
/// job's metadata (for the event).
pub const SETTLE_CANCELLED: &str = concat!(
    fenced!(
        "UPDATE workflow_run SET status = 'CANCELLED',
       lease_owner = NULL, lease_until = NULL, releases = 0, finished_at = now(), updated_at = now()"
    ),
    "\n   AND cancel_requested\nRETURNING attempt, cancel_reason, metadata"
);

/// Gives a claim back without burning its attempt (shutdown, or a transient store
/// failure while checkpointing), counting the release; decided on the row's own
/// count (a checkpoint of this claim reset it), so a claim that made progress is
/// never counted as one that did not. At `$5` releases in a row the job lands DEAD
/// instead, with `RELEASED: ...` and `$6` the reason. The fencing token is kept, so
/// the released (owner, claims) pair can never match again. `$4` delay in
/// milliseconds. `$7` false gives back a call throttled by a fleet-wide limit: not
/// counted (a throttle is not a lack of progress), never DEAD, `$6` kept as the
/// job's `throttled` reason until its next claim.
pub const RELEASE_CLAIM: &str = concat!(
    unless_cancel_requested!(fenced!(
        "UPDATE workflow_run SET
       status = CASE WHEN $7 AND releases + 1 >= $5 THEN 'DEAD' ELSE 'QUEUED' END,
       attempt = CASE WHEN $7 AND releases + 1 >= $5 THEN attempt ELSE attempt - 1 END,
       error = CASE WHEN $7 AND releases + 1 >= $5
                    THEN 'RELEASED: the claim was given back ' || (releases + 1)
                         || ' times in a row without progress (jobs.max_releases); the last time because ' || $6
                    ELSE error END,
       finished_at = CASE WHEN $7 AND releases + 1 >= $5 THEN now() ELSE NULL END,
       releases = CASE WHEN $7 THEN releases + 1 ELSE releases END,
       throttled = CASE WHEN $7 THEN NULL ELSE $6 END,
       run_after = now() + $4::bigint * interval '1 millisecond',
       lease_owner = NULL, lease_until = NULL, updated_at = now()"
    )),
    "\nRETURNING status, attempt, error, metadata"
);

/// Requeues RUNNING rows whose lease has passed (their worker went quiet), keeping the
/// attempts they used; a row whose attempts are spent lands DEAD instead, and one an
/// operator asked to cancel CANCELLED. `$1` the most rows to sweep at once. A lease
/// that ran out less than `$2` milliseconds before this statement (NULL: none), since
/// the database began refusing the sweeper, was not let go by a quiet worker but by a
/// database that refused everyone's renewals: its attempt is given back as a release
/// gives it (`attempt - 1`, one more release, never DEAD), unless that would be the
/// `$3`th release in a row without progress. `given_back` says which rows were.
pub const SWEEP_EXPIRED_LEASES: &str = "\
UPDATE workflow_run w
   SET status = CASE WHEN w.cancel_requested THEN 'CANCELLED'
                     WHEN s.given_back THEN 'QUEUED'
                     WHEN w.attempt >= w.max_attempts THEN 'DEAD' ELSE 'QUEUED' END,
       attempt = CASE WHEN s.given_back AND NOT w.cancel_requested THEN w.attempt - 1 ELSE w.attempt END,
       releases = CASE WHEN s.given_back AND NOT w.cancel_requested THEN w.releases + 1 ELSE w.releases END,
       error = CASE WHEN NOT w.cancel_requested AND NOT s.given_back AND w.attempt >= w.max_attempts
                    THEN 'LEASE: the lease of attempt ' || w.attempt || ' expired (worker ' || w.lease_owner
                         || ' went quiet) and no attempts are left'
                    ELSE w.error END,
       finished_at = CASE WHEN w.cancel_requested OR (NOT s.given_back AND w.attempt >= w.max_attempts)
                          THEN now() ELSE NULL END,
       run_after = now(), lease_owner = NULL, lease_until = NULL, updated_at = now()
  FROM (SELECT job_id,
               COALESCE(lease_until >= statement_timestamp() - $2::bigint * interval '1 millisecond', false)
               AND releases + 1 < $3 AS given_back
          FROM workflow_run
         WHERE status = 'RUNNING' AND lease_until < now()
         ORDER BY lease_until
         FOR UPDATE SKIP LOCKED
         LIMIT $1) s
 WHERE w.job_id = s.job_id
RETURNING w.job_id, w.workflow_name, w.status, w.attempt, w.error, w.cancel_reason, w.metadata, s.given_back";

/// Locks the jobs an operator's act names (`$1` ids), in job-id order, answering
/// `job_id`, `status`, whether the job finished before `$2` (RFC 3339 text; NULL:
/// any, so true) as `finished_in_bound`, and the act's own columns. The first form
/// skips rows another transaction holds (a worker's write, a claim, another operator's
/// act): never a deadlock, never a wait behind a long transaction. The second waits in
/// the lock queue, for the rows the first skipped, one row per transaction (so it
/// cannot deadlock either), under the act's `lock_timeout` (see
/// `store::operator_acts`).
macro_rules! lock_jobs_for_an_act {
    ($columns:literal, $wait:literal) => {
        concat!(
            "SELECT job_id, status, workflow_name, ",
            $columns,
            ",\n       ($2::text IS NULL OR finished_at < $2::text::timestamptz) AS finished_in_bound",
            "\n  FROM workflow_run WHERE job_id = ANY($1) ORDER BY job_id FOR UPDATE",
            $wait
        )
    };
}

/// Locks jobs for `cancel-job` and `cancel-jobs`, skipping held rows.
pub const LOCK_JOBS_FOR_CANCEL: &str =
    lock_jobs_for_an_act!("attempt, cancel_requested, metadata", " SKIP LOCKED");

/// Locks a job for `cancel-job` and `cancel-jobs`, waiting for it.
pub const LOCK_JOBS_FOR_CANCEL_WAITING: &str =
    lock_jobs_for_an_act!("attempt, cancel_requested, metadata", "");

/// Locks jobs for `retry-job` and `retry-jobs`, skipping held rows.
pub const LOCK_JOBS_FOR_RETRY: &str = lock_jobs_for_an_act!(
    "claims, metadata, COALESCE(definition_digest, encode(sha256(convert_to(workflow_definition::text, 'UTF8')), 'hex')) AS digest",
    " SKIP LOCKED"
);

/// Locks a job for `retry-job` and `retry-jobs`, waiting for it.
pub const LOCK_JOBS_FOR_RETRY_WAITING: &str = lock_jobs_for_an_act!(
    "claims, metadata, COALESCE(definition_digest, encode(sha256(convert_to(workflow_definition::text, 'UTF8')), 'hex')) AS digest",
    ""
);

/// Bounds the transaction's waits for a row lock by `$1` (`'250ms'`; never `'0'`,
/// which would mean no bound), and lifts any `statement_timeout` the database sets
/// for the transaction, so the lock's own bound decides (a wait cut short by it would
/// read as an outage).
pub const SET_LOCK_TIMEOUT: &str =
    "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', '0', true)";

/// Which of `$1` (ids an act could not lock) exist: the others answer "no such job".
pub const EXISTING_JOBS: &str = "SELECT job_id FROM workflow_run WHERE job_id = ANY($1)";

/// Cancels QUEUED or WAITING jobs at once. `$1` job ids, `$2` the operator's reason.
/// Returns each job's attempt and reason, for its event.
pub const CANCEL_NOW: &str = "\
UPDATE workflow_run SET status = 'CANCELLED', cancel_reason = $2, outstanding_step = NULL, outstanding_steps = NULL, waits = NULL,
       pending_request = NULL, wait_until = NULL, wait_timeout_ms = NULL, on_timeout = NULL,
       finished_at = now(), updated_at = now()
 WHERE job_id = ANY($1) AND status IN ('QUEUED', 'WAITING')";

/// Marks RUNNING jobs cancel-requested; their workers (or the sweeper) settle them.
/// `$1` job ids, `$2` the operator's reason.
pub const REQUEST_CANCEL: &str = "\
UPDATE workflow_run SET cancel_requested = true, cancel_reason = $2, updated_at = now()
 WHERE job_id = ANY($1) AND status = 'RUNNING'";

/// The bulk acts' selections: jobs in `$1` (statuses), of `$2` (workflow name),
/// created before `$3` and after `$4`, finished before `$6` (RFC 3339 text; each
/// NULL for any), holding the metadata `$7` (NULL for any), oldest first, at most `$5`. One ordered scan of
/// `workflow_run_by_status` per status, merged, so a few rare statuses never walk the
/// whole history.
macro_rules! bulk_selection {
    ($which:literal) => {
        concat!(
            "SELECT picked.job_id
  FROM unnest($1::text[]) AS wanted(status),
       LATERAL (SELECT job_id, created_at FROM workflow_run
                 WHERE status = wanted.status AND ",
            $which,
            "
                   AND ($2::text IS NULL OR workflow_name = $2)
                   AND ($3::text IS NULL OR created_at < $3::text::timestamptz)
                   AND ($4::text IS NULL OR created_at > $4::text::timestamptz)
                   AND ($6::text IS NULL OR finished_at < $6::text::timestamptz)
                   AND ($7::jsonb IS NULL OR metadata @> $7::jsonb)
                 ORDER BY created_at, job_id
                 LIMIT $5) AS picked
 ORDER BY picked.created_at, picked.job_id
 LIMIT $5"
        )
    };
}

/// The jobs `cancel-jobs` selects by filter: `$1` statuses (of QUEUED, WAITING,
/// RUNNING), leaving out RUNNING ones already asked to cancel.
pub const CANCELLABLE_JOBS: &str = bulk_selection!("NOT cancel_requested");

/// The jobs `retry-jobs` selects by filter: `$1` statuses (of DEAD, FAILED,
/// CANCELLED), leaving out jobs FAILED at submission (never claimed: never retried).
pub const RETRYABLE_JOBS: &str = bulk_selection!("(status <> 'FAILED' OR claims > 0)");

/// An operator's retry: the jobs are QUEUED again, claimable now, with a fresh retry
/// budget and their outcome cleared. `$3` names the steps whose checkpoints are
/// dropped (NULL: none, and `reruns` unchanged), found by name wherever they are in
/// the array (parallel branches end in any order), so the next claim runs them
/// again; `$4` their positions in the workflow (1-based), each of them that had a
/// checkpoint or stored map elements counting one more re-run in `step_reruns` (its
/// calls get a new idempotency key); a step that had neither keeps its count. A checkpoint column that
/// is not an array (drifted) is emptied when cut. Returns each job's checkpoints
/// kept. `$1` job ids, `$2` max attempts (NULL: each job's own).
pub const RETRY_JOBS: &str = "\
UPDATE workflow_run
   SET status = 'QUEUED', attempt = 0, max_attempts = COALESCE($2::integer, max_attempts), releases = 0,
       reruns = CASE WHEN $3::text[] IS NULL THEN reruns ELSE reruns + 1 END,
       step_reruns = CASE WHEN $3::text[] IS NULL OR jsonb_typeof(checkpoints) <> 'array' THEN step_reruns
                          ELSE (SELECT COALESCE(array_agg(COALESCE(step_reruns[i], 0)
                                                          + CASE WHEN EXISTS (
                                                                   SELECT 1 FROM unnest($3::text[], $4::int[]) AS d(name, at)
                                                                    WHERE d.at = i
                                                                      AND (checkpoints @> jsonb_build_array(jsonb_build_object('name', d.name))
                                                                           OR EXISTS (SELECT 1 FROM workflow_run_items it
                                                                                       WHERE it.job_id = workflow_run.job_id AND it.step = d.name)
                                                                           OR EXISTS (SELECT 1 FROM workflow_run ch
                                                                                       WHERE ch.parent_job_id = workflow_run.job_id AND ch.parent_step = d.name)))
                                                                 THEN 1 ELSE 0 END
                                                          ORDER BY i), '{}')
                                  FROM generate_series(1, GREATEST(COALESCE(array_length(step_reruns, 1), 0),
                                                                   (SELECT COALESCE(max(at), 0) FROM unnest($4::int[]) AS at))) AS i) END,
       checkpoints = CASE WHEN $3::text[] IS NULL THEN checkpoints
                          WHEN jsonb_typeof(checkpoints) <> 'array' THEN '[]'::jsonb
                          ELSE (SELECT COALESCE(jsonb_agg(c.entry ORDER BY c.at), '[]'::jsonb)
                                  FROM jsonb_array_elements(checkpoints) WITH ORDINALITY AS c(entry, at)
                                 WHERE NOT COALESCE(c.entry ->> 'name' = ANY($3::text[]), false)) END,
       result = NULL, verdict = NULL, error = NULL, outstanding_step = NULL, outstanding_steps = NULL, waits = NULL, pending_request = NULL,
       cancel_requested = false, cancel_reason = NULL,
       run_after = now(), finished_at = NULL, updated_at = now()
 WHERE job_id = ANY($1) AND status IN ('DEAD', 'FAILED', 'CANCELLED', 'COMPLETED')
RETURNING job_id,
          CASE WHEN jsonb_typeof(checkpoints) = 'array' THEN jsonb_array_length(checkpoints) END AS kept";

/// The channel a cancel request of a RUNNING job notifies, with the job id as payload.
pub const LISTEN_CANCEL: &str = "LISTEN protomolt_jobs_cancel";

/// Tells the workers holding jobs, when the transaction commits, that an operator
/// asked to cancel them: one notification per job, its id the payload. `$1` job ids.
pub const NOTIFY_CANCEL: &str =
    "SELECT pg_notify('protomolt_jobs_cancel', id::text) FROM unnest($1::uuid[]) AS id";

/// Dead-lettered request records, newest first: `$1` limit, `$2` offset. The
/// payload's size only: the bytes were refused and say little to a reader.
pub const LIST_REJECTS: &str = "\
SELECT reject_id, topic, partition, record_offset, record_key,
       octet_length(payload) AS payload_bytes, error,
       to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS received_at
  FROM workflow_run_request_rejects
 ORDER BY reject_id DESC
 LIMIT $1 OFFSET $2";

/// `sleeping_until` beside a job's columns: when the first sleep it is parked on
/// ends (a live job, a sleep step without a checkpoint), else null.
macro_rules! sleeping_until {
    () => {
        "
   || jsonb_build_object('sleeping_until', CASE WHEN w.status IN ('QUEUED', 'WAITING') AND jsonb_typeof(w.waits) = 'array' THEN
        (SELECT timestamptz 'epoch' + min((p ->> 'untilMs')::bigint) * interval '1 millisecond'
           FROM jsonb_array_elements(w.waits) AS p
          WHERE p ->> 'kind' = 'sleep' AND jsonb_typeof(p -> 'untilMs') = 'number'
            AND NOT COALESCE(w.checkpoints @> jsonb_build_array(jsonb_build_object('name', p ->> 'step')), false)) END)"
    };
}

/// One job, every column, as JSON, with its workflow snapshot as
/// `workflow_definition` (the filed one the row names, or the copy a row written
/// before V21 still holds). `$1` job id.
pub const GET_JOB: &str = concat!(
    "SELECT to_jsonb(w) || jsonb_build_object('workflow_definition', COALESCE(w.workflow_definition, s.definition))",
    sleeping_until!(),
    "
  FROM workflow_run w LEFT JOIN workflow_snapshot s ON s.digest = w.definition_digest
 WHERE w.job_id = $1"
);

/// One job, every column but its workflow snapshot, as JSON: what `get-job` answers
/// unless the definition is asked for. `$1` job id.
pub const GET_JOB_WITHOUT_DEFINITION: &str = concat!(
    "SELECT (to_jsonb(w) - 'workflow_definition')",
    sleeping_until!(),
    " FROM workflow_run w WHERE job_id = $1"
);

/// Job summaries, without their order. `$1` status or NULL, `$2` workflow name or
/// NULL, `$3` limit, `$4` offset, `$5` created before and `$6` after (RFC 3339 text) or
/// NULL, `$7` the step a job is parked on or NULL, `$8` priority or NULL, `$9` and
/// `$10` the lowest and highest job id (a prefix of ids, as a primary-key range) or
/// NULL, `$11` and `$12` the creation time (RFC 3339 text) and id of the job the page
/// starts after (keyset paging), or NULL, `$13` the parent (only its children) or
/// NULL, `$14` the schedule that fired them or NULL, `$15` metadata every job holds
/// (`{key: value, ...}`, a containment the GIN index answers) or NULL.
macro_rules! list_jobs {
    ($order:literal, $after:literal) => {
        concat!(
            "\
SELECT json_build_object(
         'jobId', job_id, 'workflowName', workflow_name, 'status', status,
         'attempt', attempt, 'maxAttempts', max_attempts, 'outstandingStep', outstanding_step,
         'verdict', verdict, 'error', error, 'priority', priority, 'runAfter', run_after,
         'cancelRequested', cancel_requested,
         'createdAt', created_at, 'updatedAt', updated_at, 'finishedAt', finished_at,
         'scheduleName', schedule_name, 'scheduledFor', scheduled_for,
         'metadata', COALESCE(metadata, '{}'::jsonb))
  FROM workflow_run
 WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR workflow_name = $2)
   AND ($14::text IS NULL OR schedule_name = $14)
   AND ($15::jsonb IS NULL OR metadata @> $15::jsonb)
   AND ($5::text IS NULL OR created_at < $5::text::timestamptz)
   AND ($6::text IS NULL OR created_at > $6::text::timestamptz)
   AND ($7::text IS NULL OR outstanding_step = $7 OR $7 = ANY(outstanding_steps))
   AND ($8::smallint IS NULL OR priority = $8)
   AND ($9::uuid IS NULL OR job_id BETWEEN $9 AND $10)
   AND ($13::uuid IS NULL OR parent_job_id = $13)
   AND ($11::text IS NULL OR (created_at, job_id) ",
            $after,
            " ($11::text::timestamptz, $12::uuid))
 ORDER BY ",
            $order,
            "
 LIMIT $3 OFFSET $4"
        )
    };
}

/// Job summaries newest first (parameters as for `list_jobs!`).
pub const LIST_JOBS_NEWEST: &str = list_jobs!("created_at DESC, job_id DESC", "<");

/// Job summaries oldest first, as a review inbox reads them (parameters as for
/// `list_jobs!`).
pub const LIST_JOBS_OLDEST: &str = list_jobs!("created_at, job_id", ">");

/// Jobs that finished in the last hour, by status (the console's fleet page; from
/// the `workflow_run_finished` index).
pub const FINISHED_LAST_HOUR: &str = "\
SELECT status, count(*) FROM workflow_run
 WHERE status IN ('COMPLETED', 'FAILED', 'DEAD', 'CANCELLED')
   AND finished_at > now() - interval '1 hour'
 GROUP BY status";

/// Jobs finished in the last hour per minute (Unix minutes): COMPLETED, and FAILED or
/// DEAD, for the console's charts.
pub const FINISHED_PER_MINUTE: &str = "\
SELECT floor(extract(epoch FROM finished_at) / 60)::bigint AS minute,
       count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
       count(*) FILTER (WHERE status IN ('FAILED', 'DEAD')) AS failed
  FROM workflow_run
 WHERE status IN ('COMPLETED', 'FAILED', 'DEAD', 'CANCELLED')
   AND finished_at > now() - interval '1 hour'
 GROUP BY 1";

/// A job's outbox rows in order (operators and tests). `$1` job id.
pub const JOB_EVENTS: &str = "\
SELECT event_id, event_type, payload, status FROM workflow_run_events_outbox WHERE job_id = $1 ORDER BY seq";

/// The events of watched jobs after the positions their watchers have seen: `$1`
/// job ids, `$2` the position after which each job's events are wanted, `$3` the
/// most rows per job (so one long history never crowds out the others). One
/// `outbox_by_job` range per job.
pub const EVENTS_AFTER: &str = "\
SELECT o.job_id, o.event_id, o.seq, o.event_type, o.payload
  FROM unnest($1::uuid[], $2::bigint[]) AS w(job_id, after),
       LATERAL (SELECT job_id, event_id, seq, event_type, payload
                  FROM workflow_run_events_outbox
                 WHERE job_id = w.job_id AND seq > w.after
                 ORDER BY seq
                 LIMIT $3) AS o";

/// The position of one of a job's events. `$1` job id, `$2` event id.
pub const EVENT_POSITION: &str = "\
SELECT seq FROM workflow_run_events_outbox WHERE job_id = $1 AND event_id = $2";

/// The position of a job's latest event, 0 without one. `$1` job id.
pub const LATEST_EVENT_POSITION: &str = "\
SELECT COALESCE(max(seq), 0)::bigint FROM workflow_run_events_outbox WHERE job_id = $1";

/// Live jobs by status and workflow (metrics): one `workflow_run_by_status` range per
/// live status, index-only (the index carries `workflow_name`, migration V17).
pub const LIVE_JOBS: &str = "\
SELECT status, workflow_name, count(*) FROM workflow_run
 WHERE status IN ('QUEUED', 'RUNNING', 'WAITING')
 GROUP BY status, workflow_name";

/// WAITING jobs by workflow and step (metrics).
pub const WAITING_BY_STEP: &str = "\
SELECT workflow_name, outstanding_step, count(*) FROM workflow_run
 WHERE status = 'WAITING'
 GROUP BY workflow_name, outstanding_step";

/// Parked jobs by what they wait for: WAITING ones by the kind of the wait that ends
/// first (`external` for rows parked before V24), and QUEUED ones asleep until a
/// later `run_after` (every wait a sleep).
pub const PARKED_BY_KIND: &str = "\
SELECT COALESCE(waits -> 0 ->> 'kind', 'external') AS kind, count(*) FROM workflow_run
 WHERE status = 'WAITING'
 GROUP BY 1
UNION ALL
SELECT 'sleep', count(*) FROM workflow_run
 WHERE status = 'QUEUED' AND run_after > now() AND jsonb_typeof(waits) = 'array' AND error IS NULL";

/// Seconds since the oldest QUEUED job without concurrency keys claimable now became
/// claimable (0 without one): the first entry of each priority's range of the claim
/// index `workflow_run_eligible_unkeyed`. (A keyed job may wait on its key's limit by
/// design; `get-fleet`'s keys and the `concurrency_keys` metric tell those.)
pub const OLDEST_CLAIMABLE: &str = "\
SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(first.run_after)), 0)::float8
  FROM generate_series(0, 9) AS level(priority),
       LATERAL (SELECT run_after FROM workflow_run
                 WHERE status = 'QUEUED' AND concurrency_keys IS NULL AND priority = level.priority
                   AND run_after <= now()
                 ORDER BY run_after
                 LIMIT 1) AS first";

/// The outbox's depth by status and the age of its oldest PENDING row, in seconds
/// (metrics; each from its partial index).
pub const OUTBOX_DEPTH: &str = "\
SELECT (SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'PENDING') AS pending,
       (SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'HELD') AS held,
       (SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'FAILED') AS failed,
       COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(created_at))
                   FROM workflow_run_events_outbox WHERE status = 'PENDING'), 0)::float8 AS oldest_pending";

/// How many jobs are in a status (operators, metrics, tests). `$1` status.
pub const COUNT_JOBS_IN_STATUS: &str = "SELECT count(*) FROM workflow_run WHERE status = $1";
