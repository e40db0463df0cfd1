//! The `[jobs]` section of the node config.
//!
//! Defaults follow the seed: a 5-minute lease (above p99 segment latency, because LLM
//! steps take minutes), 3 attempts, a 5-second backoff base doubling per attempt, and
//! at most 8 concurrent segments per target. Without `database_url` the role still
//! mounts its verbs, and they answer `unavailable`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `[jobs]` section.
///
/// Serialized in full, `database_url` and `kafka_options` included: whoever prints it
/// masks the secrets (as `protomolt-node check-config` does).
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct JobsConfig {
    /// PostgreSQL URL; without it the jobs verbs answer 503.
    pub database_url: Option<String>,
    /// Required and non-blank: every claim is stamped with it, so the row says which
    /// worker holds a job.
    pub worker_id: String,
    /// Segments this node runs at once (the claim takes as many jobs as there are
    /// free slots); 0 makes a node that serves the verbs but runs no jobs. Also
    /// accepted under its old name, `worker_count`.
    #[serde(alias = "worker_count")]
    pub max_in_flight: usize,
    /// How long a claim holds a job before the sweeper may requeue it.
    pub lease_ms: u64,
    /// Fallback poll when no wake-up arrives (LISTEN/NOTIFY wakes idle loops at once).
    pub poll_interval_ms: u64,
    /// How often the sweeper looks for expired leases.
    pub sweep_interval_ms: u64,
    /// Attempts a job gets unless its submission says otherwise.
    pub max_attempts_default: i32,
    /// How deep child workflows may nest (a child's child's ...), from 1 to 8.
    pub max_child_depth: usize,
    /// Fleet-wide limits on the calls to targets (`[[jobs.target_limits]]`): held in
    /// PostgreSQL, so they are true across every node.
    pub target_limits: Vec<TargetLimitConfig>,
    /// The longest a call over a fleet-wide limit waits in process for room; a longer
    /// wait gives the job back (attempt kept, `throttled` saying why) until then.
    pub throttle_wait_ms: u64,
    /// The longest the schedules' firing loop sleeps between two looks (it wakes for
    /// the soonest tick on its own, and at once when a schedule is put on this node);
    /// 0: this node fires no schedules (another node of the fleet must).
    pub schedule_poll_ms: u64,
    /// Retry backoff: base × 2^(attempt − 1).
    pub backoff_base_ms: u64,
    /// Segments in flight per target, per node.
    pub max_concurrent_per_target: usize,
    /// How long running segments may finish after shutdown begins before their leases
    /// are released for another node.
    pub shutdown_grace_ms: u64,
    /// Connections in the pool.
    pub max_connections: usize,
    /// How often the metrics' fleet-wide gauges (live jobs, outbox depth, oldest ages)
    /// are read from the database; never per scrape.
    pub metrics_interval_ms: u64,
    /// Live event streams (`GET /v1/jobs/{jobId}/events`) and waiting `get-job`
    /// calls one node serves at once; all share one LISTEN connection and one read
    /// per wake-up. Past it, a new stream is answered 503 and a waiting `get-job` 429,
    /// at once.
    pub max_watchers: usize,
    /// How many of those one token may hold at once (on a node with `[auth]`), so one
    /// caller cannot take every slot. Default: a quarter of `max_watchers`.
    pub max_watchers_per_token: Option<usize>,
    /// Serve the web console at `/console` (true by default; its files are public,
    /// what it shows needs the same tokens as the verbs).
    pub console: bool,
    /// Claims a job may give back in a row without progress (shutdowns, transient
    /// store failures while checkpointing) before it lands DEAD with the reason.
    pub max_releases: i32,
    /// Topic the outbox relay publishes to.
    pub events_topic: String,
    /// Topic broker-native submissions arrive on.
    pub requests_topic: String,
    /// Topic broker-native events arrive on (`SendEvent` records, as the
    /// `send-event` verb); without it no signals consumer runs.
    pub signals_topic: Option<String>,
    /// Kafka bootstrap servers; without it the Kafka lanes stay off.
    pub kafka_bootstrap: Option<String>,
    /// Confluent-compatible schema registry, optional: with it, records use the
    /// Confluent wire format and the contract is registered under `<topic>-value`.
    pub schema_registry_url: Option<String>,
    /// Extra librdkafka settings for the producer and the consumer (security, sizes).
    pub kafka_options: BTreeMap<String, String>,
    /// Consumer group of the request consumer.
    pub consumer_group: String,
    /// Outbox rows one relay batch publishes.
    pub relay_batch_size: i64,
    /// Fallback poll of the relay (a NOTIFY from each outbox insert wakes it early).
    pub relay_poll_interval_ms: u64,
    /// Failed publishes after which an outbox row lands FAILED (the dead-letter queue).
    pub relay_max_attempts: i32,
    /// Backoff after the first failed publish of a row, doubling per attempt.
    pub relay_backoff_base_ms: u64,
    /// Ceiling of the relay's backoffs (also while the broker is unreachable).
    pub relay_backoff_max_ms: u64,
    /// How long a job parked on an external step without its own `waitTimeoutMs`
    /// waits for its answer before it ends per the step's `onTimeout`; off (waits for
    /// ever) unless set.
    pub wait_timeout_ms: Option<u64>,
    /// What a reviewer (a token with `jobs:review` and not `jobs:read`) is shown of a
    /// job parked on an external step without its own `reviewerSees`, besides the
    /// step's request and form: any of `input`, `responses`, `metadata` (`request` is
    /// always shown). Everything by default, as before reviewers had a scope.
    pub reviewer_sees: Vec<String>,
    /// What the pruner deletes, and when; off (everything retained) unless set.
    pub retention: RetentionConfig,
}

/// The longest retention: 100 years (PostgreSQL's timestamps end long after).
pub const MAX_RETENTION_MS: u64 = 100 * 365 * 86_400_000;

/// The `[jobs.retention]` section: how long finished jobs and published events are
/// kept. Every retention is off (kept for ever, the seed's rule) unless set; the
/// pruner runs only when one is.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// COMPLETED jobs (with their outbox rows), after `finished_at`.
    pub completed_ms: Option<u64>,
    /// FAILED jobs.
    pub failed_ms: Option<u64>,
    /// DEAD jobs.
    pub dead_ms: Option<u64>,
    /// CANCELLED jobs.
    pub cancelled_ms: Option<u64>,
    /// PUBLISHED outbox rows, after `published_at` (their jobs stay). FAILED outbox
    /// rows, the dead-letter queue, are never pruned, nor is a job that has one.
    pub published_events_ms: Option<u64>,
    /// Whether a finished job whose events never reached the events topic may be
    /// deleted with them. Off (the default), a job with an outbox row that is not
    /// PUBLISHED is kept on every node, whatever that node's own lanes: whether its
    /// events are out is a fact in the database, and a node without
    /// `kafka_bootstrap` cannot know the fleet's relay is not just down. On is for a
    /// fleet that runs without the Kafka lanes for good: drain the outbox first (no
    /// PENDING rows), then turn it on. Dead-lettered (FAILED) and HELD rows keep
    /// their job either way.
    pub prune_unpublished: bool,
    /// How long the ids of pruned jobs are remembered (30 days by default): within
    /// it, a replay of a pruned job's submission (a request topic read again once
    /// its group's offsets expired, a client's late retry) is refused instead of
    /// being run again. Keep it above the requests topic's retention and the consumer
    /// group offsets' expiry (`offsets.retention.minutes`, 7 days by default).
    pub pruned_ids_ms: u64,
    /// Dead-lettered request records (`workflow_run_request_rejects`), after they
    /// were received. Kept for ever unless set.
    pub rejects_ms: Option<u64>,
    /// How often the pruner runs.
    pub interval_ms: u64,
    /// Rows one delete takes (each its own short transaction).
    pub batch: i64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            completed_ms: None,
            failed_ms: None,
            dead_ms: None,
            cancelled_ms: None,
            published_events_ms: None,
            prune_unpublished: false,
            pruned_ids_ms: 30 * 86_400_000,
            rejects_ms: None,
            interval_ms: 60_000,
            batch: 1_000,
        }
    }
}

impl RetentionConfig {
    /// The finished statuses with a retention, each with it.
    pub fn jobs(&self) -> Vec<(crate::status::JobStatus, Duration)> {
        use crate::status::JobStatus;
        [
            (JobStatus::Completed, self.completed_ms),
            (JobStatus::Failed, self.failed_ms),
            (JobStatus::Dead, self.dead_ms),
            (JobStatus::Cancelled, self.cancelled_ms),
        ]
        .into_iter()
        .filter_map(|(status, ms)| Some((status, Duration::from_millis(ms?))))
        .collect()
    }

    /// The published events' retention, if set.
    pub fn published_events(&self) -> Option<Duration> {
        self.published_events_ms.map(Duration::from_millis)
    }

    /// True when anything is to be pruned.
    pub fn is_on(&self) -> bool {
        !self.jobs().is_empty() || self.published_events_ms.is_some() || self.rejects_ms.is_some()
    }

    /// How long pruned jobs' ids are remembered.
    pub fn pruned_ids(&self) -> Duration {
        Duration::from_millis(self.pruned_ids_ms)
    }

    /// The dead-lettered request records' retention, if set.
    pub fn rejects(&self) -> Option<Duration> {
        self.rejects_ms.map(Duration::from_millis)
    }

    fn check(&self) -> Result<(), String> {
        let retentions = [
            ("completed_ms", self.completed_ms),
            ("failed_ms", self.failed_ms),
            ("dead_ms", self.dead_ms),
            ("cancelled_ms", self.cancelled_ms),
            ("published_events_ms", self.published_events_ms),
            ("pruned_ids_ms", Some(self.pruned_ids_ms)),
            ("rejects_ms", self.rejects_ms),
        ];
        for (key, value) in retentions {
            if value.is_some_and(|ms| !(1..=MAX_RETENTION_MS).contains(&ms)) {
                return Err(format!(
                    "jobs.retention.{key} must be from 1 to {MAX_RETENTION_MS} milliseconds (100 years), or left out to keep those rows for ever"
                ));
            }
        }
        if self.interval_ms == 0 || !(1..=100_000).contains(&self.batch) {
            return Err(
                "jobs.retention.interval_ms must be at least 1 and jobs.retention.batch from 1 to 100000"
                    .into(),
            );
        }
        Ok(())
    }
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            database_url: None,
            worker_id: String::new(),
            max_in_flight: 32,
            lease_ms: 300_000,
            poll_interval_ms: 1_000,
            sweep_interval_ms: 10_000,
            max_attempts_default: 3,
            max_child_depth: 8,
            target_limits: Vec::new(),
            throttle_wait_ms: 1_000,
            schedule_poll_ms: 1_000,
            backoff_base_ms: 5_000,
            max_concurrent_per_target: 8,
            shutdown_grace_ms: 20_000,
            max_connections: 16,
            max_watchers: 1_000,
            max_watchers_per_token: None,
            console: true,
            metrics_interval_ms: 5_000,
            max_releases: 10,
            reviewer_sees: workflow::REVIEWER_SEES
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
            events_topic: "workflow-run-events".into(),
            requests_topic: "workflow-run-requests".into(),
            signals_topic: None,
            kafka_bootstrap: None,
            schema_registry_url: None,
            kafka_options: BTreeMap::new(),
            consumer_group: "protomolt-jobs-worker".into(),
            relay_batch_size: 500,
            relay_poll_interval_ms: 500,
            relay_max_attempts: 10,
            relay_backoff_base_ms: 500,
            relay_backoff_max_ms: 60_000,
            wait_timeout_ms: None,
            retention: RetentionConfig::default(),
        }
    }
}

impl std::fmt::Debug for JobsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The database URL may carry a password: show only whether it is set.
        f.debug_struct("JobsConfig")
            .field("database_url", &self.database_url.as_ref().map(|_| "<set>"))
            .field("worker_id", &self.worker_id)
            .field("max_in_flight", &self.max_in_flight)
            .field("lease_ms", &self.lease_ms)
            .field("poll_interval_ms", &self.poll_interval_ms)
            .field("max_attempts_default", &self.max_attempts_default)
            .field("max_child_depth", &self.max_child_depth)
            .field("target_limits", &self.target_limits)
            .field("backoff_base_ms", &self.backoff_base_ms)
            .field("max_concurrent_per_target", &self.max_concurrent_per_target)
            .field("max_releases", &self.max_releases)
            .field("events_topic", &self.events_topic)
            .field("requests_topic", &self.requests_topic)
            .field("signals_topic", &self.signals_topic)
            .field("kafka_bootstrap", &self.kafka_bootstrap)
            .field("schema_registry_url", &self.schema_registry_url)
            .field("consumer_group", &self.consumer_group)
            .finish_non_exhaustive()
    }
}

impl JobsConfig {
    /// What a reviewer is shown of a job parked on a step without `reviewerSees`
    /// (`[jobs].reviewer_sees`), or why the key is wrong.
    pub fn reviewer_sees(&self) -> Result<workflow::ReviewerSees, String> {
        workflow::ReviewerSees::parse(self.reviewer_sees.iter().map(String::as_str))
            .map_err(|why| format!("jobs.reviewer_sees: {why}"))
    }

    /// Checks what types alone cannot; the error names the key and the fix.
    pub fn check(&self) -> Result<(), String> {
        if self.database_url.is_none() {
            return Ok(());
        }
        if self.worker_id.trim().is_empty() {
            return Err("jobs.worker_id is required and must not be blank: a fleet of anonymous workers cannot be debugged from the row".into());
        }
        if self.worker_id.chars().count() > 100 {
            return Err("jobs.worker_id must be at most 100 characters".into());
        }
        let positive = [
            ("jobs.lease_ms", self.lease_ms),
            ("jobs.poll_interval_ms", self.poll_interval_ms),
            ("jobs.sweep_interval_ms", self.sweep_interval_ms),
            ("jobs.backoff_base_ms", self.backoff_base_ms),
            ("jobs.metrics_interval_ms", self.metrics_interval_ms),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(format!("{key} must be greater than 0"));
            }
        }
        self.reviewer_sees()?;
        if self.schedule_poll_ms > 60_000 {
            return Err(
                "jobs.schedule_poll_ms must be at most 60000 (0: this node fires no schedules)"
                    .into(),
            );
        }
        if self.max_concurrent_per_target == 0 || self.max_connections == 0 {
            return Err(
                "jobs.max_concurrent_per_target and jobs.max_connections must be at least 1".into(),
            );
        }
        if !(1..=100_000).contains(&self.max_watchers) {
            return Err("jobs.max_watchers must be from 1 to 100000".into());
        }
        if self
            .max_watchers_per_token
            .is_some_and(|n| !(1..=self.max_watchers).contains(&n))
        {
            return Err("jobs.max_watchers_per_token must be from 1 to jobs.max_watchers".into());
        }
        if self.relay_batch_size < 1
            || self.relay_max_attempts < 1
            || self.relay_poll_interval_ms == 0
        {
            return Err("jobs.relay_batch_size, jobs.relay_max_attempts and jobs.relay_poll_interval_ms must be at least 1".into());
        }
        if self.consumer_group.trim().is_empty() {
            return Err("jobs.consumer_group must not be blank".into());
        }
        if !(1..=workflow::compile::MAX_CHILD_DEPTH).contains(&self.max_child_depth) {
            return Err(format!(
                "jobs.max_child_depth must be from 1 to {}",
                workflow::compile::MAX_CHILD_DEPTH
            ));
        }
        for (i, limit) in self.target_limits.iter().enumerate() {
            limit
                .check()
                .map_err(|why| format!("jobs.target_limits[{i}]: {why}"))?;
        }
        if self.throttle_wait_ms > 60_000 {
            return Err("jobs.throttle_wait_ms must be at most 60000 (a minute)".into());
        }
        if !(1..=100).contains(&self.max_attempts_default) {
            return Err("jobs.max_attempts_default must be from 1 to 100".into());
        }
        if self.max_releases < 1 {
            return Err("jobs.max_releases must be at least 1".into());
        }
        self.retention.check()?;
        if let Some(wait) = self.wait_timeout_ms
            && !(1..=workflow::compile::MAX_WAIT_TIMEOUT_MS).contains(&wait)
        {
            return Err(format!(
                "jobs.wait_timeout_ms must be from 1 to {} (366 days), or left out to wait for ever",
                workflow::compile::MAX_WAIT_TIMEOUT_MS
            ));
        }
        Ok(())
    }

    /// The node's default wait for a parked step's answer, if any.
    pub fn wait_timeout(&self) -> Option<Duration> {
        self.wait_timeout_ms.map(Duration::from_millis)
    }

    /// The watchers one token may hold: `max_watchers_per_token`, or a quarter of
    /// `max_watchers` (at least one).
    pub fn watchers_per_token(&self) -> usize {
        self.max_watchers_per_token
            .unwrap_or((self.max_watchers / 4).max(1))
    }

    /// The lease as a duration.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The fallback poll interval.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    /// The sweep interval.
    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.sweep_interval_ms)
    }

    /// The shutdown grace.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    /// The relay's delay after a row's `attempts`-th failed publish.
    pub fn relay_backoff(&self, attempts: i32) -> Duration {
        let exponent = u32::try_from(attempts.saturating_sub(1))
            .unwrap_or(0)
            .min(20);
        Duration::from_millis(
            self.relay_backoff_base_ms
                .saturating_mul(1u64 << exponent)
                .min(self.relay_backoff_max_ms),
        )
    }

    /// The delay before attempt `attempt + 1`: base × 2^(attempt − 1), capped at a day.
    pub fn backoff(&self, attempt: i32) -> Duration {
        let exponent = u32::try_from(attempt.saturating_sub(1))
            .unwrap_or(0)
            .min(20);
        Duration::from_millis(
            self.backoff_base_ms
                .saturating_mul(1u64 << exponent)
                .min(86_400_000),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_attempt() {
        let config = JobsConfig::default();
        assert_eq!(config.backoff(1), Duration::from_secs(5));
        assert_eq!(config.backoff(2), Duration::from_secs(10));
        assert_eq!(config.backoff(3), Duration::from_secs(20));
        assert_eq!(config.backoff(100), Duration::from_secs(86_400), "capped");
    }

    #[test]
    fn a_configured_database_needs_a_worker_id() {
        let mut config = JobsConfig {
            database_url: Some("postgres://x".into()),
            ..JobsConfig::default()
        };
        assert!(
            config
                .check()
                .unwrap_err()
                .contains("jobs.worker_id is required")
        );
        config.worker_id = "   ".into();
        assert!(config.check().is_err());
        config.worker_id = "node-a".into();
        assert!(config.check().is_ok());
        assert!(
            JobsConfig::default().check().is_ok(),
            "no database, nothing to check"
        );
        assert!(
            !format!("{config:?}").contains("postgres://"),
            "no secrets in Debug"
        );
    }

    #[test]
    fn retention_is_off_until_set_and_a_bad_value_fails_with_one_line() {
        let mut config = JobsConfig {
            database_url: Some("postgres://x".into()),
            worker_id: "node-a".into(),
            ..JobsConfig::default()
        };
        assert!(
            !config.retention.is_on(),
            "the seed's rule: keep everything"
        );
        config.retention.completed_ms = Some(7 * 86_400_000);
        config.retention.published_events_ms = Some(86_400_000);
        assert!(config.retention.is_on());
        assert_eq!(
            config.retention.jobs(),
            [(
                crate::status::JobStatus::Completed,
                Duration::from_secs(7 * 86_400)
            )]
        );
        assert!(config.check().is_ok());
        config.retention.failed_ms = Some(0);
        let refused = config.check().unwrap_err();
        assert!(
            refused.starts_with("jobs.retention.failed_ms must be from 1 to"),
            "{refused}"
        );
        config.retention.failed_ms = Some(u64::MAX);
        assert!(config.check().is_err(), "past 100 years");
        config.retention.failed_ms = None;
        config.retention.batch = 0;
        assert!(config.check().unwrap_err().contains("jobs.retention.batch"));

        let parsed: JobsConfig = serde_json::from_value(serde_json::json!({
            "worker_id": "a", "retention": { "completed_ms": 5, "cancelled_ms": 6 },
        }))
        .unwrap();
        assert_eq!(parsed.retention.completed_ms, Some(5));
        assert_eq!(parsed.retention.cancelled_ms, Some(6));
        let typo = serde_json::json!({ "retention": { "completed": 5 } });
        assert!(
            serde_json::from_value::<JobsConfig>(typo).is_err(),
            "unknown keys are refused"
        );
    }
}

/// One `[[jobs.target_limits]]` entry: a fleet-wide cap on calls in flight and a rate,
/// for every target `targets` matches (`*` matches any run of characters).
///
/// ```toml
/// [[jobs.target_limits]]
/// targets = "api.openai.com:443"
/// max_concurrent = 50
/// rate = "600/min"
/// burst = 10
/// ```
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TargetLimitConfig {
    /// The targets (`host:port`, `*` a wildcard) the limit holds for, together.
    pub targets: String,
    /// The most calls to them in flight at once, across the fleet.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// `<count>/<unit>`: `600/min`, `10/s`, `5000/hour`.
    #[serde(default)]
    pub rate: Option<String>,
    /// How many calls may come together when the bucket is full (default 1).
    #[serde(default)]
    pub burst: Option<u32>,
}

impl TargetLimitConfig {
    /// The rate, parsed (`None` without one).
    pub fn parsed_rate(&self) -> Option<workflow::compile::Rate> {
        self.rate
            .as_deref()
            .and_then(|text| workflow::compile::Rate::parse(text).ok())
    }

    fn check(&self) -> Result<(), String> {
        if self.targets.trim().is_empty() {
            return Err(
                "targets must name a target (host:port) or a pattern (*.example.com:443)".into(),
            );
        }
        if let Some(rate) = &self.rate {
            workflow::compile::Rate::parse(rate).map_err(|why| format!("rate {why}"))?;
        }
        if self.max_concurrent == Some(0) {
            return Err("max_concurrent must be at least 1".into());
        }
        if self
            .burst
            .is_some_and(|b| b == 0 || u64::from(b) > workflow::compile::MAX_BURST)
        {
            return Err(format!(
                "burst must be from 1 to {}",
                workflow::compile::MAX_BURST
            ));
        }
        if self.burst.is_some() && self.rate.is_none() {
            return Err("burst needs a rate".into());
        }
        if self.rate.is_none() && self.max_concurrent.is_none() {
            return Err("give max_concurrent, rate, or both".into());
        }
        Ok(())
    }
}
