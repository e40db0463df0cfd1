-- The metrics' live counts by status and workflow (V15's live-by-workflow index) cost
-- one more index entry for every status change of a live job, and throughput paid for
-- it (docs/benchmarks.md). They now come from workflow_run_by_status instead, which
-- every status change writes anyway: it carries workflow_name as an INCLUDE column, so
-- the counts stay index-only scans of the live statuses' ranges. The waiting-by-step
-- index stays: it is written only for WAITING rows.
-- (Built in the migration's transaction: on a large table the build holds writes for
-- its duration.)
CREATE INDEX workflow_run_by_status_with_name
    ON workflow_run (status, created_at DESC, job_id DESC) INCLUDE (workflow_name);
DROP INDEX workflow_run_by_status;
ALTER INDEX workflow_run_by_status_with_name RENAME TO workflow_run_by_status;
DROP INDEX workflow_run_live_by_workflow;
