-- A job parked on several external steps at once (parallel branches of a workflow
-- graph). `outstanding_steps` names every step the job waits for; `waits` holds, per
-- step, the request its rules built and its own wait, in the order the waits end
-- (steps that wait for ever last, ties in declaration order):
--   [{"step": "review", "request": {...}, "timeoutMs": 60000, "onTimeout": "fail",
--     "untilMs": 1796000000000}, {"step": "second"}]
-- The single-step columns (outstanding_step, pending_request, wait_until,
-- wait_timeout_ms, on_timeout) keep describing the first of them, so every reader of
-- V1's columns (the timeout sweep, list-jobs' filter, the console) works unchanged:
-- the sweep ends the job when the first wait runs out, naming that step.
--
-- Rows parked before this migration have both columns NULL: their one step is
-- `outstanding_step`. Adding nullable columns rewrites no row.
ALTER TABLE workflow_run ADD COLUMN outstanding_steps text[];
ALTER TABLE workflow_run ADD COLUMN waits jsonb;

COMMENT ON COLUMN workflow_run.outstanding_steps IS
    'Every external step a WAITING job is parked on (NULL before V22: outstanding_step alone); the first is outstanding_step.';
COMMENT ON COLUMN workflow_run.waits IS
    'Per waiting step: {step, request?, timeoutMs?, onTimeout?, untilMs?}, the first wait to end first; NULL before V22.';
