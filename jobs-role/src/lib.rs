//! # jobs-role: durable, asynchronous workflow runs
//!
//! A submitted workflow becomes one PostgreSQL row. A fleet of workers claims rows
//! with `FOR UPDATE SKIP LOCKED`, runs each step through the workflow engine,
//! checkpoints every step's response into the row before the next step runs, retries
//! with backoff, parks on human-in-the-loop steps until `complete-step` answers, and
//! publishes every state change through a transactional outbox.
//!
//! The data path, drawn once:
//!
//! ```text
//! submit ─► row (QUEUED) ─► claim ─► engine ─► checkpoint ─► settle ─► outbox ─► relay ─► Kafka
//! ```
//!
//! | module      | concept                                                              |
//! |-------------|----------------------------------------------------------------------|
//! | [`status`]  | the job state machine: statuses and their legal transitions          |
//! | [`store`]   | PostgreSQL: migrations, every SQL statement, fencing, the outbox     |
//! | [`batch`]   | group commit: a queue whose loop commits many callers' items at once |
//! | [`submit`]  | submission: resolve, verify, validate, snapshot, insert              |
//! | [`compiled`]| compiled workflows, cached per node by definition (bounded)          |
//! | [`worker`]  | batched claims, segments with lease renewal, group commit, the sweeper |
//! | [`drain`]   | drain mode: a node that stops claiming and finishes what it runs     |
//! | [`schedules`] | durable cron: schedules fired by any node, one job per tick       |
//! | [`pruner`]  | retention: deleting finished jobs and published events, when set    |
//! | [`snapshot_mover`] | moving the snapshots of rows written before V21 out, once   |
//! | [`wake`]    | LISTEN/NOTIFY wake-ups for the idle worker and relays               |
//! | [`relay`]   | the outbox relay: the events lane to Kafka                           |
//! | [`consumer`]| the request consumer: broker-native submission, poison records      |
//! | [`signals`] | what an event sent to jobs (`send-event`) answers for one waiting step |
//! | [`event_json`]| a job's events as clients read them (proto3 JSON)                  |
//! | [`actions`] | the verbs: submit, read, complete or reject a step, cancel, retry    |
//! | [`watch`]   | watching jobs: their events as they commit, one read for all watchers |
//! | [`routes`]  | HTTP beside the verbs: a job's events as Server-Sent Events          |
//! | [`console`] | the web console at `/console`: fleet, jobs, review inbox, workflows  |
//! | [`metrics`] | the role's Prometheus metrics, and the loop reading the fleet's state |
//! | [`history`] | the last hour minute by minute, for the console's fleet charts       |
//! | [`module`]  | `JobsModule`, the role a node mounts                                 |
//! | [`config`]  | the `[jobs]` section                                                 |
//!
//! No module but [`store`] builds SQL; the worker and the verbs ask the store.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod actions;
pub mod batch;
pub mod compiled;
pub mod config;
pub mod console;
pub mod consumer;
pub mod drain;
pub mod event_json;
pub mod history;
pub mod metrics;
pub mod module;
pub mod pruner;
pub mod relay;
pub mod routes;
pub mod schedules;
pub mod signals;
pub mod snapshot_mover;
pub mod status;
pub mod store;
pub mod submit;
pub mod wake;
pub mod watch;
pub mod worker;

pub use config::JobsConfig;
pub use module::JobsModule;
pub use status::JobStatus;
pub use store::{Store, StoreError};
