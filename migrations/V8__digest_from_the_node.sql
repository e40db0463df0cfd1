-- The submitting node supplies the snapshot digest it already computed (its compiled
-- cache keys on it), so PostgreSQL no longer renders every inserted 100 KB snapshot as
-- text to hash it: measured with the bench's `submit` scenario, that rendering was a
-- third of a submission's time in PostgreSQL.
--
-- Two kinds of digest now live in `definition_digest`, and neither can be mistaken
-- for the other: the node's is `sha256-compact:` followed by the SHA-256 (hex) of the
-- snapshot's compact JSON text as the node serialised it; the trigger's (any insert
-- that gives none, and every change of the snapshot, an operator's repair included) is
-- the bare hex SHA-256 of the jsonb text, as V6 defined it. The same snapshot may so
-- have two digests (a worker then compiles it once per digest); two snapshots never
-- share one.
--
-- A supplied digest is kept only when the inserting transaction says it comes from
-- the node (`SET LOCAL protomolt.digest_from_node = 'on'`, which only the submitter's
-- transactions set): an operator's copy of a row (`INSERT ... SELECT` with an edited
-- definition, a restored dump) gets its digest recomputed, so a worker can never take
-- a copied digest for the edited snapshot it no longer describes.
CREATE OR REPLACE FUNCTION workflow_run_definition_digest() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.definition_digest IS NOT NULL
       AND current_setting('protomolt.digest_from_node', true) = 'on' THEN
        RETURN NEW;
    END IF;
    NEW.definition_digest := encode(sha256(convert_to(NEW.workflow_definition::text, 'UTF8')), 'hex');
    RETURN NEW;
END
$$;
