//! Fleet-wide limits before each call: the `[[jobs.target_limits]]` whose pattern
//! matches the step's target, and the step's own `rateLimit`, taken from PostgreSQL
//! all at once ([`Store::take_limits`]).
//!
//! A call the limits have room for goes, holding its caps' hold until it ends. One
//! they have no room for waits in process when room comes within
//! `[jobs].throttle_wait_ms`; otherwise it is held back while the segment's other
//! calls run (it is tried again as one ends), and when none run the segment stops
//! before it: the job is given back, its attempt kept and the release not counted,
//! claimable when the limits have room, its `throttled` column saying why. A throttle
//! never fails a job. The node's `max_concurrent_per_target` stays beside these as a
//! local guard.

use std::time::Duration;

use uuid::Uuid;
use workflow::compile::Rate;
use workflow::runner::{Admission, CallCost};
use workflow::{CallGuard, CompiledStep};

use crate::config::JobsConfig;
use crate::metrics::JobsMetrics;
use crate::store::{LimitAsk, Store};

/// What a hold lasts beyond the call's own bound.
const HOLD_MARGIN: Duration = Duration::from_secs(30);

/// A call the fleet's limits deferred past the in-process wait: the job is given back
/// until `delay` has passed.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct Throttled {
    /// How long until the limits may have room.
    pub delay: Duration,
    /// `THROTTLED: ...`, naming the limits.
    pub reason: String,
}

/// One configured target limit.
#[derive(Debug, Clone)]
struct TargetLimit {
    pattern: String,
    rate: Option<Rate>,
    burst: u32,
    max_concurrent: Option<u32>,
}

/// The node's view of the fleet's limits.
#[derive(Debug)]
pub struct Throttle {
    targets: Vec<TargetLimit>,
    wait_in_process: Duration,
    /// How long a call's holds last at most (the lease: a call never outlives it).
    hold_for: Duration,
}

/// Releases a call's holds when it ends.
struct Holds {
    store: Store,
    hold: Uuid,
}

impl Drop for Holds {
    fn drop(&mut self) {
        let (store, hold) = (self.store.clone(), self.hold);
        // A hold not released (the runtime is gone) expires on its own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.release_holds(hold).await {
                    tracing::debug!(error = %e, "releasing a call's holds failed; they expire on their own");
                }
            });
        }
    }
}

impl Throttle {
    /// The limits `config` declares.
    pub fn new(config: &JobsConfig) -> Throttle {
        Throttle {
            targets: config
                .target_limits
                .iter()
                .map(|limit| TargetLimit {
                    pattern: limit.targets.clone(),
                    rate: limit.parsed_rate(),
                    burst: limit.burst.unwrap_or(1),
                    max_concurrent: limit.max_concurrent,
                })
                .collect(),
            wait_in_process: Duration::from_millis(config.throttle_wait_ms),
            hold_for: config.lease(),
        }
    }

    /// The limits a call of `step` of workflow `workflow` costing `cost` takes from,
    /// each with how a person reads it.
    fn asks(
        &self,
        workflow: &str,
        step: &CompiledStep,
        cost: &CallCost,
    ) -> Vec<(LimitAsk, String)> {
        // A target limit (the operator's) counts calls: one unit each, whatever a
        // workflow's `units` say; the step's own bucket takes its units.
        let units = cost.units as f64;
        let mut asks = Vec::new();
        if let Some(target) = &step.target {
            for limit in self
                .targets
                .iter()
                .filter(|l| workflow::target_matches(&l.pattern, target))
            {
                let mut said = Vec::new();
                if let Some(rate) = limit.rate {
                    said.push(rate.to_string());
                }
                if let Some(cap) = limit.max_concurrent {
                    said.push(format!("{cap} at once"));
                }
                asks.push((
                    LimitAsk {
                        name: format!("target:{}", limit.pattern),
                        rate: limit
                            .rate
                            .map(|rate| (rate.per_second(), f64::from(limit.burst))),
                        max_concurrent: limit
                            .max_concurrent
                            .map(|cap| i32::try_from(cap).unwrap_or(i32::MAX)),
                        units: 1.0,
                    },
                    format!("target limit '{}' ({})", limit.pattern, said.join(", ")),
                ));
            }
        }
        if let Some(limit) = &step.rate_limit {
            let name = limit.bucket_for(workflow, &step.name, cost.key.as_deref());
            asks.push((
                LimitAsk {
                    name: format!("step:{name}"),
                    rate: Some((limit.rate.per_second(), f64::from(limit.burst))),
                    max_concurrent: None,
                    units,
                },
                format!("rateLimit '{name}' ({})", limit.rate),
            ));
        }
        asks
    }

    /// Whether a target limit matches `step`'s target.
    pub fn limits(&self, step: &CompiledStep) -> bool {
        step.target.as_deref().is_some_and(|target| {
            self.targets
                .iter()
                .any(|l| workflow::target_matches(&l.pattern, target))
        })
    }

    /// Whether a call of `step` may go now (see the module docs).
    pub async fn admit(
        &self,
        store: &Store,
        metrics: &JobsMetrics,
        workflow: &str,
        step: &CompiledStep,
        cost: &CallCost,
        others_in_flight: bool,
    ) -> Admission {
        let asks = self.asks(workflow, step, cost);
        if asks.is_empty() {
            return Admission::Go(Box::new(()));
        }
        let limits: Vec<LimitAsk> = asks.iter().map(|(ask, _)| ask.clone()).collect();
        let hold = Uuid::new_v4();
        // A hold outlives the call: the lease, or the step's own longer deadline.
        let hold_for = self.hold_for.max(step.deadline.unwrap_or_default()) + HOLD_MARGIN;
        let capped = limits.iter().any(|ask| ask.max_concurrent.is_some());
        let mut waited = Duration::ZERO;
        loop {
            let wait = match store.take_limits(&limits, hold, hold_for).await {
                Ok(None) => {
                    let guard: CallGuard = match capped {
                        true => Box::new(Holds {
                            store: store.clone(),
                            hold,
                        }),
                        false => Box::new(()),
                    };
                    return Admission::Go(guard);
                }
                Ok(Some(wait)) => wait,
                Err(e) => {
                    // The limits cannot be read: no call is made past them. A take whose
                    // answer was lost may have registered the hold: let it go.
                    if capped {
                        drop(Holds {
                            store: store.clone(),
                            hold,
                        });
                    }
                    return self.not_now(
                        others_in_flight,
                        Duration::from_secs(1),
                        format!("THROTTLED: the fleet's limits could not be read ({e}); trying again shortly"),
                    );
                }
            };
            metrics.throttled(workflow, &step.name);
            // Waiters of one cap spread out instead of asking together.
            let wait = wait + Duration::from_millis(u64::from(hold.as_u128() as u8 % 50));
            if waited + wait <= self.wait_in_process {
                tokio::time::sleep(wait).await;
                waited += wait;
                continue;
            }
            let named: Vec<&str> = asks.iter().map(|(_, said)| said.as_str()).collect();
            let reason = format!(
                "THROTTLED: step '{}': {} has no room now; the job runs again in about {} ms",
                step.name,
                named.join(" and "),
                wait.as_millis()
            );
            return self.not_now(others_in_flight, wait, reason);
        }
    }

    /// Held back while others run; deferred (the job given back) when none do.
    fn not_now(&self, others_in_flight: bool, delay: Duration, reason: String) -> Admission {
        if others_in_flight {
            Admission::HoldBack
        } else {
            Admission::Defer(Box::new(Throttled { delay, reason }))
        }
    }
}
