//! The statements of map steps' elements (migration V23): written as each call ends,
//! read back when a claim resumes the job, paged by `get-job-items`, dropped when an
//! operator re-runs their step.

/// Stores elements of one map step under a claim, fenced as every write after a
/// claim is (`$1` job id, `$2` owner, `$3` fencing token), the row locked so no sweep
/// or other claim moves it on meanwhile; storing elements is progress, so the row's
/// release count starts over (updated only when it is not 0 already: no new row
/// version per write). An element already stored is
/// kept as it is, so a write sent twice lands once. `$4` the step, `$5` the
/// elements' positions, `$6` their responses and `$7` their errors (one of the two
/// set per element).
pub const INSERT_ITEMS: &str = "\
WITH held AS (
    SELECT job_id, releases FROM workflow_run
     WHERE job_id = $1 AND status = 'RUNNING' AND lease_owner = $2 AND claims = $3
       FOR NO KEY UPDATE),
     progress AS (
    UPDATE workflow_run SET releases = 0
     WHERE job_id IN (SELECT job_id FROM held WHERE releases <> 0))
INSERT INTO workflow_run_items (job_id, step, item, response, error)
SELECT held.job_id, $4::text, u.item, u.response, u.error
  FROM held, unnest($5::int[], $6::jsonb[], $7::text[]) AS u(item, response, error)
ON CONFLICT (job_id, step, item) DO NOTHING";

/// The stored elements of a job's map steps that have no checkpoint yet, for the
/// claim that resumes it. `$1` job id, `$2` the steps.
pub const JOB_ITEMS: &str = "\
SELECT step, item, response, error FROM workflow_run_items
 WHERE job_id = $1 AND step = ANY($2::text[])
 ORDER BY step, item";

/// One page of a map step's stored elements, by position. `$1` job id, `$2` the
/// step, `$3` offset, `$4` limit.
pub const JOB_ITEMS_PAGE: &str = "\
SELECT item, response, error FROM workflow_run_items
 WHERE job_id = $1 AND step = $2 AND item >= $3
 ORDER BY item
 LIMIT $4";

/// How many elements of each of a job's map steps are stored: answered and failed.
/// `$1` job id.
pub const JOB_ITEM_COUNTS: &str = "\
SELECT step, count(response) AS answered, count(error) AS failed
  FROM workflow_run_items WHERE job_id = $1 GROUP BY step";

/// Drops the stored elements of the steps an operator's retry re-runs. `$1` job ids,
/// `$2` the steps.
pub const DROP_ITEMS: &str =
    "DELETE FROM workflow_run_items WHERE job_id = ANY($1) AND step = ANY($2::text[])";

/// The digest a job's row names its workflow snapshot by (computed, as
/// `JOB_DEFINITION` does, for a row written before V8). `$1` job id.
pub const JOB_DIGEST: &str = "\
SELECT COALESCE(definition_digest, encode(sha256(convert_to(workflow_definition::text, 'UTF8')), 'hex'))
  FROM workflow_run WHERE job_id = $1";
