//! The statements of the workflow snapshots (migration V21): filed once, named by
//! digest, moved out of the rows written before, pruned when no job names them.

/// The advisory lock between submissions and the snapshot pruner: a submission holds
/// it shared from before it files its snapshot until it commits, the pruner exclusive
/// while it deletes, so a snapshot a submission found filed is never deleted before
/// its job row names it. (Migration V21's trigger takes it too.)
pub const SNAPSHOT_LOCK_KEY: i64 = 123_615_239_430_773;

/// Takes [`SNAPSHOT_LOCK_KEY`] exclusive for the transaction if no submission holds
/// it, answering whether it did: the pruner never waits for it, so it never holds up
/// the submissions that would queue behind it, and skips its sweep when busy.
pub const TRY_LOCK_SNAPSHOTS: &str = "SELECT pg_try_advisory_xact_lock(123615239430773)";

/// The settings of the transactions that move snapshots out of old rows and prune
/// them: a bound on waiting for a row lock, and on sitting idle inside the
/// transaction (a connection cut there must not hold a lock for long).
pub const SNAPSHOT_WORK_SETTINGS: &str =
    "SET LOCAL lock_timeout = '5s'; SET LOCAL idle_in_transaction_session_timeout = '10s'";

/// Moves the snapshots of up to `$2` rows after job id `$1` (in id order) out of the
/// rows, skipping rows another transaction holds: it sets each row's copy to NULL,
/// and V21's trigger files the copy under the digest of its own content (whatever
/// digest the row claimed) and refuses a different snapshot already filed there.
/// Answers the last id looked at (NULL: no row after `$1` holds a copy) and how many
/// rows it moved.
pub const MOVE_INLINE_SNAPSHOTS: &str = "\
WITH batch AS (
    SELECT job_id FROM workflow_run
     WHERE ($1::uuid IS NULL OR job_id > $1) AND workflow_definition IS NOT NULL
     ORDER BY job_id
     LIMIT $2
       FOR UPDATE SKIP LOCKED),
moved AS (
    UPDATE workflow_run w SET workflow_definition = NULL
      FROM batch b
     WHERE w.job_id = b.job_id
    RETURNING w.job_id)
SELECT (SELECT job_id FROM batch ORDER BY job_id DESC LIMIT 1) AS last,
       (SELECT count(*) FROM moved) AS moved";

/// Rows whose digest names no filed snapshot (up to 10): what keeps V21's foreign key
/// from validating (an operator's edit of a row written before it).
pub const ROWS_WITHOUT_A_SNAPSHOT: &str = "\
SELECT w.job_id FROM workflow_run w
 WHERE w.workflow_definition IS NULL AND w.definition_digest IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM workflow_snapshot s WHERE s.digest = w.definition_digest)
 LIMIT 10";

/// Whether any row still holds its snapshot (V21's partial index of those rows
/// answers it).
pub const ANY_INLINE_SNAPSHOT: &str =
    "SELECT EXISTS (SELECT 1 FROM workflow_run WHERE workflow_definition IS NOT NULL)";

/// Whether V21's foreign key has been validated (then every row names a filed
/// snapshot, and nothing is left to move).
pub const SNAPSHOT_KEY_VALIDATED: &str = "\
SELECT convalidated FROM pg_constraint
 WHERE conname = 'workflow_run_snapshot' AND conrelid = 'workflow_run'::regclass";

/// Checks every row against V21's foreign key (a scan that blocks no reader or
/// writer), so from then on the schema itself says each row names a filed snapshot.
pub const VALIDATE_SNAPSHOT_KEY: &str =
    "ALTER TABLE workflow_run VALIDATE CONSTRAINT workflow_run_snapshot";

/// Deletes, of up to `$2` snapshots after digest `$1` (in digest order), those no job
/// names; run under [`TRY_LOCK_SNAPSHOTS`]. Answers the last digest looked at (NULL: none
/// after `$1`) and how many it deleted.
pub const PRUNE_SNAPSHOTS: &str = "\
WITH swept AS (
    SELECT digest FROM workflow_snapshot
     WHERE $1::text IS NULL OR digest > $1
     ORDER BY digest LIMIT $2),
gone AS (
    DELETE FROM workflow_snapshot s
     USING swept
     WHERE s.digest = swept.digest
       AND NOT EXISTS (SELECT 1 FROM workflow_run w WHERE w.definition_digest = s.digest)
    RETURNING s.digest)
SELECT (SELECT max(digest) FROM swept) AS last, (SELECT count(*) FROM gone) AS deleted";

/// A snapshot by its digest. `$1` digest.
pub const SNAPSHOT_BY_DIGEST: &str = "SELECT definition FROM workflow_snapshot WHERE digest = $1";

/// What a retry onto the current stored workflow (`workflow: "current"`) checks before
/// it acts, per job: its workflow's name, status, the snapshot it names and its claims
/// (both checked again under the row lock), whether the row still holds its snapshot
/// (not moved since V21 yet), whether it was submitted by a stored name, its parent,
/// input and concurrency keys, the steps of its checkpoints in their order, and the
/// steps it keeps part of a result of (stored map elements, child jobs). `$1` job ids.
pub const RETRY_CANDIDATES: &str = "\
SELECT w.job_id, w.workflow_name, w.status, w.claims, w.workflow_definition IS NOT NULL AS inline,
       COALESCE(w.definition_digest, encode(sha256(convert_to(w.workflow_definition::text, 'UTF8')), 'hex')) AS digest,
       w.submitted_by_name, w.parent_job_id, w.input, COALESCE(w.concurrency_keys, '{}') AS concurrency_keys,
       CASE WHEN jsonb_typeof(w.checkpoints) = 'array'
            THEN ARRAY(SELECT c.entry ->> 'name' FROM jsonb_array_elements(w.checkpoints) WITH ORDINALITY AS c(entry, at)
                        WHERE c.entry ->> 'name' IS NOT NULL ORDER BY c.at)
            ELSE '{}'::text[] END AS checkpointed,
       ARRAY(SELECT DISTINCT it.step FROM workflow_run_items it WHERE it.job_id = w.job_id)
       || ARRAY(SELECT DISTINCT ch.parent_step FROM workflow_run ch
                 WHERE ch.parent_job_id = w.job_id AND ch.parent_step IS NOT NULL) AS parts
  FROM workflow_run w WHERE w.job_id = ANY($1)";

/// Lets the next statement file snapshots under the node's digests (as a submission
/// does), holding the snapshot lock shared so the pruner cannot take a snapshot the
/// transaction names before it commits.
pub const FILE_SNAPSHOTS_SETTINGS: &str = "\
SELECT set_config('protomolt.digest_from_node', 'on', true), pg_advisory_xact_lock_shared(123615239430773)";

/// Files the snapshots a retry moves jobs onto, each once, in digest order. `$1`
/// definitions, `$2` their digests. Runs after [`FILE_SNAPSHOTS_SETTINGS`].
pub const FILE_SNAPSHOTS: &str = "\
INSERT INTO workflow_snapshot (digest, definition)
SELECT d.digest, d.definition FROM unnest($1::jsonb[], $2::text[]) AS d(definition, digest)
 ORDER BY d.digest
ON CONFLICT (digest) DO NOTHING";

/// Moves jobs onto another filed snapshot: `$1` job ids, `$2` the digest of each one's
/// new snapshot, `$3` for each, a JSON list giving per step of the new workflow the
/// 1-based position of the step of the same name in the old one whose result the job
/// keeps (its re-run count, part of its calls' idempotency keys, follows it), or -1 for
/// a step that will run: its count becomes the job's `reruns` + 1, higher than any
/// count a step of the job ever had (a step's count never passes `reruns`), so its
/// calls get a key never sent before. `reruns` counts the move. Rows still holding
/// their snapshot (not moved since V21) are left alone; answers the ids moved.
pub const MOVE_TO_SNAPSHOTS: &str = "\
UPDATE workflow_run w
   SET definition_digest = m.digest,
       step_reruns = ARRAY(SELECT CASE WHEN r.old::int < 0 THEN w.reruns + 1
                                       ELSE COALESCE(w.step_reruns[r.old::int], 0) END
                             FROM jsonb_array_elements_text(m.reruns_from) WITH ORDINALITY AS r(old, at)
                            ORDER BY r.at),
       reruns = w.reruns + 1
  FROM unnest($1::uuid[], $2::text[], $3::jsonb[]) AS m(job_id, digest, reruns_from)
 WHERE w.job_id = m.job_id AND w.workflow_definition IS NULL
RETURNING w.job_id";

/// The digests of `$2` whose filed snapshot is not the definition at the same place
/// of `$1`: filed under a node's digest by someone else (nothing but the node files
/// under its digests, so none, unless the database was written by hand).
pub const MISFILED_SNAPSHOTS: &str = "\
SELECT d.digest FROM unnest($1::jsonb[], $2::text[]) AS d(definition, digest)
  JOIN workflow_snapshot s ON s.digest = d.digest
 WHERE s.definition <> d.definition";

/// Ends what [`FILE_SNAPSHOTS_SETTINGS`] allowed: later statements of the transaction
/// file nothing under a digest they name.
pub const FILED_SNAPSHOTS_SETTINGS_OFF: &str =
    "SELECT set_config('protomolt.digest_from_node', 'off', true)";
