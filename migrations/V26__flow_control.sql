-- Flow control across the fleet (issue 34): concurrency keys with fair turns among
-- them, and pausing a workflow or a key.
--
-- A workflow's `concurrency` entries give each job up to three keys, computed at
-- submission (`concurrency_keys`; NULL for a job without). At most `max_running`
-- jobs holding a key are RUNNING at once: the claim counts them from the rows (a
-- parked job, WAITING or sleeping, holds no slot), under the key's row lock in
-- `workflow_concurrency`, so two claims never both take the last slot.
ALTER TABLE workflow_run ADD COLUMN concurrency_keys text[];

COMMENT ON COLUMN workflow_run.concurrency_keys IS 'The concurrency keys the job holds while RUNNING (<workflow>:<expression>=<value>), computed at submission; the first is the lane it queues in.';

-- One row per key: its limit (the latest submission's), its weight, and its turn.
-- `ready`: the key's lane may hold QUEUED jobs (set by a trigger when one is queued,
-- cleared by a claim that found the lane empty); only ready keys take turns.
-- `turn_at`: claims serve ready keys oldest turn first; a turn pushes the key back
-- by the jobs it took × 10 ms ÷ its weight, so keys with work rotate (a key with
-- twice the weight comes back twice as often).
CREATE TABLE workflow_concurrency (
    key text PRIMARY KEY,
    workflow_name text NOT NULL,
    max_running integer NOT NULL CHECK (max_running > 0),
    weight integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 100),
    ready boolean NOT NULL DEFAULT true,
    paused boolean NOT NULL DEFAULT false,
    turn_at timestamptz NOT NULL DEFAULT '-infinity',
    cleared_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Whether a submission by a stored workflow's name set the limit and weight: an
    -- inline envelope that borrows the name may share the key's slots, but never
    -- changes them then.
    set_by_name boolean NOT NULL DEFAULT false
);

CREATE INDEX workflow_concurrency_turns ON workflow_concurrency (turn_at) WHERE ready AND NOT paused;
CREATE INDEX workflow_concurrency_cleared ON workflow_concurrency (cleared_at) WHERE NOT ready;

-- Paused workflows: no new claims of their jobs, fleet-wide, until resumed.
CREATE TABLE workflow_pauses (
    workflow_name text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    reason text
);

-- Jobs without keys are claimed by priority as before, from an index that leaves
-- keyed jobs out (a saturated key's million queued jobs cost the plain claim
-- nothing); keyed jobs queue in their first key's lane, by priority within it.
CREATE INDEX workflow_run_eligible_unkeyed ON workflow_run (priority, run_after, created_at)
    WHERE status = 'QUEUED' AND concurrency_keys IS NULL;
DROP INDEX workflow_run_eligible_by_priority;
CREATE INDEX workflow_run_key_lane ON workflow_run ((concurrency_keys[1]), priority DESC, run_after, created_at)
    WHERE status = 'QUEUED' AND concurrency_keys IS NOT NULL;

-- The live (QUEUED or RUNNING) jobs holding a key at each position: the claim
-- counts a key's RUNNING jobs, and the cancel strategies its live ones, oldest first.
CREATE INDEX workflow_run_live_key1 ON workflow_run ((concurrency_keys[1]), status, created_at)
    WHERE status IN ('QUEUED', 'RUNNING') AND concurrency_keys[1] IS NOT NULL;
CREATE INDEX workflow_run_live_key2 ON workflow_run ((concurrency_keys[2]), status, created_at)
    WHERE status IN ('QUEUED', 'RUNNING') AND concurrency_keys[2] IS NOT NULL;
CREATE INDEX workflow_run_live_key3 ON workflow_run ((concurrency_keys[3]), status, created_at)
    WHERE status IN ('QUEUED', 'RUNNING') AND concurrency_keys[3] IS NOT NULL;

-- A job queued in a lane (released, retried, woken, requeued by the sweeper) makes
-- its key ready. Only a key not ready is written, so a busy key's row is not
-- rewritten per job. (Submissions lock their keys and make the lanes ready before
-- they insert, so the claim cannot clear a lane under them; a requeue's transaction
-- still open when a claim finds the lane empty may leave the key cleared: the
-- sweeper sets such keys ready again, see protomolt_reready_keys.)
CREATE FUNCTION workflow_run_key_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflow_concurrency SET ready = true, cleared_at = NULL
     WHERE key = NEW.concurrency_keys[1] AND NOT ready;
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_run_key_queued_insert
    AFTER INSERT ON workflow_run
    FOR EACH ROW
    WHEN (NEW.concurrency_keys IS NOT NULL AND NEW.status = 'QUEUED')
    EXECUTE FUNCTION workflow_run_key_queued();

CREATE TRIGGER workflow_run_key_queued_update
    AFTER UPDATE OF status ON workflow_run
    FOR EACH ROW
    WHEN (NEW.concurrency_keys IS NOT NULL AND NEW.status = 'QUEUED' AND OLD.status IS DISTINCT FROM 'QUEUED')
    EXECUTE FUNCTION workflow_run_key_queued();

-- How many jobs holding `k` are RUNNING now (one index probe per position).
CREATE FUNCTION protomolt_key_running(k text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*) FROM workflow_run WHERE concurrency_keys[1] = k AND status = 'RUNNING')
         + (SELECT count(*) FROM workflow_run WHERE concurrency_keys[2] = k AND status = 'RUNNING')
         + (SELECT count(*) FROM workflow_run WHERE concurrency_keys[3] = k AND status = 'RUNNING')
$$;

-- The jobs one claim may take, at most `wanted`, each locked (FOR UPDATE SKIP
-- LOCKED) for the claim statement that calls this to mark RUNNING.
--
-- Two paths: jobs without keys, by priority (9 first) then eligibility, as before;
-- and keyed jobs, key by key in turn order. Which path fills the claim first
-- alternates at random, so neither starves the other. A key takes a turn only when
-- its row can be locked (a claim elsewhere holding it is skipped, never waited for);
-- under that lock its RUNNING jobs are counted, and it gives at most its room, its
-- jobs by priority within the lane. A job holding more keys is taken only when each
-- of them has room and can be locked too. Keys probed per claim are bounded, so a
-- fleet of saturated keys costs a claim a bounded number of index probes.
CREATE FUNCTION protomolt_claimable(wanted integer) RETURNS uuid[]
LANGUAGE plpgsql AS $$
DECLARE
    picked uuid[] := '{}';
    taken jsonb := '{}';
    paused_any boolean := EXISTS (SELECT 1 FROM workflow_pauses);
    keyed_first boolean := random() < 0.5;
    lanes CURSOR (any_paused boolean) FOR
        SELECT c.key, c.max_running, c.weight FROM workflow_concurrency c
         WHERE c.ready AND NOT c.paused
           AND (NOT any_paused OR NOT EXISTS (SELECT 1 FROM workflow_pauses p WHERE p.workflow_name = c.workflow_name))
         ORDER BY c.turn_at
         FOR UPDATE SKIP LOCKED;
    lane record;
    job record;
    room bigint;
    other text;
    other_room bigint;
    fits boolean;
    got integer;
    probes integer := 0;
    looked integer;
BEGIN
    IF wanted <= 0 THEN
        RETURN picked;
    END IF;
    IF NOT keyed_first THEN
        picked := protomolt_claimable_unkeyed(wanted, paused_any);
    END IF;
    -- An explicit cursor fetched row by row locks only the keys it reaches (a FOR
    -- loop would fetch, and lock, ten at a time, hiding them from other claims).
    OPEN lanes(paused_any);
    LOOP
        EXIT WHEN cardinality(picked) >= wanted OR probes >= wanted + 32;
        FETCH lanes INTO lane;
        EXIT WHEN NOT FOUND;
        probes := probes + 1;
        room := lane.max_running - protomolt_key_running(lane.key) - COALESCE((taken ->> lane.key)::bigint, 0);
        IF room <= 0 THEN
            -- Saturated: its turn passes (its jobs wait for a slot).
            UPDATE workflow_concurrency SET turn_at = now() + interval '10 ms' / lane.weight WHERE key = lane.key;
            CONTINUE;
        END IF;
        got := 0;
        looked := 0;
        FOR job IN
            SELECT w.job_id, w.concurrency_keys FROM workflow_run w
             WHERE w.concurrency_keys[1] = lane.key AND w.status = 'QUEUED' AND w.run_after <= now()
             ORDER BY w.priority DESC, w.run_after, w.created_at
             FOR UPDATE SKIP LOCKED
        LOOP
            EXIT WHEN room <= 0 OR cardinality(picked) >= wanted OR looked >= wanted + 32;
            looked := looked + 1;
            fits := true;
            IF cardinality(job.concurrency_keys) > 1 THEN
                FOREACH other IN ARRAY job.concurrency_keys[2:] LOOP
                    PERFORM 1 FROM workflow_concurrency c WHERE c.key = other AND NOT c.paused FOR UPDATE SKIP LOCKED;
                    IF NOT FOUND THEN
                        fits := false;
                        EXIT;
                    END IF;
                    SELECT c.max_running - protomolt_key_running(other) - COALESCE((taken ->> other)::bigint, 0)
                      INTO other_room FROM workflow_concurrency c WHERE c.key = other;
                    IF other_room <= 0 THEN
                        fits := false;
                        EXIT;
                    END IF;
                END LOOP;
            END IF;
            IF fits THEN
                picked := picked || job.job_id;
                room := room - 1;
                got := got + 1;
                FOREACH other IN ARRAY job.concurrency_keys LOOP
                    taken := jsonb_set(taken, ARRAY[other], to_jsonb(COALESCE((taken ->> other)::bigint, 0) + 1));
                END LOOP;
            END IF;
        END LOOP;
        IF got > 0 THEN
            UPDATE workflow_concurrency SET turn_at = now() + interval '10 ms' * got / lane.weight WHERE key = lane.key;
        ELSIF NOT EXISTS (SELECT 1 FROM workflow_run w WHERE w.concurrency_keys[1] = lane.key AND w.status = 'QUEUED') THEN
            -- An empty lane stops taking turns until a job is queued in it again.
            UPDATE workflow_concurrency SET ready = false, cleared_at = now() WHERE key = lane.key;
        ELSE
            -- Only jobs not yet eligible (sleeping, backing off, held by other
            -- claims): its turn passes.
            UPDATE workflow_concurrency SET turn_at = now() + interval '10 ms' / lane.weight WHERE key = lane.key;
        END IF;
    END LOOP;
    CLOSE lanes;
    IF keyed_first AND cardinality(picked) < wanted THEN
        picked := picked || protomolt_claimable_unkeyed(wanted - cardinality(picked), paused_any);
    END IF;
    RETURN picked;
END $$;

-- The jobs without keys one claim may take (see protomolt_claimable): per priority,
-- 9 first, the ones eligible the longest; a paused workflow's jobs left out.
CREATE FUNCTION protomolt_claimable_unkeyed(wanted integer, paused_any boolean) RETURNS uuid[]
LANGUAGE plpgsql AS $$
BEGIN
    IF wanted <= 0 THEN
        RETURN '{}';
    END IF;
    IF NOT paused_any THEN
        RETURN ARRAY(SELECT eligible.job_id
                       FROM generate_series(9, 0, -1) AS level(priority),
                            LATERAL (SELECT job_id FROM workflow_run
                                      WHERE status = 'QUEUED' AND concurrency_keys IS NULL
                                        AND priority = level.priority AND run_after <= now()
                                      ORDER BY run_after, created_at
                                      LIMIT wanted
                                      FOR UPDATE SKIP LOCKED) AS eligible
                      LIMIT wanted);
    END IF;
    RETURN ARRAY(SELECT eligible.job_id
                   FROM generate_series(9, 0, -1) AS level(priority),
                        LATERAL (SELECT w.job_id FROM workflow_run w
                                  WHERE w.status = 'QUEUED' AND w.concurrency_keys IS NULL
                                    AND w.priority = level.priority AND w.run_after <= now()
                                    AND NOT EXISTS (SELECT 1 FROM workflow_pauses p WHERE p.workflow_name = w.workflow_name)
                                  ORDER BY w.run_after, w.created_at
                                  LIMIT wanted
                                  FOR UPDATE SKIP LOCKED) AS eligible
                  LIMIT wanted);
END $$;

-- The sweeper's repair of the one race `ready` has: a claim that found a lane empty
-- while a requeue's transaction was still open cleared the key, and the requeued
-- job's trigger saw it ready. Keys cleared in the last hour whose lane holds a QUEUED job
-- are made ready again; answers how many.
CREATE FUNCTION protomolt_reready_keys() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    fixed integer;
BEGIN
    UPDATE workflow_concurrency c SET ready = true, cleared_at = NULL
     WHERE NOT c.ready AND c.cleared_at > now() - interval '1 hour'
       AND EXISTS (SELECT 1 FROM workflow_run w WHERE w.concurrency_keys[1] = c.key AND w.status = 'QUEUED');
    GET DIAGNOSTICS fixed = ROW_COUNT;
    RETURN fixed;
END $$;
