-- Child workflows (issue 33): a step `"workflow": "name"` starts a child job (one per
-- element with forEach) and parks its parent until the child ends.
--
-- A child row names its parent (`parent_job_id`), the root of its tree
-- (`root_job_id`), and the slot it fills: the parent's step and the element's
-- position (`parent_step`, `parent_item`). Its id is derived from (parent, step,
-- element, the step's re-run count), so a crash can never make two children for
-- one slot. Adding nullable columns rewrites no row; `child_ends` has a constant
-- default, which PostgreSQL 11+ stores without a rewrite too.
ALTER TABLE workflow_run ADD COLUMN parent_job_id uuid;
ALTER TABLE workflow_run ADD COLUMN root_job_id uuid;
ALTER TABLE workflow_run ADD COLUMN parent_step text;
ALTER TABLE workflow_run ADD COLUMN parent_item integer;
ALTER TABLE workflow_run ADD COLUMN child_ends bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN workflow_run.parent_job_id IS 'The job whose child step started this one (NULL for a job submitted directly).';
COMMENT ON COLUMN workflow_run.root_job_id IS 'The first job of the tree this one belongs to (NULL for a job submitted directly).';
COMMENT ON COLUMN workflow_run.parent_step IS 'The parent''s step this child answers.';
COMMENT ON COLUMN workflow_run.parent_item IS 'The element of the parent''s step this child answers (0 without forEach).';
COMMENT ON COLUMN workflow_run.child_ends IS 'How many of this job''s children have ended: a park that read an older count resumes at once.';

CREATE INDEX workflow_run_by_parent ON workflow_run (parent_job_id, parent_step, parent_item)
    WHERE parent_job_id IS NOT NULL;

-- A child that ends (any terminal status, by whatever statement: a settlement, a
-- timeout, a cancel, an operator's act) answers its slot of the parent: its result,
-- or why it did not complete, as the parent's element row (V23's
-- workflow_run_items), written again if a retried child ends again. The parent,
-- locked first (a child's end and the parent's park are ordered on the parent's row),
-- counts the end; a WAITING parent is requeued at once (its park gave its attempt
-- back), so it starts the next children or goes on; a RUNNING one sees the new
-- count when it parks and resumes instead of waiting.
CREATE FUNCTION workflow_run_child_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent_status text;
BEGIN
    SELECT status INTO parent_status FROM workflow_run WHERE job_id = NEW.parent_job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO workflow_run_items (job_id, step, item, response, error)
    VALUES (NEW.parent_job_id, NEW.parent_step, NEW.parent_item,
            CASE WHEN NEW.status = 'COMPLETED' THEN COALESCE(NEW.result, '{}'::jsonb) END,
            CASE WHEN NEW.status <> 'COMPLETED'
                 THEN 'workflow ''' || NEW.workflow_name || ''' job ' || NEW.job_id || ' ended '
                      || NEW.status || COALESCE(': ' || NEW.error, '') END)
    ON CONFLICT (job_id, step, item) DO UPDATE SET response = EXCLUDED.response, error = EXCLUDED.error;
    UPDATE workflow_run
       SET child_ends = child_ends + 1,
           status = CASE WHEN status = 'WAITING' THEN 'QUEUED' ELSE status END,
           attempt = CASE WHEN status = 'WAITING' THEN attempt - 1 ELSE attempt END,
           run_after = CASE WHEN status = 'WAITING' THEN now() ELSE run_after END,
           outstanding_step = CASE WHEN status = 'WAITING' THEN NULL ELSE outstanding_step END,
           outstanding_steps = CASE WHEN status = 'WAITING' THEN NULL ELSE outstanding_steps END,
           pending_request = CASE WHEN status = 'WAITING' THEN NULL ELSE pending_request END,
           wait_until = CASE WHEN status = 'WAITING' THEN NULL ELSE wait_until END,
           wait_timeout_ms = CASE WHEN status = 'WAITING' THEN NULL ELSE wait_timeout_ms END,
           on_timeout = CASE WHEN status = 'WAITING' THEN NULL ELSE on_timeout END,
           updated_at = now()
     WHERE job_id = NEW.parent_job_id;
    IF parent_status = 'WAITING' THEN
        PERFORM pg_notify('protomolt_jobs_queued', NEW.parent_job_id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_run_child_ended
    AFTER UPDATE OF status ON workflow_run
    FOR EACH ROW
    WHEN (NEW.parent_job_id IS NOT NULL
          AND NEW.status IN ('COMPLETED', 'FAILED', 'DEAD', 'CANCELLED')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION workflow_run_child_ended();
