-- Whether a job was submitted by the name of a stored workflow (issue 37). A retry
-- with workflow "current" moves a job onto the workflow stored under its name now;
-- only a job that came from a stored workflow may move, because an inline workflow
-- may carry any name, and a job of it moved onto a stored workflow would pass the
-- results of its own targets off as the stored workflow's steps. NULL: written before
-- V31, not known, so never moved.
ALTER TABLE workflow_run ADD COLUMN submitted_by_name boolean;
COMMENT ON COLUMN workflow_run.submitted_by_name IS 'True when the job was submitted by a stored workflow''s name (NULL: before V31): only such a job moves onto the current stored workflow (retry-job workflow "current").';
