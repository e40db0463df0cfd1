//! Deduplicated submissions (migration V28): the key's lock, and the job that stands
//! for a submission in each mode.

/// Takes the dedupe key `$1`'s lock for the transaction: submissions of one key are
/// decided one after the other.
pub const LOCK_DEDUPE_KEY: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('protomolt-dedupe:' || $1, 0))";

/// Whether job `$1` exists (a submission sent again is answered as one, not deduped).
pub const JOB_EXISTS: &str = "SELECT 1 FROM workflow_run WHERE job_id = $1";

/// `singleton`: the newest job of key `$1` still QUEUED, RUNNING or WAITING.
pub const LIVE_DEDUPED_JOB: &str = "\
SELECT job_id, status FROM workflow_run
 WHERE dedupe_key = $1 AND status IN ('QUEUED', 'RUNNING', 'WAITING')
 ORDER BY created_at DESC LIMIT 1";

/// `debounce`: the newest job of key `$1` still QUEUED and never claimed, of the same
/// snapshot (`$4` its digest), takes input `$2` and starts `$3` milliseconds from now.
/// A job a claim holds is skipped (it starts with the input it has).
pub const DEBOUNCE_JOB: &str = "\
UPDATE workflow_run SET input = $2, run_after = now() + $3::bigint * interval '1 millisecond', updated_at = now()
 WHERE job_id = (SELECT job_id FROM workflow_run
                  WHERE dedupe_key = $1 AND status = 'QUEUED' AND claims = 0
                    AND definition_digest IS NOT DISTINCT FROM $4::text
                  ORDER BY created_at DESC LIMIT 1
                  FOR UPDATE SKIP LOCKED)
   AND status = 'QUEUED'
RETURNING job_id, status";

/// `throttle`: the newest job of key `$1` made within the last `$2` milliseconds.
pub const THROTTLING_JOB: &str = "\
SELECT job_id, status FROM workflow_run
 WHERE dedupe_key = $1 AND created_at > now() - $2::bigint * interval '1 millisecond'
 ORDER BY created_at DESC LIMIT 1";
