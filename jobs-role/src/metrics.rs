//! The jobs role's metrics, registered in the node's registry (`GET /metrics`).
//!
//! Two kinds:
//! - **events counted where they happen** (claims, settlements by outcome, step
//!   latency and gRPC errors, lease renewals and lost claims, sweeps, relay publishes,
//!   request records): counters and histograms, per node;
//! - **state read now and then** by [`metrics_loop`] (every `[jobs].metrics_interval_ms`,
//!   never per scrape): live jobs by status and workflow, the age of the oldest
//!   claimable QUEUED job, WAITING jobs by step, the outbox's PENDING, HELD and FAILED
//!   depth and the age of its oldest PENDING row, the pool's connections, the
//!   per-target permits. These read the shared database, so every node reports the
//!   same fleet-wide numbers: aggregate them with `max`, not `sum`.
//!
//! Finished jobs are not counted from the table (that would scan its whole history
//! every few seconds): `protomolt_jobs_settlements_total` counts them as they happen.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use registry_stub::metrics::{HistogramFamily, Labels, label_value, latency_family, seconds};
use tokio_util::sync::CancellationToken;

use crate::store::Store;
use crate::worker::limits::TargetLimits;

/// A gauge holding seconds.
type SecondsGauge = Gauge<f64, AtomicU64>;

/// The most distinct workflows (and, separately, workflow-and-step pairs) the
/// metrics keep as label values; past them the rest are counted under `other`, so a
/// caller inventing names (inline workflows carry any name) cannot grow the node's
/// memory or a scrape without bound.
pub const MAX_LABEL_VALUES: usize = 500;

/// The label value everything past [`MAX_LABEL_VALUES`] is counted under.
pub const OTHER: &str = "other";

/// Label values admitted so far, first come first kept.
#[derive(Clone, Default)]
struct Admitted(std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl Admitted {
    /// `value`, or [`OTHER`] once [`MAX_LABEL_VALUES`] others were admitted.
    fn admit(&self, value: &str) -> bool {
        let mut admitted = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if admitted.contains(value) {
            return true;
        }
        if admitted.len() < MAX_LABEL_VALUES {
            admitted.insert(value.to_owned());
            return true;
        }
        false
    }
}

/// The label sets each counted gauge family has shown, so a series that empties reads
/// 0 instead of vanishing (an alert on `protomolt_jobs_jobs{status="QUEUED"}` keeps a
/// series to watch, and a dashboard draws a drop to zero, not a gap). Bounded as the
/// labels are: workflows and steps past [`MAX_LABEL_VALUES`] share [`OTHER`].
#[derive(Clone, Default)]
struct Shown(
    std::sync::Arc<
        std::sync::Mutex<
            std::collections::HashMap<&'static str, std::collections::HashSet<Labels>>,
        >,
    >,
);

impl Shown {
    /// Sets `family` (named `name`) to `counts`, summed per label set; every label set
    /// shown before and absent now reads 0.
    fn set_counts(
        &self,
        name: &'static str,
        family: &Family<Labels, Gauge>,
        counts: impl IntoIterator<Item = (Labels, i64)>,
    ) {
        let mut now: std::collections::HashMap<Labels, i64> = std::collections::HashMap::new();
        for (labels, count) in counts {
            *now.entry(labels).or_default() += count;
        }
        let mut shown = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let seen = shown.entry(name).or_default();
        for labels in seen.iter().filter(|labels| !now.contains_key(*labels)) {
            family.get_or_create(labels).set(0);
        }
        for (labels, count) in now {
            family.get_or_create(&labels).set(count);
            seen.insert(labels);
        }
    }
}

/// Every metric of the jobs role. `Default` makes a set registered nowhere (a
/// worker or consumer built outside a node, in tests).
#[derive(Clone)]
pub struct JobsMetrics {
    /// Jobs claimed by this node's workers.
    pub claims: Counter,
    /// Settlements written by this node, by `outcome` (completed, waiting, retried,
    /// failed, dead, cancelled, released) and `workflow`.
    pub settlements: Family<Labels, Counter>,
    /// Segment latency (claim to settlement), by `workflow`.
    pub segment_seconds: HistogramFamily,
    /// Step latency (call and checkpoint), by `workflow` and `step`.
    pub step_seconds: HistogramFamily,
    /// Failed step calls, by `workflow`, `step` and gRPC `code` (or the failure's
    /// kind: deadline, validation, gate, mapping, workflow).
    pub step_errors: Family<Labels, Counter>,
    /// Elements of map steps stored, by `workflow`, `step` and `outcome` (`answered`,
    /// or `failed` under `onItemFailure: "collect"`).
    pub map_items: Family<Labels, Counter>,
    /// Lease renewals written.
    pub lease_renewals: Counter,
    /// Claims found lost (another worker owns the job).
    pub lost_claims: Counter,
    /// Expired leases the sweeper settled, by `outcome` (requeued, dead, cancelled,
    /// given_back: requeued with the attempt given back after a database refusal).
    pub sweeps: Family<Labels, Counter>,
    /// Parked steps whose wait ran out.
    pub wait_timeouts: Counter,
    /// Outbox rows the relay published, by `outcome` (published, failed, deferred).
    pub relay_events: Family<Labels, Counter>,
    /// How long one relay batch took to publish and be acknowledged.
    pub relay_publish_seconds: HistogramFamily,
    /// Events producers rebuilt, by `reason`: `fatal` (librdkafka put it in a fatal
    /// state) or `stuck` (it published nothing for 30 s while the broker answered).
    pub relay_producer_rebuilds: Family<Labels, Counter>,
    /// Request records the consumer handled, by `outcome` (submitted, failed_row,
    /// rejected).
    pub request_records: Family<Labels, Counter>,
    /// Request consumers that found their group stuck on a partition, by `action`
    /// (rejoin, rebuild).
    pub request_consumer_recoveries: Family<Labels, Counter>,
    /// Records of the requests topic not yet consumed, by `partition` (as of the
    /// last record this node took from it).
    pub request_lag: Family<Labels, Gauge>,
    /// Live jobs by `status` (QUEUED, RUNNING, WAITING) and `workflow`.
    pub jobs: Family<Labels, Gauge>,
    /// Age of the oldest QUEUED job that could be claimed now.
    pub oldest_claimable_seconds: SecondsGauge,
    /// WAITING jobs by `workflow` and `step`.
    pub waiting: Family<Labels, Gauge>,
    /// Parked jobs by `kind`: what the wait that ends first is for (`external`,
    /// `event`, `sleep`).
    pub parked: Family<Labels, Gauge>,
    /// Outbox rows by `status` (PENDING, HELD, FAILED).
    pub outbox: Family<Labels, Gauge>,
    /// Age of the oldest PENDING outbox row.
    pub oldest_pending_seconds: SecondsGauge,
    /// The pool's connections by `state` (in_use, idle, waiting: callers waiting
    /// for one).
    pub pool: Family<Labels, Gauge>,
    /// Per-target permits by `target` and `state` (in_use, waiting).
    pub permits: Family<Labels, Gauge>,
    /// When the fleet-wide gauges were last read whole (Unix seconds): alert when it
    /// stops moving.
    pub fleet_read_at: SecondsGauge,
    /// Calls a fleet-wide limit had no room for (each try), by `workflow` and `step`.
    pub throttled_calls: Family<Labels, Counter>,
    /// Tokens left in each fleet-wide limit's bucket, by `limit` (negative in debt).
    pub limit_tokens: Family<Labels, SecondsGauge>,
    /// Calls in flight under each capped fleet-wide limit, by `limit`.
    pub limit_in_flight: Family<Labels, Gauge>,
    /// Paused workflows.
    pub paused_workflows: Gauge,
    /// Concurrency keys by `state`: `with_work` (their lane has queued jobs),
    /// `at_limit` (of those, the ones running their limit: their jobs wait), `paused`.
    pub keys: Family<Labels, Gauge>,
    /// Schedule ticks this node fired, by `outcome`: `fired` (made a job),
    /// `already` (its job was there: a tick fired twice), `skipped_overlap`,
    /// `missed` (the catch-up policy made none), `failed` (its workflow or input
    /// refused).
    pub schedule_ticks: Family<Labels, Counter>,
    /// How late each scheduled job was made after its tick.
    pub schedule_lag_seconds: HistogramFamily,
    /// The last hour minute by minute, for the console's charts (not exported).
    pub history: std::sync::Arc<crate::history::History>,
    workflows: Admitted,
    steps: Admitted,
    targets: Admitted,
    shown: Shown,
}

impl Default for JobsMetrics {
    fn default() -> Self {
        JobsMetrics {
            claims: Counter::default(),
            settlements: Family::default(),
            segment_seconds: latency_family(),
            step_seconds: latency_family(),
            step_errors: Family::default(),
            map_items: Family::default(),
            lease_renewals: Counter::default(),
            lost_claims: Counter::default(),
            sweeps: Family::default(),
            wait_timeouts: Counter::default(),
            relay_events: Family::default(),
            relay_publish_seconds: latency_family(),
            relay_producer_rebuilds: Family::default(),
            request_records: Family::default(),
            request_consumer_recoveries: Family::default(),
            request_lag: Family::default(),
            jobs: Family::default(),
            oldest_claimable_seconds: SecondsGauge::default(),
            waiting: Family::default(),
            parked: Family::default(),
            outbox: Family::default(),
            oldest_pending_seconds: SecondsGauge::default(),
            pool: Family::default(),
            permits: Family::default(),
            fleet_read_at: SecondsGauge::default(),
            throttled_calls: Family::default(),
            limit_tokens: Family::default(),
            limit_in_flight: Family::default(),
            paused_workflows: Gauge::default(),
            keys: Family::default(),
            schedule_ticks: Family::default(),
            schedule_lag_seconds: latency_family(),
            history: std::sync::Arc::default(),
            workflows: Admitted::default(),
            steps: Admitted::default(),
            targets: Admitted::default(),
            shown: Shown::default(),
        }
    }
}

impl JobsMetrics {
    /// Fresh metrics registered in `registry` (names `protomolt_jobs_*`).
    pub fn register(registry: &mut Registry) -> JobsMetrics {
        let metrics = JobsMetrics::default();
        let jobs = registry.sub_registry_with_prefix("protomolt_jobs");
        let m = metrics.clone();
        jobs.register("claims", "Jobs claimed by this node", m.claims);
        jobs.register(
            "settlements",
            "Settlements this node wrote, by outcome and workflow",
            m.settlements,
        );
        jobs.register(
            "segment_duration_seconds",
            "Segment latency, claim to settlement, by workflow",
            m.segment_seconds,
        );
        jobs.register(
            "step_duration_seconds",
            "Step latency (the call and its checkpoint), by workflow and step",
            m.step_seconds,
        );
        jobs.register(
            "step_errors",
            "Failed steps by workflow, step and gRPC code (or failure kind)",
            m.step_errors,
        );
        jobs.register(
            "map_items",
            "Elements of map steps stored, by workflow, step and outcome (answered, failed)",
            m.map_items,
        );
        jobs.register(
            "throttled_calls",
            "Calls a fleet-wide limit had no room for, by workflow and step",
            m.throttled_calls,
        );
        jobs.register(
            "limit_tokens",
            "Tokens left in each fleet-wide limit's bucket (negative in debt)",
            m.limit_tokens,
        );
        jobs.register(
            "limit_in_flight",
            "Calls in flight under each capped fleet-wide limit",
            m.limit_in_flight,
        );
        jobs.register(
            "schedule_ticks",
            "Schedule ticks this node fired, by outcome (fired, already, skipped_overlap, missed, failed)",
            m.schedule_ticks,
        );
        jobs.register(
            "schedule_lag_seconds",
            "How late scheduled jobs were made after their tick",
            m.schedule_lag_seconds,
        );
        jobs.register(
            "paused_workflows",
            "Workflows paused fleet-wide",
            m.paused_workflows,
        );
        jobs.register(
            "concurrency_keys",
            "Concurrency keys by state: with_work, at_limit (their queued jobs wait), paused",
            m.keys,
        );
        jobs.register("lease_renewals", "Lease renewals written", m.lease_renewals);
        jobs.register(
            "lost_claims",
            "Claims found lost to another worker",
            m.lost_claims,
        );
        jobs.register(
            "sweeps",
            "Expired leases the sweeper settled, by outcome",
            m.sweeps,
        );
        jobs.register(
            "wait_timeouts",
            "Parked steps whose wait ran out",
            m.wait_timeouts,
        );
        jobs.register(
            "relay_events",
            "Outbox rows the relay handled, by outcome",
            m.relay_events,
        );
        jobs.register(
            "relay_publish_duration_seconds",
            "Time for one relay batch to be published and acknowledged",
            m.relay_publish_seconds,
        );
        jobs.register(
            "relay_producer_rebuilds",
            "Events producers rebuilt, by reason (fatal, stuck)",
            m.relay_producer_rebuilds,
        );
        jobs.register(
            "request_records",
            "Request records the consumer handled, by outcome",
            m.request_records,
        );
        jobs.register(
            "request_consumer_recoveries",
            "Request consumers that found their group stuck on a partition, by action (rejoin, rebuild)",
            m.request_consumer_recoveries,
        );
        jobs.register(
            "request_lag",
            "Records of the requests topic not yet consumed, by partition",
            m.request_lag,
        );
        jobs.register(
            "jobs",
            "Live jobs by status and workflow (fleet-wide, read periodically)",
            m.jobs,
        );
        jobs.register(
            "oldest_claimable_age_seconds",
            "Age of the oldest QUEUED job that could be claimed now (fleet-wide)",
            m.oldest_claimable_seconds,
        );
        jobs.register(
            "waiting",
            "WAITING jobs by workflow and step (fleet-wide)",
            m.waiting,
        );
        jobs.register(
            "parked",
            "Parked jobs by what the wait that ends first is for: external, event, sleep (fleet-wide)",
            m.parked,
        );
        jobs.register(
            "outbox_events",
            "Outbox rows by status: PENDING, HELD, FAILED (fleet-wide)",
            m.outbox,
        );
        jobs.register(
            "outbox_oldest_pending_age_seconds",
            "Age of the oldest PENDING outbox row (fleet-wide)",
            m.oldest_pending_seconds,
        );
        jobs.register(
            "pool_connections",
            "This node's database connections by state",
            m.pool,
        );
        jobs.register(
            "fleet_state_read_timestamp_seconds",
            "When the fleet-wide gauges were last read whole (Unix time)",
            m.fleet_read_at,
        );
        jobs.register(
            "target_permits",
            "Per-target permits in use and waited for, by target",
            m.permits,
        );
        metrics
    }

    /// The `workflow` label of `workflow` (made safe, and bounded: see
    /// [`MAX_LABEL_VALUES`]).
    pub fn workflow_label(&self, workflow: &str) -> String {
        let workflow = label_value(workflow);
        if self.workflows.admit(&workflow) {
            workflow
        } else {
            OTHER.to_owned()
        }
    }

    /// The `target` label of a step target (bounded as workflows are: the series of
    /// a target stay, at 0, once shown).
    fn target_label(&self, target: &str) -> String {
        let target = label_value(target);
        if self.targets.admit(&target) {
            target
        } else {
            OTHER.to_owned()
        }
    }

    /// The `workflow` and `step` labels of a step (bounded as pairs).
    fn step_labels(&self, workflow: &str, step: &str) -> Labels {
        let workflow = self.workflow_label(workflow);
        let step = label_value(step);
        let (workflow, step) = if self.steps.admit(&format!("{workflow}\u{0}{step}")) {
            (workflow, step)
        } else {
            (OTHER.to_owned(), OTHER.to_owned())
        };
        vec![("workflow", workflow), ("step", step)]
    }

    /// Counts a settlement.
    pub fn settled(&self, outcome: &'static str, workflow: &str) {
        self.settlements
            .get_or_create(&vec![
                ("outcome", outcome.to_owned()),
                ("workflow", self.workflow_label(workflow)),
            ])
            .inc();
    }

    /// Times a segment.
    pub fn segment_took(&self, workflow: &str, took: Duration) {
        self.segment_seconds
            .get_or_create(&vec![("workflow", self.workflow_label(workflow))])
            .observe(seconds(took));
    }

    /// Times a step.
    pub fn step_took(&self, workflow: &str, step: &str, took: Duration) {
        self.history.step_took(took);
        self.step_seconds
            .get_or_create(&self.step_labels(workflow, step))
            .observe(seconds(took));
    }

    /// Counts a call a fleet-wide limit had no room for.
    pub fn throttled(&self, workflow: &str, step: &str) {
        self.throttled_calls
            .get_or_create(&self.step_labels(workflow, step))
            .inc();
    }

    /// Counts a failed step (`code`: one of a fixed set).
    pub fn step_failed(&self, workflow: &str, step: &str, code: &str) {
        let mut labels = self.step_labels(workflow, step);
        labels.push(("code", code.to_owned()));
        self.step_errors.get_or_create(&labels).inc();
    }

    /// Counts the elements of a map step stored, by outcome.
    pub fn map_items(&self, workflow: &str, step: &str, items: &[(usize, workflow::ItemOutcome)]) {
        let failed = items
            .iter()
            .filter(|(_, outcome)| matches!(outcome, workflow::ItemOutcome::Failed(_)))
            .count() as u64;
        for (outcome, count) in [
            ("answered", items.len() as u64 - failed),
            ("failed", failed),
        ] {
            if count > 0 {
                let mut labels = self.step_labels(workflow, step);
                labels.push(("outcome", outcome.to_owned()));
                self.map_items.get_or_create(&labels).inc_by(count);
            }
        }
    }

    /// Counts with a single `outcome` label.
    pub fn count(family: &Family<Labels, Counter>, outcome: &'static str, by: u64) {
        family
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc_by(by);
    }
}

/// Reads the fleet's state into the gauges every `every`, until `shutdown`.
pub async fn metrics_loop(
    store: Store,
    limits: Option<std::sync::Arc<TargetLimits>>,
    metrics: JobsMetrics,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        if let Err(error) = read_state(&store, limits.as_deref(), &metrics).await {
            tracing::warn!(%error, "reading the fleet's state for the metrics failed (protomolt_jobs_fleet_state_read_timestamp_seconds stops moving); trying again");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

async fn read_state(
    store: &Store,
    limits: Option<&TargetLimits>,
    metrics: &JobsMetrics,
) -> Result<(), crate::store::StoreError> {
    let pool = store.pool_status();
    for (state, value) in [
        ("in_use", pool.size.saturating_sub(pool.available)),
        ("idle", pool.available),
        ("waiting", pool.waiting),
    ] {
        metrics
            .pool
            .get_or_create(&vec![("state", state.to_owned())])
            .set(i64::try_from(value).unwrap_or(i64::MAX));
    }
    if let Some(limits) = limits {
        let usage = limits
            .usage()
            .into_iter()
            .flat_map(|(target, in_use, waiting)| {
                [("in_use", in_use), ("waiting", waiting)].map(|(state, value)| {
                    (
                        vec![
                            ("target", metrics.target_label(&target)),
                            ("state", state.to_owned()),
                        ],
                        i64::try_from(value).unwrap_or(i64::MAX),
                    )
                })
            });
        metrics.shown.set_counts("permits", &metrics.permits, usage);
    }
    // The alerting part first and on its own: a slow count of the live jobs (or a
    // statement timeout) must not leave the oldest ages and the outbox depth stale.
    let backlog = store.fleet_backlog().await;
    if let Ok(state) = &backlog {
        for (status, count) in [
            ("PENDING", state.outbox_pending),
            ("HELD", state.outbox_held),
            ("FAILED", state.outbox_failed),
        ] {
            metrics
                .outbox
                .get_or_create(&vec![("status", status.to_owned())])
                .set(count);
        }
        metrics
            .oldest_claimable_seconds
            .set(state.oldest_claimable_seconds);
        metrics
            .oldest_pending_seconds
            .set(state.oldest_pending_seconds);
    }
    let (live_jobs, waiting) = store.fleet_live().await?;
    let parked = store.parked_by_kind().await?;
    backlog?;
    metrics.fleet_read_at.set(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    );
    // A workflow or step that emptied reads 0 rather than its last count, and its
    // series stays (see `Shown`).
    let live_of = |wanted: &str| {
        live_jobs
            .iter()
            .filter(|(status, _, _)| status == wanted)
            .map(|(_, _, count)| *count)
            .sum::<i64>()
    };
    metrics
        .history
        .live(live_of("QUEUED"), live_of("RUNNING"), live_of("WAITING"));
    // Summed per label set: names past the bound share `other`.
    let jobs = live_jobs.into_iter().map(|(status, workflow, count)| {
        (
            vec![
                ("status", status),
                ("workflow", metrics.workflow_label(&workflow)),
            ],
            count,
        )
    });
    metrics.shown.set_counts("jobs", &metrics.jobs, jobs);
    // Every kind is shown, 0 when nothing waits on it; a kind this engine never wrote
    // (a drifted row) is counted as `other`.
    let kinds = ["external", "event", "sleep", "child"];
    let parked = kinds
        .map(|kind| (vec![("kind", kind.to_owned())], 0))
        .into_iter()
        .chain(parked.into_iter().map(|(kind, count)| {
            let kind = if kinds.contains(&kind.as_str()) {
                kind
            } else {
                OTHER.to_owned()
            };
            (vec![("kind", kind)], count)
        }));
    metrics.shown.set_counts("parked", &metrics.parked, parked);
    read_flow(store, metrics).await?;
    let waiting = waiting
        .into_iter()
        .map(|(workflow, step, count)| (metrics.step_labels(&workflow, &step), count));
    metrics
        .shown
        .set_counts("waiting", &metrics.waiting, waiting);
    Ok(())
}

/// The most fleet-wide limits the gauges show.
const LIMITS_SHOWN: i64 = 50;

/// Flow control's gauges: the limits' tokens and calls in flight, paused workflows,
/// concurrency keys by state.
async fn read_flow(store: &Store, metrics: &JobsMetrics) -> Result<(), crate::store::StoreError> {
    let limits = store.limits_state(LIMITS_SHOWN).await?;
    metrics.limit_tokens.clear();
    metrics.limit_in_flight.clear();
    for limit in limits {
        let labels = vec![("limit", label_value(&limit.name))];
        if let Some(tokens) = limit.tokens {
            metrics.limit_tokens.get_or_create(&labels).set(tokens);
        }
        if limit.max_concurrent.is_some() {
            metrics
                .limit_in_flight
                .get_or_create(&labels)
                .set(limit.in_flight);
        }
    }
    let paused = store.paused_workflows().await?;
    metrics
        .paused_workflows
        .set(i64::try_from(paused.len()).unwrap_or(i64::MAX));
    let summary = store.keys_summary().await?;
    for (state, count) in [
        ("with_work", summary.with_work),
        ("at_limit", summary.at_limit),
        ("paused", summary.paused),
    ] {
        metrics
            .keys
            .get_or_create(&vec![("state", state.to_owned())])
            .set(count);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invented_names_past_the_bound_are_counted_as_other() {
        let metrics = JobsMetrics::default();
        for i in 0..MAX_LABEL_VALUES + 100 {
            metrics.settled("completed", &format!("workflow-{i}"));
        }
        let other = vec![
            ("outcome", "completed".to_owned()),
            ("workflow", OTHER.to_owned()),
        ];
        assert_eq!(metrics.settlements.get(&other).map(|c| c.get()), Some(100));
        let first = vec![
            ("outcome", "completed".to_owned()),
            ("workflow", "workflow-0".to_owned()),
        ];
        assert_eq!(metrics.settlements.get(&first).map(|c| c.get()), Some(1));

        // Steps are bounded as pairs: one workflow inventing step names too.
        for i in 0..MAX_LABEL_VALUES + 10 {
            metrics.step_took("workflow-0", &format!("step-{i}"), Duration::from_millis(1));
        }
        let others = vec![("workflow", OTHER.to_owned()), ("step", OTHER.to_owned())];
        assert!(metrics.step_seconds.get(&others).is_some());
        assert!(
            metrics
                .step_seconds
                .get(&vec![
                    ("workflow", "workflow-0".to_owned()),
                    ("step", format!("step-{}", MAX_LABEL_VALUES + 5))
                ])
                .is_none()
        );
    }

    #[test]
    fn a_name_with_the_formats_own_characters_cannot_break_the_exposition() {
        let mut registry = Registry::default();
        let metrics = JobsMetrics::register(&mut registry);
        metrics.settled("completed", "evil\"} 1 # \\\nnext");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("protomolt_jobs_settlements_total"))
            .unwrap();
        assert_eq!(
            line,
            "protomolt_jobs_settlements_total{outcome=\"completed\",workflow=\"evil_} 1 # __next\"} 1"
        );
    }
}
