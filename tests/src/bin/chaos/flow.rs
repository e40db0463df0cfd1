//! Flow control and schedules under faults, as the targets and the database saw them:
//! the `Limited` jobs' concurrency key is never over its limit at the targets, their
//! rate-limited step never called faster than its bucket allows, and the run's
//! schedule makes exactly one job for each of its ticks.
//!
//! A job claimed more than once (its claim lost to a frozen node, a cut connection)
//! can put a call beyond a limit: the claim's old holder may still be calling when
//! the job's new holder starts, or call late on a token it took before it froze. So
//! each call in flight (or in the span) of a job claimed more than once excuses one
//! call over; nothing else does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use protomolt_e2e::invariants::Breach;
use serde_json::json;
use tokio_postgres::Client;

use crate::fixture::{Call, Outcome};
use crate::load::{BURST, JobSpec, Kind, LIMIT, RATE_PER_S};

/// The concurrency key's limit held at the targets.
pub const LIMITS: &str = "a concurrency limit never exceeded at the target";
/// The rate limit's bucket held at the targets.
pub const RATES: &str = "a rate limit never exceeded beyond its burst";
/// The schedule made one job per tick, and missed none.
pub const TICKS: &str = "one job per schedule tick";

/// The run's schedule.
pub const SCHEDULE: &str = "chaos-ticks";

/// Its period.
const TICK_MS: i64 = 2_000;

/// How much later than its token a call may reach the target (the node's own
/// scheduling between taking the token and calling).
const TOKEN_TO_CALL_MS: f64 = 500.0;

/// The schedule's span and the jobs it made per tick (ms since the epoch), and the
/// `Limited` jobs claimed more than once.
#[derive(Debug, Default)]
pub struct Ticks {
    /// Its first and last instant.
    pub span_ms: (i64, i64),
    /// Jobs per tick.
    pub jobs: BTreeMap<i64, i64>,
    /// Per tick, how long before it its earliest job was made (0: none early).
    pub early_ms: BTreeMap<i64, i64>,
    /// The `Limited` jobs whose `claims` passed 1.
    pub reclaimed: BTreeSet<String>,
}

/// Puts the run's schedule on `node`: `@every 2s` over `window` from a moment from
/// now, a job for every tick (`allow`), missed ticks caught up (`all`). Answers its
/// span.
pub async fn put_schedule(node: &str, window: Duration) -> (i64, i64) {
    let start = chrono::Utc::now() + chrono::Duration::seconds(2);
    let end = start + chrono::Duration::from_std(window).expect("a window in range");
    let answer = reqwest::Client::new()
        .post(format!("{node}/v1/actions/put-schedule"))
        .json(&json!({ "name": SCHEDULE, "cron": "@every 2s", "workflowName": Kind::Two.workflow_name(),
            "input": { "text": "tick" }, "overlap": "allow", "catchup": "all", "catchupWindowMs": 3_600_000,
            "startAt": start.to_rfc3339(), "endAt": end.to_rfc3339() }))
        .send()
        .await
        .expect("put-schedule answers");
    assert!(
        answer.status().is_success(),
        "put-schedule: {}",
        answer.text().await.unwrap_or_default()
    );
    (start.timestamp_millis(), end.timestamp_millis())
}

/// Waits (up to `patience`) until the schedule fired its last checked tick, which a
/// late fault may have held up: the drain then waits for its job.
pub async fn wait_for_last_tick(client: &Client, span_ms: (i64, i64), patience: Duration) {
    let deadline = std::time::Instant::now() + patience;
    while std::time::Instant::now() < deadline {
        let latest: Option<i64> = client
            .query_one(
                "SELECT (extract(epoch FROM max(scheduled_for)) * 1000)::bigint
                   FROM workflow_run WHERE schedule_name = $1",
                &[&SCHEDULE],
            )
            .await
            .ok()
            .and_then(|row| row.get(0));
        if latest.is_some_and(|latest| latest >= span_ms.1 - 2 * TICK_MS) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reads the jobs the schedule made per tick, and which `Limited` jobs were claimed
/// more than once.
pub async fn read_ticks(client: &Client, span_ms: (i64, i64)) -> Ticks {
    let rows = client
        .query(
            "SELECT (extract(epoch FROM scheduled_for) * 1000)::bigint, count(*),
                    GREATEST(0, max(extract(epoch FROM scheduled_for - created_at) * 1000))::bigint
               FROM workflow_run WHERE schedule_name = $1 GROUP BY 1",
            &[&SCHEDULE],
        )
        .await
        .expect("the schedule's jobs");
    let jobs = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let early_ms = rows.iter().map(|row| (row.get(0), row.get(2))).collect();
    let reclaimed = client
        .query(
            "SELECT job_id::text FROM workflow_run WHERE workflow_name = $1 AND claims > 1",
            &[&Kind::Limited.workflow_name()],
        )
        .await
        .expect("the limited jobs' claims")
        .into_iter()
        .map(|row| row.get(0))
        .collect();
    Ticks {
        span_ms,
        jobs,
        early_ms,
        reclaimed,
    }
}

/// Every check of this module, and the most `Limited` calls that were in flight at
/// once (below [`LIMIT`]: the limit was never put to the test).
pub fn check(specs: &[JobSpec], calls: &[Call], ticks: &Ticks) -> (Vec<Breach>, usize) {
    let limited: std::collections::BTreeSet<&str> = specs
        .iter()
        .filter(|s| s.kind == Kind::Limited)
        .map(|s| s.id.as_str())
        .collect();
    let calls: Vec<&Call> = calls
        .iter()
        .filter(|c| limited.contains(c.job.as_str()))
        .collect();
    let reclaimed = |call: &Call| ticks.reclaimed.contains(&call.job);
    let (mut breaches, peak) = concurrency_breaches(&calls, &reclaimed);
    breaches.extend(rate_breaches(&calls, &reclaimed));
    breaches.extend(tick_breaches(ticks));
    (breaches, peak)
}

/// The moment the most `Limited` calls were in flight beyond the limit and what the
/// re-claimed jobs among them excuse, and the most in flight at once. A hung call is
/// left out: its caller gave up at its deadline while the target still held it.
fn concurrency_breaches(
    calls: &[&Call],
    reclaimed: &dyn Fn(&Call) -> bool,
) -> (Vec<Breach>, usize) {
    let mut edges: Vec<(i64, i32, bool)> = calls
        .iter()
        .filter(|c| c.outcome != Outcome::Hung)
        .flat_map(|c| {
            let excusing = reclaimed(c);
            [(c.started_ms, 1, excusing), (c.ended_ms, -1, excusing)]
        })
        .collect();
    // An end before a start at the same instant: back to back is not at once.
    edges.sort();
    let (mut in_flight, mut excusing, mut peak) = (0i32, 0i32, 0usize);
    let mut worst = None::<(i64, usize, i32)>;
    for (at, change, excuses) in edges {
        in_flight += change;
        if excuses {
            excusing += change;
        }
        // A call of no length ends (sorted first) before it starts: the counts dip
        // below what is in flight for that instant, never above.
        let (now, excused) = (in_flight.max(0) as usize, excusing.max(0) as usize);
        peak = peak.max(now);
        let over = now.saturating_sub(LIMIT);
        if over > excused && worst.is_none_or(|(_, most, _)| now > most) {
            worst = Some((at, now, excusing));
        }
    }
    let breaches = worst
        .map(|(at, most, excusing)| Breach {
            invariant: LIMITS,
            detail: format!(
                "{most} calls of the limit-{LIMIT} key in flight at {at} ms, {excusing} of them of jobs claimed again"
            ),
        })
        .into_iter()
        .collect();
    (breaches, peak)
}

/// Any span of the rate-limited step's calls holding more than a token bucket lets
/// through: its burst, plus its rate over the span (and a call's lag behind its
/// token), plus one per call in the span of a job claimed again.
fn rate_breaches(calls: &[&Call], reclaimed: &dyn Fn(&Call) -> bool) -> Vec<Breach> {
    let mut starts: Vec<(i64, bool)> = calls
        .iter()
        .filter(|c| c.step == "embed")
        .map(|c| (c.started_ms, reclaimed(c)))
        .collect();
    starts.sort();
    // excusing[k]: calls of re-claimed jobs among the first k.
    let mut excusing = vec![0usize; starts.len() + 1];
    for (k, (_, excuses)) in starts.iter().enumerate() {
        excusing[k + 1] = excusing[k] + usize::from(*excuses);
    }
    for (i, (first, _)) in starts.iter().enumerate() {
        for (j, (last, _)) in starts.iter().enumerate().skip(i) {
            let count = j - i + 1;
            let span_s = (last - first) as f64 / 1000.0;
            let allowed = BURST as f64
                + RATE_PER_S * (span_s + TOKEN_TO_CALL_MS / 1000.0)
                + (excusing[j + 1] - excusing[i]) as f64;
            if count as f64 > allowed.floor() {
                return vec![Breach {
                    invariant: RATES,
                    detail: format!(
                        "{count} calls of the {RATE_PER_S}/s step (burst {BURST}) in {:.0} ms from {first} ms",
                        span_s * 1000.0
                    ),
                }];
            }
        }
    }
    Vec::new()
}

/// Each tick of the span (its edges left out) has exactly one job, none two, and
/// none was made before its tick (by the database's clock).
fn tick_breaches(ticks: &Ticks) -> Vec<Breach> {
    let mut breaches: Vec<Breach> = ticks
        .jobs
        .iter()
        .filter(|(_, jobs)| **jobs > 1)
        .map(|(tick, jobs)| Breach {
            invariant: TICKS,
            detail: format!("the tick at {tick} ms made {jobs} jobs"),
        })
        .collect();
    for (tick, early) in ticks.early_ms.iter().filter(|(_, early)| **early > 0) {
        breaches.push(Breach {
            invariant: TICKS,
            detail: format!("the tick at {tick} ms made its job {early} ms before it"),
        });
    }
    let (start, end) = ticks.span_ms;
    let first = (start / TICK_MS + 2) * TICK_MS;
    let missed: Vec<i64> = (first..end - TICK_MS)
        .step_by(TICK_MS as usize)
        .filter(|tick| !ticks.jobs.contains_key(tick))
        .collect();
    if let Some(tick) = missed.first() {
        breaches.push(Breach {
            invariant: TICKS,
            detail: format!("{} ticks made no job, the first at {tick} ms", missed.len()),
        });
    }
    if ticks.jobs.is_empty() {
        breaches.push(Breach {
            invariant: TICKS,
            detail: "the schedule made no job at all".into(),
        });
    }
    breaches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(started_ms: i64, ended_ms: i64, step: &str) -> Call {
        Call {
            job: "j".into(),
            step: step.into(),
            started_ms,
            ended_ms,
            outcome: Outcome::Answered,
        }
    }

    #[test]
    fn one_call_over_the_limit_needs_a_fault_over_it() {
        let calls: Vec<Call> = (0..=LIMIT as i64)
            .map(|i| call(i, 100, "tokenize"))
            .collect();
        let refs: Vec<&Call> = calls.iter().collect();
        let (breaches, peak) = concurrency_breaches(&refs, &|_| false);
        assert_eq!((breaches.len(), peak), (1, LIMIT + 1));
        assert!(concurrency_breaches(&refs, &|_| true).0.is_empty());
        let in_turn: Vec<Call> = (0..10)
            .map(|i| call(i * 10, i * 10 + 10, "tokenize"))
            .collect();
        let refs: Vec<&Call> = in_turn.iter().collect();
        assert_eq!(concurrency_breaches(&refs, &|_| false), (Vec::new(), 1));
    }

    #[test]
    fn a_burst_beyond_the_bucket_is_a_breach() {
        let at_rate: Vec<Call> = (0..20)
            .map(|i| call(i * (1000.0 / RATE_PER_S) as i64, 0, "embed"))
            .collect();
        let refs: Vec<&Call> = at_rate.iter().collect();
        assert!(rate_breaches(&refs, &|_| false).is_empty());
        let burst: Vec<Call> = (0..=BURST as i64 + 1)
            .map(|i| call(i, 0, "embed"))
            .collect();
        let refs: Vec<&Call> = burst.iter().collect();
        assert_eq!(rate_breaches(&refs, &|_| false).len(), 1);
        assert!(rate_breaches(&refs, &|_| true).is_empty());
    }

    #[test]
    fn a_tick_twice_or_never_is_a_breach() {
        let mut ticks = Ticks {
            span_ms: (0, 20 * TICK_MS),
            jobs: (0..20).map(|i| (i * TICK_MS, 1)).collect(),
            ..Ticks::default()
        };
        assert!(tick_breaches(&ticks).is_empty());
        ticks.jobs.insert(6 * TICK_MS, 2);
        ticks.jobs.remove(&(8 * TICK_MS));
        assert_eq!(tick_breaches(&ticks).len(), 2);
        ticks.early_ms.insert(4 * TICK_MS, 30);
        assert_eq!(tick_breaches(&ticks).len(), 3);
    }
}
