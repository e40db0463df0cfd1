//! `JobsModule`: the jobs role a node mounts beside the registry role.
//!
//! It requires `registry` (stored workflow names resolve through the registry's
//! `WorkflowRepository`, and it shares the registry's `Runner`), contributes the jobs
//! verbs, and runs the worker (up to `max_in_flight` segments at once), the sweeper
//! and the wake-up listener as background tasks; with `kafka_bootstrap` also the outbox relay and the request
//! consumer. Without `[jobs].database_url` it still mounts the verbs, which then
//! answer `unavailable`.

use std::sync::Arc;
use std::time::Duration;

use registry_stub::{MountContext, MountError, Role};
use tokio::sync::Notify;
use workflow::Runner;

use crate::actions::{JobsState, actions};
use crate::config::JobsConfig;
use crate::consumer::{RequestConsumer, SignalHandler};
use crate::metrics::{JobsMetrics, metrics_loop};
use crate::pruner::prune_loop;
use crate::relay::{Publisher, TopicProbe, missing_topic_hint, relay_loop};
use crate::routes;
use crate::schedules::{Scheduler, schedule_loop};
use crate::snapshot_mover::move_snapshots;
use crate::store::EventsOut;
use crate::store::Store;
use crate::store::sql;
use crate::submit::Submitter;
use crate::wake::{listen_loop, listen_while, listen_with};
use crate::watch::Watchers;
use crate::worker::{Worker, sweep_loop};

/// With the Kafka lanes off, how long the outbox listener stays connected after the
/// last watcher left (watchers coming and going do not reconnect it each time).
const OUTBOX_LISTEN_LINGER: Duration = Duration::from_secs(30);

/// The jobs role.
pub struct JobsModule {
    config: JobsConfig,
}

impl JobsModule {
    /// A jobs role configured by the `[jobs]` section.
    pub fn new(config: JobsConfig) -> Self {
        JobsModule { config }
    }
}

impl JobsModule {
    /// The events lane (outbox relay), the requests lane (request consumer) and, with
    /// `signals_topic`, the signals lane (events sent to jobs).
    async fn mount_kafka_lanes(
        &self,
        ctx: &mut MountContext,
        bootstrap: &str,
        store: Store,
        submitter: Submitter,
        outbox_wake: Arc<Notify>,
        metrics: JobsMetrics,
    ) -> Result<(), MountError> {
        let mut publisher =
            Publisher::new(&self.config, bootstrap).map_err(|e| MountError(e.to_string()))?;
        if let Some(registry) = &self.config.schema_registry_url {
            publisher
                .register_schema(registry)
                .await
                .map_err(|e| MountError(e.to_string()))?;
        }
        let compiled = submitter.compiled();
        let consumer = RequestConsumer::new(&self.config, bootstrap, submitter)
            .map_err(|e| MountError(e.to_string()))?
            .with_metrics(metrics.clone());
        let shutdown = ctx.shutdown_token();
        let publisher = Arc::new(publisher);
        let probe = publisher.clone();
        // Said once at start-up, so a typo in a topic name is not read as an outage.
        // Both at once: a broker that is down costs one probe's 3 s, not two.
        let (events, requests) = futures_util::join!(
            publisher.probe(&self.config.events_topic),
            publisher.probe(&self.config.requests_topic)
        );
        for (probed, topic, key) in [
            (events, &self.config.events_topic, "jobs.events_topic"),
            (requests, &self.config.requests_topic, "jobs.requests_topic"),
        ] {
            match probed {
                TopicProbe::Ready => {}
                TopicProbe::Missing => {
                    tracing::warn!("{}", missing_topic_hint(topic, bootstrap, key));
                }
                TopicProbe::Unanswered => {
                    tracing::warn!(%bootstrap, %topic, "the Kafka broker does not answer (yet): the lanes wait for it");
                }
            }
        }
        ctx.add_readiness_check("broker", move || {
            let probe = probe.clone();
            async move {
                match probe.probe(probe.topic()).await {
                    // The broker answers; the lane may still be unable to publish (a
                    // producer gone fatal, a broker refusing every produce).
                    TopicProbe::Ready => match probe.lane_failure() {
                        None => Ok(()),
                        Some(why) => Err(why),
                    },
                    // The names stay in the node's log: readiness is a public route.
                    TopicProbe::Missing => Err(
                        "the events topic does not exist on the Kafka broker: create it (the node's log names it and how)"
                            .to_owned(),
                    ),
                    TopicProbe::Unanswered => {
                        Err("the Kafka broker does not answer for the events topic".to_owned())
                    }
                }
            }
        });
        if let Some(topic) = &self.config.signals_topic {
            if publisher.probe(topic).await == TopicProbe::Missing {
                tracing::warn!(
                    "{}",
                    missing_topic_hint(topic, bootstrap, "jobs.signals_topic")
                );
            }
            let handler = SignalHandler::new(store.clone(), compiled.clone());
            let signals = RequestConsumer::signals(&self.config, bootstrap, topic, handler)
                .map_err(|e| MountError(e.to_string()))?
                .with_metrics(metrics.clone());
            ctx.spawn_task("signal-consumer", signals.run(shutdown.clone()));
        }
        ctx.spawn_task(
            "outbox-relay",
            relay_loop(
                store.clone(),
                publisher,
                self.config.clone(),
                outbox_wake,
                metrics,
                shutdown.clone(),
            ),
        );
        ctx.spawn_task("request-consumer", consumer.run(shutdown));
        tracing::info!(%bootstrap, events = %self.config.events_topic, requests = %self.config.requests_topic, "Kafka lanes on");
        Ok(())
    }
}

#[async_trait::async_trait]
impl Role for JobsModule {
    fn name(&self) -> &str {
        "jobs"
    }

    fn requires(&self) -> Vec<String> {
        vec!["registry".into()]
    }

    async fn mount(&self, ctx: &mut MountContext) -> Result<(), MountError> {
        let Some(database_url) = &self.config.database_url else {
            tracing::warn!(
                "[jobs].database_url is not set: the jobs verbs are mounted and answer unavailable"
            );
            for action in actions(None)? {
                ctx.add_action(action);
            }
            return Ok(());
        };
        self.config.check().map_err(MountError)?;
        let store = Store::connect(database_url, self.config.max_connections)
            .await
            .map_err(|e| MountError(format!("connecting to jobs.database_url: {e}")))?;
        let probe = store.clone();
        ctx.add_readiness_check("database", move || {
            let probe = probe.clone();
            async move { probe.ready().await }
        });
        let workflows = ctx.workflows()?;
        let runner = ctx
            .get::<Arc<Runner>>()
            .unwrap_or_else(|| Arc::new(Runner::new()));
        let (submitter, committing) =
            Submitter::new(store.clone(), workflows, self.config.max_attempts_default)
                .with_outbound(runner.outbound())
                .with_max_child_depth(self.config.max_child_depth)
                .with_group_commit(ctx.shutdown_token());
        ctx.spawn_task("submission-commits", committing);
        let watchers = Watchers::new(
            store.clone(),
            self.config.max_watchers,
            self.config.watchers_per_token(),
        );
        let metrics = JobsMetrics::register(ctx.metrics());
        let scheduler = Scheduler::new(submitter.clone()).with_metrics(metrics.clone());
        let schedule_wake = Arc::new(Notify::new());
        let state = Arc::new(JobsState {
            store: store.clone(),
            submitter,
            watchers: watchers.clone(),
            fleet: Default::default(),
            history: metrics.history.clone(),
            scheduler: scheduler.clone(),
            schedule_wake: schedule_wake.clone(),
            // `check` refused a wrong key before the role mounted.
            reviewer_sees: self
                .config
                .reviewer_sees()
                .unwrap_or(workflow::ReviewerSees::EVERYTHING),
        });
        for action in actions(Some(state.clone()))? {
            ctx.add_action(action);
        }
        ctx.add_scoped_routes("jobs:read", routes::router(state.clone()));
        ctx.document_route("/v1/jobs/{job_id}/events", routes::openapi_item());
        if self.config.console {
            ctx.add_public_routes(crate::console::router());
        }
        ctx.provide(state.clone());
        if let Some(slot) = ctx.get::<registry_stub::WorkflowNotesSlot>() {
            slot.fill(Arc::new(crate::actions::pause::PausedNotes(store.clone())));
        }

        let wake = Arc::new(Notify::new());
        let worker = Worker::with_metrics(
            store.clone(),
            runner,
            self.config.clone(),
            wake.clone(),
            state.submitter.compiled(),
            metrics.clone(),
        );
        ctx.spawn_task(
            "metrics",
            metrics_loop(
                store.clone(),
                (self.config.max_in_flight > 0).then(|| worker.limits()),
                metrics.clone(),
                Duration::from_millis(self.config.metrics_interval_ms),
                ctx.shutdown_token(),
            ),
        );
        let shutdown = ctx.shutdown_token();
        ctx.add_scoped_routes("node:admin", crate::drain::router(worker.drain()));
        if self.config.max_in_flight > 0 {
            let hearing = worker.clone();
            ctx.spawn_task(
                "cancel-listener",
                listen_with(
                    store.clone(),
                    sql::LISTEN_CANCEL,
                    move |job_id| hearing.hear_cancel(job_id),
                    shutdown.clone(),
                ),
            );
            ctx.spawn_task("worker", worker.run(shutdown.clone()));
        }
        ctx.spawn_task(
            "snapshot-mover",
            move_snapshots(store.clone(), shutdown.clone()),
        );
        ctx.spawn_task(
            "sweeper",
            sweep_loop(
                store.clone(),
                self.config.sweep_interval(),
                self.config.lease(),
                self.config.max_releases,
                metrics.clone(),
                shutdown.clone(),
            ),
        );
        if self.config.schedule_poll_ms > 0 {
            ctx.spawn_task(
                "schedules",
                schedule_loop(
                    scheduler,
                    Duration::from_millis(self.config.schedule_poll_ms),
                    schedule_wake,
                    shutdown.clone(),
                ),
            );
        }
        if self.config.retention.is_on() {
            if self.config.kafka_bootstrap.is_none() && !self.config.retention.prune_unpublished {
                tracing::warn!(
                    "jobs.retention is set on a node without the Kafka lanes: it prunes only jobs whose events another node published; if no node of the fleet publishes events, drain the outbox and set jobs.retention.prune_unpublished = true, or nothing is ever pruned"
                );
            }
            ctx.spawn_task(
                "pruner",
                prune_loop(
                    store.clone(),
                    self.config.retention.clone(),
                    // Whether a job's events are out is read from the database,
                    // never inferred from this node's own lanes (a verbs-only node
                    // must not delete what the relaying node has yet to publish).
                    if self.config.retention.prune_unpublished {
                        EventsOut::NotDeadLettered
                    } else {
                        EventsOut::Published
                    },
                    shutdown.clone(),
                ),
            );
        }
        ctx.spawn_task(
            "wake-listener",
            listen_loop(store.clone(), sql::LISTEN_QUEUED, wake, shutdown.clone()),
        );
        // One listener on the outbox channel wakes both the watchers' hub and, with
        // the lanes on, the relay. With the lanes off it listens only while anyone
        // watches a job: a LISTEN nobody needs costs every notifying commit.
        let outbox_wake = Arc::new(Notify::new());
        let (hub, relay) = (watchers.wake(), outbox_wake.clone());
        let heard = move |_: &str| {
            hub.notify_one();
            relay.notify_waiters();
        };
        if self.config.kafka_bootstrap.is_some() {
            ctx.spawn_task(
                "outbox-listener",
                listen_with(store.clone(), sql::LISTEN_OUTBOX, heard, shutdown.clone()),
            );
        } else {
            ctx.spawn_task(
                "outbox-listener",
                listen_while(
                    store.clone(),
                    sql::LISTEN_OUTBOX,
                    heard,
                    watchers.watched(),
                    OUTBOX_LISTEN_LINGER,
                    shutdown.clone(),
                ),
            );
        }
        ctx.spawn_task("watchers", watchers.run(shutdown.clone()));

        match &self.config.kafka_bootstrap {
            Some(bootstrap) => {
                self.mount_kafka_lanes(
                    ctx,
                    bootstrap,
                    store,
                    state.submitter.clone(),
                    outbox_wake,
                    metrics,
                )
                .await?
            }
            None => tracing::info!(
                "jobs.kafka_bootstrap is not set: the Kafka lanes are off; events wait in the outbox (get-job shows them)"
            ),
        }
        tracing::info!(worker_id = %self.config.worker_id, max_in_flight = self.config.max_in_flight, "jobs role mounted");
        Ok(())
    }
}
