-- The metrics count live jobs by status and workflow, and WAITING jobs by step, every
-- few seconds. These partial indexes hold only live rows (a small set next to the
-- history), so the counts are index-only scans instead of walks of the whole table.
CREATE INDEX workflow_run_live_by_workflow ON workflow_run (status, workflow_name)
    WHERE status IN ('QUEUED', 'RUNNING', 'WAITING');
CREATE INDEX workflow_run_waiting_by_step ON workflow_run (workflow_name, outstanding_step)
    WHERE status = 'WAITING';
