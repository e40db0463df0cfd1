-- Job metadata (issue 36): a submission's own attributes, a map of string to string
-- (at most 32 entries; keys [a-z0-9_.-]{1,64}, values up to 512 bytes, checked by the
-- node), stored with the job (NULL when none), shown by get-job and filterable by
-- equality on one or more keys (list-jobs metadata: {...}, a containment @> that the
-- GIN index below answers: never a scan of the table).
ALTER TABLE workflow_run ADD COLUMN metadata jsonb;
COMMENT ON COLUMN workflow_run.metadata IS 'The submission''s metadata, {key: value} strings (NULL: none): get-job shows it, list-jobs filters by it.';

CREATE INDEX workflow_run_metadata ON workflow_run USING gin (metadata jsonb_path_ops)
    WHERE metadata IS NOT NULL;
