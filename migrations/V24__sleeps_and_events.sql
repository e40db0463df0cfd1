-- Sleeps and events (issue 33): two more things a job parks on, besides an answer.
--
-- A wait in `waits` now has a `kind`: "external" (complete-step answers it; rows
-- parked before V24 have no kind and are external), "sleep" ({forMs} or {wakeMs},
-- ending at its `untilMs`) or "event" ({key, lookbackMs}: send-event answers it).
-- A job whose every wait is a sleep is QUEUED with run_after at the first wake time
-- (the claim stays flat); a sleep beside other waits keeps the job WAITING, so a
-- WAITING row's first wait may be a sleep: it has a wait_until without a timeout.
ALTER TABLE workflow_run DROP CONSTRAINT workflow_run_wait_is_whole;
ALTER TABLE workflow_run ADD CONSTRAINT workflow_run_wait_is_whole
    CHECK ((wait_timeout_ms IS NULL) = (on_timeout IS NULL)
           AND (wait_timeout_ms IS NULL OR wait_until IS NOT NULL)) NOT VALID;
ALTER TABLE workflow_run VALIDATE CONSTRAINT workflow_run_wait_is_whole;

COMMENT ON COLUMN workflow_run.wait_until IS
    'When the first wait of a WAITING job ends: its timeout (wait_timeout_ms set) or a sleep beside it (wait_timeout_ms NULL); NULL: it waits for ever.';

-- The jobs waiting on an event key, found by send-event without a scan: only
-- WAITING rows are in the index, by the keys of their event waits.
CREATE INDEX workflow_run_waiting_event_keys ON workflow_run
    USING gin (jsonb_path_query_array(waits, '$[*] ? (@.kind == "event").key'))
    WHERE status = 'WAITING';

-- Events sent with send-event (or on the signals topic), kept for the longest
-- lookback a step may ask (7 days) so a job that parks on a key after its event was
-- sent still gets it. `event_id` makes sending idempotent on its key: a second send
-- of one id on one key is recognised and resumes nothing. `received_at` is the time
-- the send held the key's lock (clock_timestamp(), not the transaction's start).
CREATE TABLE workflow_events_received (
    event_key   text NOT NULL CHECK (length(event_key) BETWEEN 1 AND 1000),
    event_id    text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 400),
    payload     jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (event_key, event_id)
);
CREATE INDEX workflow_events_received_by_key ON workflow_events_received (event_key, received_at);
CREATE INDEX workflow_events_received_by_age ON workflow_events_received (received_at);

COMMENT ON TABLE workflow_events_received IS
    'Events sent to jobs (send-event, the signals topic), kept 7 days for steps that park on their key later.';
