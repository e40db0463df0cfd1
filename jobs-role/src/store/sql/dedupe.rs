//! Deduplicated submissions (migration V28): the key's lock, and the job that stands
//! for a submission in each mode.

/// Takes the dedupe key `$1`'s lock for the transaction: submissions of one key are
/// decided one after the other.
pub const LOCK_DEDUPE_KEY: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('protomolt-dedupe:' || $1, 0))";

/// Whether job `$1` exists (a submission sent again is answered as one, not deduped).
pub const JOB_EXISTS: &str = "SELECT 1 FROM workflow_run WHERE job_id = $1";

/// The job that stood for submission `$1` when it was deduplicated before, with its
/// status now (no row: never deduplicated, or that job was deleted since).
pub const EARLIER_DEDUPE_ANSWER: &str = "\
SELECT w.job_id, w.status FROM workflow_dedupe_answers a JOIN workflow_run w ON w.job_id = a.stands_for
 WHERE a.job_id = $1";

/// Records that job `$2` stood for submission `$1`.
pub const RECORD_DEDUPE_ANSWER: &str = "\
INSERT INTO workflow_dedupe_answers (job_id, stands_for) VALUES ($1, $2) ON CONFLICT (job_id) DO NOTHING";

/// Deletes the dedupe answers older than `$1` milliseconds, at most `$2`; answers how
/// many.
pub const PRUNE_DEDUPE_ANSWERS: &str = "\
DELETE FROM workflow_dedupe_answers
 WHERE job_id IN (SELECT job_id FROM workflow_dedupe_answers
                   WHERE answered_at < now() - $1::bigint * interval '1 millisecond'
                   ORDER BY answered_at LIMIT $2)";

/// `singleton`: the newest job of key `$1` still QUEUED, RUNNING or WAITING.
pub const LIVE_DEDUPED_JOB: &str = "\
SELECT job_id, status FROM workflow_run
 WHERE dedupe_key = $1 AND status IN ('QUEUED', 'RUNNING', 'WAITING')
 ORDER BY created_at DESC LIMIT 1";

/// `debounce`: the newest job of key `$1` still QUEUED and never claimed, of the same
/// snapshot (`$4` its digest) and the same concurrency keys (`$5`: the new input's;
/// a job never runs under another input's keys), takes input `$2` and starts `$3`
/// milliseconds from now. A job a claim holds is skipped (it starts with the input it
/// has).
pub const DEBOUNCE_JOB: &str = "\
UPDATE workflow_run SET input = $2, run_after = now() + $3::bigint * interval '1 millisecond', updated_at = now()
 WHERE job_id = (SELECT job_id FROM workflow_run
                  WHERE dedupe_key = $1 AND status = 'QUEUED' AND claims = 0
                    AND definition_digest IS NOT DISTINCT FROM $4::text
                    AND concurrency_keys IS NOT DISTINCT FROM $5::text[]
                  ORDER BY created_at DESC LIMIT 1
                  FOR UPDATE SKIP LOCKED)
   AND status = 'QUEUED'
RETURNING job_id, status";

/// `throttle`: the newest job of key `$1` made within the last `$2` milliseconds and
/// not cancelled (a cancelled job does not run for anyone).
pub const THROTTLING_JOB: &str = "\
SELECT job_id, status FROM workflow_run
 WHERE dedupe_key = $1 AND created_at > now() - $2::bigint * interval '1 millisecond'
   AND status <> 'CANCELLED'
 ORDER BY created_at DESC LIMIT 1";
