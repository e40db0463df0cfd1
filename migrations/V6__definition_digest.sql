-- The claim answers a digest of the workflow snapshot instead of the snapshot itself:
-- a worker that has the workflow compiled already (the common case) never has the
-- envelope, descriptor set and all, rendered, sent and parsed again per job. Measured
-- with the bench (one-step jobs): rendering the snapshot as text was the largest single
-- cost of a claim in PostgreSQL.
--
-- The digest is the SHA-256 of the snapshot's jsonb text, kept by a trigger on every
-- insert and on every change of the snapshot (an operator's repair included), so a
-- worker's cache can never run a job with a workflow other than its own snapshot.
-- Rows written before this migration have none: the claim computes theirs on the fly.
ALTER TABLE workflow_run ADD COLUMN definition_digest text;

CREATE FUNCTION workflow_run_definition_digest() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.definition_digest := encode(sha256(convert_to(NEW.workflow_definition::text, 'UTF8')), 'hex');
    RETURN NEW;
END
$$;

CREATE TRIGGER workflow_run_definition_digest
    BEFORE INSERT OR UPDATE OF workflow_definition ON workflow_run
    FOR EACH ROW EXECUTE FUNCTION workflow_run_definition_digest();
