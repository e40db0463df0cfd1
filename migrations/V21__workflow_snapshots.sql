-- Each workflow snapshot is stored once, in `workflow_snapshot`, keyed by its digest;
-- a job row names its snapshot by that digest (`definition_digest`) instead of
-- holding a copy. With the bench's 100 KB envelope, the copy was ~40 KB of
-- compressed TOAST per job, identical across every job of one workflow version.
--
-- The seed's rule stands: a workflow edited later never shifts a live job. A
-- snapshot row never changes (a trigger refuses an UPDATE), so the snapshot a job
-- runs is the one it was submitted with, found from its row; the foreign key makes
-- a row that names no stored snapshot impossible.
--
-- Digests keep V8's rules: the node's own (`sha256-compact:` + the SHA-256 of its
-- compact JSON text) is kept only in a transaction that says it comes from the node
-- (`protomolt.digest_from_node`); any other snapshot gets the bare hex SHA-256 of its
-- jsonb text, computed here. So no one can file a snapshot under a digest that does
-- not describe it, and a digest found in a row always names that row's snapshot.
--
-- Rows written the old way (an operator's INSERT or UPDATE of `workflow_definition`,
-- a restored dump, the rows already here) still work: the trigger of the job table
-- files the definition as a snapshot and keeps only its digest. The rows already here
-- are moved by the node in the background, in batches (`snapshot_mover.rs`: it sets
-- their copy to NULL, and the trigger files it), without a long lock; until then the
-- readers take the copy in the row when there is one. The
-- foreign key is added NOT VALID (checked for new and changed rows only) and
-- validated by the node once the move is done.
--
-- Nodes of the previous version must be stopped before this migration: they read the
-- snapshot from the row, which no longer holds it.
--
-- Snapshots no job references are deleted by the retention pruner. A submission holds
-- a shared advisory lock (key 123615239430773) from before it files its snapshot to
-- its commit, and the pruner deletes only under the exclusive one, so a snapshot is
-- never deleted between a submission finding it filed and its job row naming it.

CREATE TABLE workflow_snapshot (
    digest     text PRIMARY KEY,
    definition jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE workflow_snapshot ALTER COLUMN definition SET COMPRESSION lz4;

CREATE FUNCTION workflow_snapshot_filed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'workflow snapshot % never changes: jobs run the snapshot they were submitted with (file a new one instead)', OLD.digest
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.digest IS NOT NULL AND current_setting('protomolt.digest_from_node', true) = 'on' THEN
        RETURN NEW;
    END IF;
    NEW.digest := encode(sha256(convert_to(NEW.definition::text, 'UTF8')), 'hex');
    RETURN NEW;
END
$$;

CREATE TRIGGER workflow_snapshot_filed
    BEFORE INSERT OR UPDATE ON workflow_snapshot
    FOR EACH ROW EXECUTE FUNCTION workflow_snapshot_filed();

ALTER TABLE workflow_run ALTER COLUMN workflow_definition DROP NOT NULL;
-- A row names its snapshot, or (written before V21, not yet moved) holds it.
ALTER TABLE workflow_run ADD CONSTRAINT workflow_run_has_a_snapshot
    CHECK (workflow_definition IS NOT NULL OR definition_digest IS NOT NULL);

-- A row that comes with its definition (an operator's INSERT or UPDATE of it, a
-- restored dump) has it filed as a snapshot and keeps only the digest; so does a row
-- written before V21 whose copy is set to NULL (how the mover moves it: filed under
-- the digest of its own content, never the digest the row claimed). The snapshot
-- filed under that digest must be this definition: a different one (filed there by
-- someone claiming to be the node) is refused, never silently taken.
CREATE OR REPLACE FUNCTION workflow_run_definition_digest() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    filed_definition jsonb := NEW.workflow_definition;
BEGIN
    IF filed_definition IS NULL THEN
        IF TG_OP = 'INSERT' THEN
            RETURN NEW;
        END IF;
        IF OLD.workflow_definition IS NULL THEN
            RAISE EXCEPTION 'job %: workflow_definition is not kept in the row since migration V21 (it reads NULL): to change the job''s snapshot, write the whole definition, e.g. SET workflow_definition = jsonb_set((SELECT definition FROM workflow_snapshot WHERE digest = definition_digest), ...)', NEW.job_id
                USING ERRCODE = 'not_null_violation';
        END IF;
        filed_definition := OLD.workflow_definition;
        NEW.definition_digest := NULL;
    END IF;
    -- (An unset setting reads NULL: coalesced, so it never counts as the node's word.)
    IF NOT (TG_OP = 'INSERT' AND NEW.definition_digest IS NOT NULL
            AND coalesce(current_setting('protomolt.digest_from_node', true), '') = 'on') THEN
        NEW.definition_digest := encode(sha256(convert_to(filed_definition::text, 'UTF8')), 'hex');
    END IF;
    PERFORM pg_advisory_xact_lock_shared(123615239430773);
    INSERT INTO workflow_snapshot (digest, definition)
    VALUES (NEW.definition_digest, filed_definition)
    ON CONFLICT (digest) DO NOTHING;
    IF NOT EXISTS (SELECT 1 FROM workflow_snapshot
                    WHERE digest = NEW.definition_digest AND workflow_snapshot.definition = filed_definition) THEN
        RAISE EXCEPTION 'job %: the workflow snapshot filed under digest % is not this job''s definition; it was filed by someone claiming to be the node (protomolt.digest_from_node): delete that snapshot (no job names it, or check which do) and write the row again', NEW.job_id, NEW.definition_digest
            USING ERRCODE = 'unique_violation';
    END IF;
    NEW.workflow_definition := NULL;
    RETURN NEW;
END
$$;

-- The rows the mover still has to move (none once it is done: the index is empty).
CREATE INDEX workflow_run_inline_snapshot ON workflow_run (job_id) WHERE workflow_definition IS NOT NULL;

-- For the foreign key's checks when a snapshot is deleted, and the pruner's question
-- "does any job still name this snapshot?".
CREATE INDEX workflow_run_by_snapshot ON workflow_run (definition_digest);

ALTER TABLE workflow_run
    ADD CONSTRAINT workflow_run_snapshot FOREIGN KEY (definition_digest)
    REFERENCES workflow_snapshot (digest) NOT VALID;

-- A database with no job yet has nothing to move: the key is valid at once (the check
-- reads an empty table), and the node's mover has nothing to do.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM workflow_run) THEN
        ALTER TABLE workflow_run VALIDATE CONSTRAINT workflow_run_snapshot;
    END IF;
END
$$;
