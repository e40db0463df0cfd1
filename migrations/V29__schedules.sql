-- Schedules (issue 35): durable cron. A schedule is one row; any node fires it. A
-- node reads the due rows (next_fire_at <= now(), not paused), prepares the tick's
-- jobs, then locks the row (FOR UPDATE SKIP LOCKED, on the revision and next_fire_at
-- it read) and, in one transaction, applies the overlap policy, inserts the jobs and
-- moves next_fire_at on. A tick's job id is derived from (schedule, id_salt, tick),
-- so a tick fired twice (a node that died after its COMMIT was sent, two nodes racing)
-- makes one job.
CREATE TABLE workflow_schedules (
    name text PRIMARY KEY,
    -- The put-schedule body as accepted (cron, timezone, workflowName, input, ...).
    spec jsonb NOT NULL,
    -- Bumped by every put-schedule: a node that read an older spec fires nothing.
    revision bigint NOT NULL DEFAULT 1,
    -- The next tick to fire; NULL once endAt has passed.
    next_fire_at timestamptz,
    paused boolean NOT NULL DEFAULT false,
    paused_reason text,
    -- The newest tick fired, and when (the lag between them is a metric).
    last_tick_at timestamptz,
    last_fired_at timestamptz,
    -- Why the newest tick made no job (its workflow not stored on the firing node,
    -- its input no longer valid), cleared by the next tick that makes one.
    last_error text,
    -- Part of every tick's job id, random and never shown: nobody can take a future
    -- tick's id by guessing it, and a schedule deleted and made again under the same
    -- name is a new schedule whose ticks are not its predecessor's.
    id_salt uuid NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE workflow_schedules IS 'Durable cron schedules (put-schedule): any node fires a due row under FOR UPDATE SKIP LOCKED.';

CREATE INDEX workflow_schedules_due ON workflow_schedules (next_fire_at)
    WHERE NOT paused AND next_fire_at IS NOT NULL;

-- The schedule and tick a job was fired for (NULL: not a scheduled job).
ALTER TABLE workflow_run ADD COLUMN schedule_name text;
ALTER TABLE workflow_run ADD COLUMN scheduled_for timestamptz;
COMMENT ON COLUMN workflow_run.schedule_name IS 'The schedule that fired the job (put-schedule), NULL for a submitted one.';
COMMENT ON COLUMN workflow_run.scheduled_for IS 'The tick the schedule fired the job for (a trigger-schedule: when it was asked).';

CREATE INDEX workflow_run_by_schedule ON workflow_run (schedule_name, scheduled_for DESC)
    WHERE schedule_name IS NOT NULL;

-- A schedule's unfinished jobs, read by every fire's overlap policy: never a scan of
-- the schedule's whole history.
CREATE INDEX workflow_run_live_by_schedule ON workflow_run (schedule_name)
    WHERE schedule_name IS NOT NULL AND status IN ('QUEUED', 'RUNNING', 'WAITING');
