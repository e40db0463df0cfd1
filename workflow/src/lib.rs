//! # workflow: the engine both execution modes share
//!
//! Async is an execution mode, not a dialect. The synchronous `run-workflow` verb and
//! the jobs worker compile the same descriptor-first JSON envelope into the same
//! [`CompiledWorkflow`] and run it through the same [`Runner`]. This crate knows
//! nothing of PostgreSQL, Kafka or HTTP.
//!
//! ```text
//! envelope JSON ─► compile ─► verify ─► CompiledWorkflow
//!                                            │
//!   input ─► parse_input ─┐                  ▼
//!   stored checkpoints ─► replay ─► Runner::run_segment ─► step: when? ─► rules ─► gRPC ─► validate?
//!                                            │                                              │
//!                                            │◄──────────── CheckpointSink::record ◄────────┘
//!                                            ▼
//!                          Completed { output, steps } | Parked { step, also_waiting }
//! ```
//!
//! | module         | concept                                                                |
//! |----------------|------------------------------------------------------------------------|
//! | [`compile`]    | the envelope parsed into a [`CompiledWorkflow`]; every problem a [`Finding`] |
//! | [`finding`]    | what is wrong with an envelope: where, and the fix                      |
//! | [`spec`]       | a workflow as written: steps and output before their types are known  |
//! | [`verify`]     | static checks of every rule, gate and output mapping, all findings at once |
//! | [`rules`]      | the mapping language: `target = source`, `target += source`, `-target` |
//! | [`gate`]       | `when` gates: CEL over `input` and earlier steps, bounded              |
//! | [`typecheck`]  | static types of a gate: unknown fields and non-boolean gates found at compile time |
//! | [`ruleset`]    | compile-time checks of the `buf.validate` rules the workflow runs      |
//! | [`scope`]      | what a running segment can read: the input and earlier responses       |
//! | [`schema`]     | compiling `.proto` sources at runtime, `buf/validate` importable       |
//! | [`grpc`]       | dynamic unary calls over tonic; a bounded LRU cache of channels        |
//! | [`outbound`]   | the outbound call policy: allowed targets, TLS, DNS answers, ceilings |
//! | `glob`         | the target globs of the policy and of TLS settings (`*`)               |
//! | [`rate`]       | rate limits: `600/min` and a step's compiled `rateLimit`               |
//! | [`offload`]    | CEL evaluations on a bounded set of detached threads, within a deadline |
//! | [`checkpoint`] | the checkpoint entry and its non-trusting replay                       |
//! | [`resolve`]    | child workflows: their stored envelopes filed into the steps naming them |
//! | [`review`]     | what a reviewer of a human step is shown (`reviewerSees`)              |
//! | [`runner`]     | segments and the synchronous run                                       |
//! | [`suggest`]    | "did you mean …?" for misspelled names                                 |
//! | [`failure`]    | what a step failure is, and which kinds are retryable                  |
//! | `testkit`      | (feature `testkit`) fixture proto, envelope builders, real gRPC servers |

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod checkpoint;
pub mod compile;
pub mod failure;
pub mod finding;
pub mod gate;
mod glob;
pub use glob::target_matches;
pub mod grpc;
pub mod offload;
pub mod outbound;
pub mod rate;
pub mod resolve;
pub mod review;
pub mod rules;
pub mod ruleset;
pub mod runner;
pub mod schema;
pub mod scope;
pub mod spec;
pub mod suggest;
pub mod typecheck;
pub mod verify;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use checkpoint::{
    Checkpoint, ItemCheckpoint, ItemOutcome, ReplayedCheckpoint, replay_checkpoints,
};
pub use compile::{
    CompiledStep, CompiledWorkflow, Completion, Finding, Findings, MapStep, OnItemFailure,
    OnTimeout, OutputMapping, REVIEWER_SEES, ReviewerSees,
};
pub use failure::{FailureKind, StepFailure, Violation};
pub use runner::{
    CallGuard, CallMetadata, CheckpointSink, NoMetadata, RunError, RunOutcome, Runner,
    SYNC_REFUSAL, SegmentError, SegmentOutcome, SinkError, WaitingStep,
};
