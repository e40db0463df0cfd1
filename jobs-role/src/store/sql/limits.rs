//! Fleet-wide limits on calls (migration V27): token buckets and caps on calls in
//! flight, taken before each call.

/// Takes one call's units from every limit named, all or nothing (see
/// `protomolt_take_limits`): `$1` names (sorted), `$2` rates per second (NULL: no
/// rate), `$3` bursts, `$4` caps on calls in flight (NULL: none), `$5` units, `$6` the
/// call's hold id, `$7` how long the hold lasts in milliseconds. Answers `wait`: 0
/// when taken, else the seconds until there may be room.
pub const TAKE_LIMITS: &str = "\
SELECT protomolt_take_limits($1::text[], $2::float8[], $3::float8[], $4::int[], $5::float8[], $6::uuid, $7::bigint) AS wait";

/// Ends a call's holds (`$1` the hold id): its caps have room again.
pub const RELEASE_HOLDS: &str = "DELETE FROM workflow_limit_holds WHERE hold_id = $1";

/// The limits and what they hold now (at most `$1`, by name): tokens in the bucket
/// (refilled to now, negative while in debt) and calls in flight.
pub const LIMITS_STATE: &str = "\
SELECT l.name, l.rate_per_s, l.burst, l.max_concurrent,
       CASE WHEN l.rate_per_s IS NOT NULL
            THEN LEAST(l.burst, l.tokens + l.rate_per_s * extract(epoch FROM clock_timestamp() - l.refilled_at)) END
           AS tokens,
       (SELECT count(*) FROM workflow_limit_holds h WHERE h.name = l.name AND h.expires_at > clock_timestamp())
           AS in_flight
  FROM workflow_limits l
 ORDER BY l.name
 LIMIT $1";
