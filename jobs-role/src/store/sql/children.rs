//! The statements of child workflows: starting a parent's children, fenced on the
//! parent's claim, and reading a parent's children.

/// Holds a parent's claim for the transaction that starts its children (a lost claim
/// starts none), answering the root of its tree. `$1` job id, `$2` owner, `$3` token.
pub const HOLD_PARENT: &str = "\
SELECT COALESCE(root_job_id, job_id) AS root_job_id FROM workflow_run
 WHERE job_id = $1 AND status = 'RUNNING' AND lease_owner = $2 AND claims = $3 AND NOT cancel_requested
   FOR SHARE";

/// Names the parent of children just inserted (or found: the same ids, the same
/// values). `$1` child ids, `$2` their elements, `$3` parent, `$4` root, `$5` the
/// parent's step.
pub const LINK_CHILDREN: &str = "\
UPDATE workflow_run w SET parent_job_id = $3, root_job_id = $4, parent_step = $5, parent_item = u.item
  FROM unnest($1::uuid[], $2::int[]) AS u(job_id, item)
 WHERE w.job_id = u.job_id AND w.parent_job_id IS NULL";

/// A parent's children, by step and element, a page of them. `$1` parent, `$2`
/// limit, `$3` offset.
pub const CHILDREN_OF: &str = "\
SELECT job_id, workflow_name, status, parent_step, parent_item FROM workflow_run
 WHERE parent_job_id = $1
 ORDER BY parent_step, parent_item, created_at
 LIMIT $2 OFFSET $3";

/// How many children a parent has. `$1` parent.
pub const CHILD_COUNT: &str = "SELECT count(*) FROM workflow_run WHERE parent_job_id = $1";

/// The live descendants of a job, deepest first (children before their parents, so
/// cancelling them in this order never waits on a parent's lock a child's end
/// holds). `$1` the job.
pub const LIVE_DESCENDANTS: &str = "\
WITH RECURSIVE tree(job_id, depth) AS (
    SELECT job_id, 1 FROM workflow_run WHERE parent_job_id = $1
  UNION ALL
    SELECT w.job_id, tree.depth + 1 FROM workflow_run w JOIN tree ON w.parent_job_id = tree.job_id
     WHERE tree.depth < 16
)
SELECT w.job_id FROM tree JOIN workflow_run w USING (job_id)
 WHERE w.status IN ('QUEUED', 'RUNNING', 'WAITING')
 ORDER BY tree.depth DESC, w.job_id";

/// Of the jobs `$1`, those with children.
pub const PARENTS_AMONG: &str =
    "SELECT DISTINCT parent_job_id FROM workflow_run WHERE parent_job_id = ANY($1)";

/// Forgets, for the parents `$1` an operator retries, the slots their children did
/// not complete in steps the parents have not finished (so the parents wait on them
/// again), answering those children (which the retry re-queues as well: a retried
/// parent re-runs only its failed children). Run before the parents are re-queued.
pub const FORGET_FAILED_CHILDREN: &str = "\
DELETE FROM workflow_run_items i USING workflow_run c, workflow_run p
 WHERE i.job_id = ANY($1) AND i.error IS NOT NULL
   AND p.job_id = i.job_id
   AND NOT COALESCE(p.checkpoints @> jsonb_build_array(jsonb_build_object('name', i.step)), false)
   AND c.parent_job_id = i.job_id AND c.parent_step = i.step AND c.parent_item = i.item
   AND c.status <> 'COMPLETED'
RETURNING c.job_id, c.workflow_name, c.status, c.metadata";

/// Detaches the children of the parents `$1`'s steps `$2` (a retry from a step
/// re-runs them with new children): a detached child runs on, but its end no longer
/// answers the parent.
pub const DETACH_CHILDREN: &str = "\
UPDATE workflow_run SET parent_job_id = NULL, updated_at = now()
 WHERE parent_job_id = ANY($1) AND parent_step = ANY($2::text[])";

/// Of the children ids `$1`, those that exist, with their parent (NULL for a job not
/// started as a child).
pub const EXISTING_CHILDREN: &str =
    "SELECT job_id, parent_job_id FROM workflow_run WHERE job_id = ANY($1)";
