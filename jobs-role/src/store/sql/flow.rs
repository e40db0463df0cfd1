//! Flow control: concurrency keys, their strategies at submission, pausing a
//! workflow or a key (migration V26; the claim itself is `protomolt_claimable`).

/// Files the keys a batch of submissions holds (`$1` keys, `$2` their workflows, `$3`
/// limits, `$4` weights, `$5` whether submitted by a stored workflow's name; distinct
/// keys, sorted), before the jobs are inserted (V26's trigger marks a key ready when a
/// job is queued in its lane, so the row must exist). A key seen before is only
/// written when its limit or weight changed (the latest submission's win), so a busy
/// key's row is not locked by every submission; once a submission by name set them,
/// an inline envelope borrowing the name no longer changes them.
pub const UPSERT_CONCURRENCY_KEYS: &str = "\
WITH wanted AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::bool[])
        AS k(key, workflow_name, max_running, weight, by_name)),
added AS (
    INSERT INTO workflow_concurrency (key, workflow_name, max_running, weight, set_by_name)
    SELECT key, workflow_name, max_running, weight, by_name FROM wanted ORDER BY key
    ON CONFLICT (key) DO NOTHING)
UPDATE workflow_concurrency c
   SET max_running = w.max_running, weight = w.weight, set_by_name = c.set_by_name OR w.by_name
  FROM wanted w
 WHERE c.key = w.key AND (w.by_name OR NOT c.set_by_name)
   AND (c.max_running, c.weight, c.set_by_name OR w.by_name)
       IS DISTINCT FROM (w.max_running, w.weight, c.set_by_name)";

/// Locks the keys a batch of submissions holds (`$1`), in key order, waiting for
/// them: two submissions of one key are decided one after the other (a cancel
/// strategy counts what the other committed), and a claim skips a key while a job of
/// its lane is being queued (so it cannot find the lane empty and clear it meanwhile).
pub const LOCK_CONCURRENCY_KEYS: &str =
    "SELECT key FROM workflow_concurrency WHERE key = ANY($1) ORDER BY key FOR UPDATE";

/// Makes ready the lanes a batch of submissions queues in (`$1`, locked by
/// [`LOCK_CONCURRENCY_KEYS`]), so the insert's trigger finds them ready and writes
/// nothing.
pub const MAKE_LANES_READY: &str = "\
UPDATE workflow_concurrency SET ready = true, cleared_at = NULL WHERE key = ANY($1) AND NOT ready";

/// The live jobs (QUEUED or RUNNING, not already asked to cancel) holding key `$1`,
/// oldest first: what a cancel strategy counts against the limit.
pub const LIVE_JOBS_OF_KEY: &str = "\
SELECT job_id FROM workflow_run
 WHERE (concurrency_keys[1] = $1 OR concurrency_keys[2] = $1 OR concurrency_keys[3] = $1)
   AND status IN ('QUEUED', 'RUNNING') AND NOT cancel_requested
 ORDER BY created_at, job_id";

/// Pauses workflow `$1` (`$2` the reason); answers a row when it was not paused.
pub const PAUSE_WORKFLOW: &str = "\
INSERT INTO workflow_pauses (workflow_name, reason) VALUES ($1, $2)
ON CONFLICT (workflow_name) DO NOTHING
RETURNING workflow_name";

/// Resumes workflow `$1`; answers a row when it was paused. Idle workers are woken.
pub const RESUME_WORKFLOW: &str = "\
WITH resumed AS (DELETE FROM workflow_pauses WHERE workflow_name = $1 RETURNING workflow_name)
SELECT workflow_name, pg_notify('protomolt_jobs_queued', '')::text AS woken FROM resumed";

/// Pauses (`$2` true) or resumes (false) concurrency key `$1`; answers its row when it
/// changed. Resuming wakes idle workers.
pub const SET_KEY_PAUSED: &str = "\
WITH changed AS (UPDATE workflow_concurrency SET paused = $2 WHERE key = $1 AND paused <> $2 RETURNING key)
SELECT key, CASE WHEN NOT $2 THEN pg_notify('protomolt_jobs_queued', '')::text END AS woken FROM changed";

/// Whether any job of workflow `$1` exists (one probe of `workflow_run_by_name`).
pub const WORKFLOW_HAS_JOBS: &str =
    "SELECT EXISTS (SELECT 1 FROM workflow_run WHERE workflow_name = $1) AS known";

/// Whether key `$1` exists.
pub const KEY_EXISTS: &str = "SELECT 1 FROM workflow_concurrency WHERE key = $1";

/// The paused workflows, by name.
pub const PAUSED_WORKFLOWS: &str = "\
SELECT workflow_name, floor(extract(epoch FROM paused_at) * 1000)::bigint AS paused_at_ms, reason
  FROM workflow_pauses ORDER BY workflow_name";

/// The paused keys, by key (at most `$1`).
pub const PAUSED_KEYS: &str =
    "SELECT key FROM workflow_concurrency WHERE paused ORDER BY key LIMIT $1";

/// The sweeper's repair of keys a claim cleared while a job was being requeued (see
/// `protomolt_reready_keys` in V26); answers how many it set ready again.
pub const REREADY_KEYS: &str = "SELECT protomolt_reready_keys() AS fixed";

/// Why QUEUED job `$1` is not running, as the row and its keys say: its start still
/// ahead (`run_after_ms`, NULL when due), its workflow paused, and per key its limit,
/// RUNNING count and pause. No row for a job that is not QUEUED.
pub const JOB_HOLD_UPS: &str = "\
SELECT CASE WHEN w.run_after > now() THEN floor(extract(epoch FROM w.run_after) * 1000)::bigint END AS run_after_ms,
       EXISTS (SELECT 1 FROM workflow_pauses p WHERE p.workflow_name = w.workflow_name) AS workflow_paused,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('key', c.key, 'limit', c.max_running,
                                                     'running', protomolt_key_running(c.key), 'paused', c.paused)
                                  ORDER BY k.at)
                   FROM unnest(w.concurrency_keys) WITH ORDINALITY AS k(key, at)
                   JOIN workflow_concurrency c ON c.key = k.key), '[]'::jsonb) AS keys
  FROM workflow_run w
 WHERE w.job_id = $1 AND w.status = 'QUEUED'";

/// The keys with work or jobs running, busiest first (at most `$1`): each key's
/// limit, RUNNING count, whether its lane has queued jobs, and its pause.
pub const BUSIEST_KEYS: &str = "\
SELECT c.key, c.workflow_name, c.max_running, protomolt_key_running(c.key) AS running, c.ready, c.paused
  FROM workflow_concurrency c
 WHERE c.ready OR c.paused
 ORDER BY running DESC, c.key
 LIMIT $1";

/// How many keys have queued work, how many of those run their limit (their queued
/// jobs wait), and how many are paused.
pub const KEYS_SUMMARY: &str = "\
SELECT count(*) FILTER (WHERE ready) AS with_work,
       count(*) FILTER (WHERE ready AND protomolt_key_running(key) >= max_running) AS at_limit,
       count(*) FILTER (WHERE paused) AS paused
  FROM workflow_concurrency";
