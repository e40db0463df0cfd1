-- The claim answers a digest of the workflow snapshot instead of the snapshot itself:
-- a worker that has the workflow compiled already (the common case) never has the
-- envelope, descriptor set and all, rendered, sent and parsed again per job. Measured
-- with the bench (one-step jobs): rendering the snapshot as text was the largest single
-- cost of a claim in PostgreSQL.
--
-- The digest is the SHA-256 of the snapshot's jsonb text, set by the insert. Rows
-- written before this migration have none: the claim computes theirs on the fly.
ALTER TABLE workflow_run ADD COLUMN definition_digest text;
