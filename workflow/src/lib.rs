//! # workflow: the engine both execution modes share
//!
//! Async is an execution mode, not a dialect: the synchronous `run-workflow` verb and
//! the jobs worker compile the same descriptor-first JSON envelope into the same
//! `CompiledWorkflow` and run it through the same runner, segment by segment. This
//! crate knows nothing of PostgreSQL, Kafka or HTTP.
//!
//! The engine itself lands with its own issue; this crate holds its place in the
//! workspace so the layout shows the architecture from the first commit.

#![deny(unsafe_code)]
#![warn(missing_docs)]
