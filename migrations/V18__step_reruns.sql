-- An operator's retry-job with fromStep drops the checkpoints from that step on, and
-- the steps whose checkpoints it dropped run again on purpose: their calls need a new
-- idempotency key, or a target honouring keys would answer the re-run from its cache.
-- A step that never checkpointed (it failed, perhaps after doing its effect) is only
-- resumed, and must keep its key so such a target does the effect once. V10's one
-- count per job could not tell the two apart: `step_reruns[i]` counts the retries that
-- dropped the checkpoint of step i (1-based, as PostgreSQL's arrays are), and step i's
-- key is `<job_id>/<step>/rerun-<n>` once it is non-zero.
ALTER TABLE workflow_run
    ADD COLUMN step_reruns integer[] NOT NULL DEFAULT '{}';

-- Rows re-run before this migration keyed every step with their count: keep that.
UPDATE workflow_run
   SET step_reruns = array_fill(reruns, ARRAY[jsonb_array_length(workflow_definition -> 'steps')])
 WHERE reruns > 0 AND jsonb_typeof(workflow_definition -> 'steps') = 'array';

COMMENT ON COLUMN workflow_run.step_reruns IS
    'Per step (1-based): operator retries that dropped its checkpoint (retry-job with fromStep); non-zero, part of its calls'' idempotency key.';
