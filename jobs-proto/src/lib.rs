//! # jobs-proto: the wire contract of ProtoMolt Jobs
//!
//! `protomolt.jobs.v1` holds exactly two messages:
//!
//! - [`v1::WorkflowRunEvent`]: the lifecycle envelope the outbox relay publishes on
//!   `workflow-run-events`, one per commit point (accept, step checkpoint, park,
//!   terminal state), keyed by `job_id`;
//! - [`v1::WorkflowRunRequest`]: what broker-native clients produce to
//!   `workflow-run-requests`, equivalent to `submit-workflow` with a stored name.
//!
//! Both carry `buf.validate` annotations (see the repository's
//! `proto/protomolt/jobs/v1/jobs.proto`),
//! evaluated at runtime by [`WireMessage::validate`], CEL rules included. The codec
//! in [`WireMessage`] validates on the way out and on the way in, so nothing
//! malformed reaches a topic and nothing malformed leaves one unnoticed.
//!
//! [`FILE_DESCRIPTOR_SET`] is the encoded schema (imports included), for schema
//! registries and for consumers that decode dynamically; [`wire`] frames records for
//! a Confluent-compatible schema registry and unframes either form.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod validation;
pub mod wire;

use std::sync::LazyLock;

use prost_reflect::DescriptorPool;

pub use validation::{ContractError, Violation, WireMessage};

/// Generated types of the `protomolt.jobs.v1` package.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/protomolt.jobs.v1.rs"));
}

/// The encoded `FileDescriptorSet` of `protomolt/jobs/v1/jobs.proto` with every import
/// (`buf/validate`, `google/protobuf`), as compiled by this crate's build script.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/protomolt_jobs_v1_descriptor_set.bin"
));

/// The `.proto` files a client of the contract needs, by path under an include root:
/// the contract and `buf/validate/validate.proto` (Apache-2.0, Buf Technologies), with
/// that licence beside it. `protomolt proto export DIR` writes them; the repository
/// ships the same files under `proto/`.
pub const PROTO_FILES: &[(&str, &str)] = &[
    ("protomolt/jobs/v1/jobs.proto", wire::CONTRACT_PROTO),
    (
        "buf/validate/validate.proto",
        include_str!("../../proto/buf/validate/validate.proto"),
    ),
    (
        "buf/validate/LICENSE",
        include_str!("../../proto/buf/validate/LICENSE"),
    ),
];

/// The contract's descriptors, for reflection and validation.
pub static DESCRIPTOR_POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    // Infallible in practice: the bytes were produced by protox in this crate's build
    // script from the same source, and `contract_descriptors_decode` pins that in a test.
    #[allow(clippy::expect_used)]
    DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("the build script's descriptor set decodes")
});
