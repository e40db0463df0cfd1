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
//! | module     | concept                                                        |
//! |------------|----------------------------------------------------------------|
//! | [`status`] | the job state machine: statuses and their legal transitions    |
//! | [`store`]  | PostgreSQL: migrations and every SQL statement the role runs   |
//!
//! The worker, the verbs, the relay and the request consumer land in their own
//! modules as they are built; none of them builds SQL, they ask the store.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod status;
pub mod store;

pub use status::JobStatus;
pub use store::StoreError;
