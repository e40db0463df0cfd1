//! Retention's statements: the pruner's lock, and the deletes of finished jobs (with
//! the record of their ids), published events, remembered ids and rejected records.

/// Takes the pruner's lock for the transaction, answering whether it was free: one
/// node prunes at a time, and the others skip their round.
pub const TRY_LOCK_PRUNER: &str = "SELECT pg_try_advisory_xact_lock(123615239430772)";

/// The pruner's bound on waiting for a row lock (the relay publishing one of a job's
/// events): past it the batch fails and the next round tries again.
pub const PRUNE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '2s'";

/// Up to `$3` jobs in `$1` (a finished status) that finished more than `$2`
/// milliseconds ago, oldest first, locked, skipping rows another transaction holds (a
/// retry-job, a cancel). A job whose events are not all out is never a candidate:
/// with `$4` (the Kafka lanes on) every outbox row must be PUBLISHED; without, only a
/// dead-lettered (FAILED) or HELD row keeps it (nothing is ever published then).
pub const PRUNABLE_JOBS: &str = "\
SELECT w.job_id FROM workflow_run w
 WHERE w.status = $1
   AND w.finished_at < now() - $2::bigint * interval '1 millisecond'
   AND NOT EXISTS (SELECT 1 FROM workflow_run_events_outbox o
                    WHERE o.job_id = w.job_id
                      AND (o.status IN ('FAILED', 'HELD') OR ($4 AND o.status <> 'PUBLISHED')))
 ORDER BY w.finished_at
 LIMIT $3
 FOR UPDATE SKIP LOCKED";

/// Locks the outbox rows of the jobs about to be deleted (`$1` job ids), waiting for a
/// relay that holds one, so the delete's re-check sees what that relay committed.
pub const LOCK_PRUNABLE_EVENTS: &str = "\
SELECT 1 FROM workflow_run_events_outbox WHERE job_id = ANY($1) FOR UPDATE";

/// Deletes the locked jobs (`$1` ids) with their outbox rows (the foreign key
/// cascades), checking their events again now that they are locked: a row the relay
/// dead-lettered or an operator redrove meanwhile keeps its job. Each id deleted is
/// recorded in `workflow_run_pruned`, so a replay of its submission never runs it
/// again (migration V19). `$2` as in [`PRUNABLE_JOBS`]'s `$4`.
pub const PRUNE_JOBS: &str = "\
WITH deleted AS (
    DELETE FROM workflow_run w
     WHERE w.job_id = ANY($1)
       AND NOT EXISTS (SELECT 1 FROM workflow_run_events_outbox o
                        WHERE o.job_id = w.job_id
                          AND (o.status IN ('FAILED', 'HELD') OR ($2 AND o.status <> 'PUBLISHED')))
    RETURNING w.job_id)
INSERT INTO workflow_run_pruned (job_id)
SELECT job_id FROM deleted
ON CONFLICT (job_id) DO UPDATE SET pruned_at = now()";

/// Forgets up to `$2` pruned ids recorded more than `$1` milliseconds ago, oldest
/// first.
pub const PRUNE_PRUNED_IDS: &str = "\
DELETE FROM workflow_run_pruned
 WHERE job_id = ANY(ARRAY(SELECT job_id FROM workflow_run_pruned
                           WHERE pruned_at < now() - $1::bigint * interval '1 millisecond'
                           ORDER BY pruned_at
                           LIMIT $2))";

/// Deletes up to `$2` dead-lettered request records received more than `$1`
/// milliseconds ago, oldest first.
pub const PRUNE_REQUEST_REJECTS: &str = "\
DELETE FROM workflow_run_request_rejects
 WHERE reject_id = ANY(ARRAY(SELECT reject_id FROM workflow_run_request_rejects
                              WHERE received_at < now() - $1::bigint * interval '1 millisecond'
                              ORDER BY received_at
                              LIMIT $2))";

/// Deletes up to `$2` PUBLISHED outbox rows published more than `$1` milliseconds
/// ago, oldest first (their jobs stay).
pub const PRUNE_PUBLISHED_EVENTS: &str = "\
DELETE FROM workflow_run_events_outbox
 WHERE event_id = ANY(ARRAY(SELECT event_id FROM workflow_run_events_outbox
                             WHERE status = 'PUBLISHED'
                               AND published_at < now() - $1::bigint * interval '1 millisecond'
                             ORDER BY published_at
                             LIMIT $2
                             FOR UPDATE SKIP LOCKED))
   AND status = 'PUBLISHED'";
