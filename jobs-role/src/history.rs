//! The last hour, minute by minute, for the console's fleet charts: kept by the node
//! in memory from figures it already reads (no external service). The metrics loop
//! samples the fleet's live counts (QUEUED, RUNNING, WAITING) every interval, and each
//! step this node runs gives its latency; `get-fleet` adds the completions and
//! failures per minute from the jobs' `finished_at`.
//!
//! A minute keeps its last live counts and up to [`SAMPLES_PER_MINUTE`] step
//! latencies (the first ones, then each new one replacing an older at a rotating
//! place), from which its p95 is read: bounded memory whatever the load. A node that
//! just started has only the minutes since.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// Minutes kept.
pub const MINUTES: usize = 60;
/// Step latencies kept per minute.
pub const SAMPLES_PER_MINUTE: usize = 512;

/// One minute.
#[derive(Debug, Default, Clone)]
struct Minute {
    /// Unix time of its start, in minutes.
    at: u64,
    /// The live counts last read in it (`None`: not read in it).
    live: Option<(i64, i64, i64)>,
    /// Step latencies in milliseconds.
    steps: Vec<u32>,
    /// Steps seen in the minute (beyond what `steps` keeps).
    seen: u64,
}

/// The node's last hour.
#[derive(Debug, Default)]
pub struct History {
    minutes: Mutex<VecDeque<Minute>>,
}

fn unix_minute(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0)
}

impl History {
    /// The minute of `now`, made (and the oldest dropped) as time moves on.
    fn with_minute<T>(&self, now: SystemTime, change: impl FnOnce(&mut Minute) -> T) -> T {
        let at = unix_minute(now);
        // A poisoned lock only means a panic mid-update; the samples stay usable.
        let mut minutes = self.minutes.lock().unwrap_or_else(|p| p.into_inner());
        if minutes.back().is_none_or(|last| last.at < at) {
            minutes.push_back(Minute {
                at,
                ..Minute::default()
            });
            while minutes.len() > MINUTES {
                minutes.pop_front();
            }
        }
        // The newest minute: `at` or later (a clock stepped back writes into it).
        let minute = minutes
            .back_mut()
            .expect("a minute was pushed above when there was none");
        change(minute)
    }

    /// The fleet's live counts, read now.
    pub fn live(&self, queued: i64, running: i64, waiting: i64) {
        self.with_minute(SystemTime::now(), |minute| {
            minute.live = Some((queued, running, waiting));
        });
    }

    /// A step of this node took `took`.
    pub fn step_took(&self, took: Duration) {
        let ms = u32::try_from(took.as_millis()).unwrap_or(u32::MAX);
        self.with_minute(SystemTime::now(), |minute| {
            if minute.steps.len() < SAMPLES_PER_MINUTE {
                minute.steps.push(ms);
            } else {
                // At most SAMPLES_PER_MINUTE, far below usize::MAX on any target.
                let at = (minute.seen % SAMPLES_PER_MINUTE as u64) as usize;
                minute.steps[at] = ms;
            }
            minute.seen += 1;
        });
    }

    /// Each minute kept, oldest first: `{minute (Unix minutes), queued, running,
    /// waiting, steps, p95StepMs}` (counts `null` in a minute not read).
    pub fn minutes(&self) -> Vec<Value> {
        let minutes = self.minutes.lock().unwrap_or_else(|p| p.into_inner());
        minutes
            .iter()
            .map(|minute| {
                let (queued, running, waiting) = match minute.live {
                    Some((q, r, w)) => (json!(q), json!(r), json!(w)),
                    None => (Value::Null, Value::Null, Value::Null),
                };
                json!({
                    "minute": minute.at,
                    "queued": queued,
                    "running": running,
                    "waiting": waiting,
                    "steps": minute.seen,
                    "p95StepMs": p95(&minute.steps),
                })
            })
            .collect()
    }
}

/// The 95th percentile of `samples` (`null` without any).
fn p95(samples: &[u32]) -> Value {
    if samples.is_empty() {
        return Value::Null;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 95).div_ceil(100).max(1) - 1;
    json!(sorted[rank])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_keeps_its_live_counts_and_the_p95_of_its_steps() {
        let history = History::default();
        history.live(10, 2, 1);
        for ms in 1..=100 {
            history.step_took(Duration::from_millis(ms));
        }
        let minutes = history.minutes();
        let last = minutes.last().expect("a minute");
        assert_eq!(last["queued"], 10);
        assert_eq!(last["steps"], 100);
        assert_eq!(last["p95StepMs"], 95);
    }

    #[test]
    fn memory_stays_bounded_under_load() {
        let history = History::default();
        for _ in 0..10 * SAMPLES_PER_MINUTE {
            history.step_took(Duration::from_millis(7));
        }
        let kept = history.minutes.lock().unwrap().back().unwrap().steps.len();
        assert_eq!(kept, SAMPLES_PER_MINUTE);
        assert_eq!(p95(&[]), Value::Null);
    }
}
