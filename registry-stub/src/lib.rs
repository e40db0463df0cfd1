//! # registry-stub: the host framework's registry role
//!
//! The node host mounts roles through the `Role` trait; the registry role owns the
//! shared actions route (`POST /v1/actions/{verb}`), authentication, the
//! `WorkflowRepository` extension point and the synchronous `run-workflow` verb.
//!
//! The framework lands with its own issue; this crate holds its place in the
//! workspace so the layout shows the architecture from the first commit.

#![deny(unsafe_code)]
#![warn(missing_docs)]
