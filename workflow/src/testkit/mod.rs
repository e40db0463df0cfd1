//! Test fixtures the engine's tests and every other crate's tests share.
//!
//! - [`FIXTURE_PROTO`], compiled at runtime with protox into
//!   [`fixture_descriptor_set_base64`] (imports included, `buf/validate` too);
//! - envelope builders ([`two_step_workflow`], [`three_step_workflow`], [`workflow`],
//!   [`step`]);
//! - [`FixtureServer`]: real tonic servers on `127.0.0.1:0` serving `Tokenizer` (ids =
//!   the code points of `text`, `fail` copied) and `Embedder` (UNAVAILABLE "model
//!   loading" when `fail`, else `values = [len(ids) / 10, 1.0]`), optionally slow,
//!   counting calls, calls in flight and the metadata of every call. `ReviewDesk` is
//!   declared, never served.

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

mod envelopes;
mod findings;
mod servers;

use std::sync::LazyLock;

use base64::Engine as _;

pub use envelopes::{
    UNENCODABLE_TEXT, diamond_workflow, distinct_text, embed_all_workflow, embed_one_workflow,
    event_workflow, leaf_workflow, map_element_id, map_workflow, review_step, sleep_step, step,
    three_step_workflow, tokenize_step, two_step_workflow, unencodable_response_workflow, workflow,
};
pub use findings::{assert_finding, compile_new, findings, new_findings};
pub use servers::{FixtureOptions, FixtureServer, FixtureStats, RecordedCall};

/// The fixture schema's source.
pub const FIXTURE_PROTO: &str = include_str!("../../fixtures/jobs_test.proto");
const FIXTURE_FILE: &str = "jobs_test.proto";

/// Types generated from the fixture proto (for the servers).
pub mod proto {
    tonic::include_proto!("jobs.test");
}

static DESCRIPTOR_SET: LazyLock<Vec<u8>> = LazyLock::new(|| {
    crate::schema::compile_proto_source(FIXTURE_FILE, FIXTURE_PROTO)
        .expect("the fixture proto compiles")
});

/// The fixture schema as an encoded `FileDescriptorSet`, compiled at runtime.
pub fn fixture_descriptor_set() -> &'static [u8] {
    &DESCRIPTOR_SET
}

/// [`fixture_descriptor_set`] in base64, as envelopes carry it.
pub fn fixture_descriptor_set_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(fixture_descriptor_set())
}
