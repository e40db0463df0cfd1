//! Every SQL statement of the jobs role, named. Nothing else in the workspace builds SQL.

/// Serialises migrations across nodes starting together (session-level advisory lock;
/// the key is the ASCII bytes of "pmjobs").
pub const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_lock(123615239430771)";

/// Releases [`LOCK_MIGRATIONS`].
pub const UNLOCK_MIGRATIONS: &str = "SELECT pg_advisory_unlock(123615239430771)";

/// The whole claim in one statement: the sub-select finds the oldest eligible QUEUED
/// row and locks it, skipping rows other workers hold; the update flips it to RUNNING
/// under that lock, stamps the lease and increments `attempt`.
///
/// Parameters: `$1` lease owner (worker id), `$2` lease length in milliseconds.
pub const CLAIM_NEXT_JOB: &str = "\
UPDATE workflow_run
   SET status = 'RUNNING', lease_owner = $1,
       lease_until = now() + $2::bigint * interval '1 millisecond',
       attempt = attempt + 1, updated_at = now()
 WHERE job_id = (SELECT job_id FROM workflow_run
                  WHERE status = 'QUEUED' AND run_after <= now()
                  ORDER BY created_at
                  FOR UPDATE SKIP LOCKED
                  LIMIT 1)
RETURNING job_id, workflow_name, workflow_definition, input, attempt, max_attempts,
          checkpoints, lease_until";
