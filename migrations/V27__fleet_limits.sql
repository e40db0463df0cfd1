-- Fleet-wide limits on calls (issue 34): token buckets (a step's `rateLimit`, a
-- `[[jobs.target_limits]]` rate) and caps on calls in flight (`max_concurrent` of a
-- target limit), held in PostgreSQL so they are true for every node at once.
--
-- A bucket holds at most `burst` tokens and gains `rate_per_s` a second; a call
-- takes its units when the bucket holds them (or, for a call costing more than the
-- burst, when it is full: it then leaves the bucket in debt). A cap counts the
-- holds of calls in flight; each hold expires (the call's deadline and a margin),
-- so a node that dies holding some frees them on its own.
CREATE TABLE workflow_limits (
    name text PRIMARY KEY,
    rate_per_s double precision CHECK (rate_per_s > 0),
    burst double precision CHECK (burst >= 1),
    tokens double precision NOT NULL,
    refilled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    max_concurrent integer CHECK (max_concurrent > 0),
    CHECK ((rate_per_s IS NULL) = (burst IS NULL))
);

CREATE TABLE workflow_limit_holds (
    name text NOT NULL,
    hold_id uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, hold_id)
);
CREATE INDEX workflow_limit_holds_by_hold ON workflow_limit_holds (hold_id);

-- Why a QUEUED job waits on a limit (THROTTLED: ...), set when a throttled call
-- gave its claim back, cleared by the next claim.
ALTER TABLE workflow_run ADD COLUMN throttled text;
COMMENT ON COLUMN workflow_run.throttled IS 'Why the job was last given back by a call over a fleet-wide limit (cleared when claimed again).';

-- Takes one call's units from every limit named (`names`, sorted by the caller, so
-- two takers lock them in one order), each filed or refreshed with its rate, burst
-- and cap: all or nothing. Answers 0 when taken (and, for capped limits, the hold
-- `hold` registered for `hold_ms`), else the seconds until the limits may have room
-- (the next tokens; 50 ms for a cap at its calls in flight).
CREATE FUNCTION protomolt_take_limits(names text[], rates double precision[], bursts double precision[],
                                      caps integer[], costs double precision[], hold uuid, hold_ms bigint)
RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    wait double precision := 0;
    bucket record;
    available double precision;
    needed double precision;
    in_use bigint;
BEGIN
    -- Sent again after its answer was lost: the holds it registered say it was taken.
    IF EXISTS (SELECT 1 FROM workflow_limit_holds WHERE hold_id = hold AND expires_at > clock_timestamp()) THEN
        RETURN 0;
    END IF;
    FOR i IN 1 .. cardinality(names) LOOP
        INSERT INTO workflow_limits AS l (name, rate_per_s, burst, tokens, max_concurrent)
        VALUES (names[i], rates[i], bursts[i], COALESCE(bursts[i], 0), caps[i])
        ON CONFLICT (name) DO UPDATE SET rate_per_s = EXCLUDED.rate_per_s, burst = EXCLUDED.burst,
                                         max_concurrent = EXCLUDED.max_concurrent
         WHERE (l.rate_per_s, l.burst, l.max_concurrent)
               IS DISTINCT FROM (EXCLUDED.rate_per_s, EXCLUDED.burst, EXCLUDED.max_concurrent);
        SELECT * INTO bucket FROM workflow_limits WHERE name = names[i] FOR UPDATE;
        IF bucket.rate_per_s IS NOT NULL THEN
            available := LEAST(bucket.burst,
                               bucket.tokens + bucket.rate_per_s
                                   * extract(epoch FROM clock_timestamp() - bucket.refilled_at));
            needed := LEAST(costs[i], bucket.burst);
            IF available < needed THEN
                wait := GREATEST(wait, (needed - available) / bucket.rate_per_s);
            END IF;
        END IF;
        IF bucket.max_concurrent IS NOT NULL THEN
            SELECT count(*) INTO in_use FROM workflow_limit_holds
             WHERE name = names[i] AND expires_at > clock_timestamp();
            IF in_use >= bucket.max_concurrent THEN
                wait := GREATEST(wait, 0.05);
            END IF;
        END IF;
    END LOOP;
    IF wait > 0 THEN
        RETURN wait;
    END IF;
    FOR i IN 1 .. cardinality(names) LOOP
        UPDATE workflow_limits
           SET tokens = LEAST(burst, tokens + rate_per_s * extract(epoch FROM clock_timestamp() - refilled_at)) - costs[i],
               refilled_at = clock_timestamp()
         WHERE name = names[i] AND rate_per_s IS NOT NULL;
        IF caps[i] IS NOT NULL THEN
            DELETE FROM workflow_limit_holds WHERE name = names[i] AND expires_at <= clock_timestamp();
            INSERT INTO workflow_limit_holds (name, hold_id, expires_at)
            VALUES (names[i], hold, clock_timestamp() + hold_ms * interval '1 millisecond')
            ON CONFLICT DO NOTHING;
        END IF;
    END LOOP;
    RETURN 0;
END $$;
