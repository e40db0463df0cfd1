//! # registry-stub: the host framework a node is made of
//!
//! A node is a set of **roles** mounted together. Each role implements [`Role`]: a
//! name, the roles it requires, and a `mount` step that contributes **actions**
//! (verbs) to the shared catalog, **workflows** to the [`WorkflowRepository`],
//! background **tasks**, and extra HTTP **routes** (behind the actions route's auth
//! and body limit, unless a role marks them public). [`Node`] orders the roles by their
//! requirements, refuses to boot (one clear line) when a requirement is missing or two
//! roles claim one verb, and serves what they contributed.
//!
//! The registry role ([`RegistryRole`]) is the one every other role leans on: it owns
//! the [`WorkflowRepository`] extension point (files in a directory, plus what
//! co-mounted roles contribute in memory), shares the engine's [`workflow::Runner`],
//! and contributes `put-workflow`, `get-workflow`, `list-workflows` and the
//! synchronous `run-workflow`.
//!
//! ```text
//! POST /v1/actions/{verb} ─► gate (Host, Origin, JSON, bearer token, budgets) ─► scope
//!        ─► JSON ─► request message
//!        ─► buf.validate rules ─► the verb's handler ─► JSON answer | {code, message}
//! GET  /v1/actions        ─► the catalog: name, description, scope, JSON Schemas
//! GET  /v1/openapi.json   ─► the same verbs (and the roles' routes) as OpenAPI 3.1
//! ```
//!
//! | module         | concept                                                          |
//! |----------------|------------------------------------------------------------------|
//! | [`action`]     | a verb: its request/response messages, scope and handler; errors |
//! | [`node`]       | the `Role` trait, mounting, ordering, serving and shutdown       |
//! | [`route`]      | the shared actions route (axum)                                  |
//! | [`auth`]       | bearer tokens and scopes                                         |
//! | [`gate`]       | what a request passes first: Host/Origin, JSON, token, budgets   |
//! | [`config`]     | the node's typed configuration and the bind policy               |
//! | [`forms`]      | a protobuf message described for a human form (the console)      |
//! | [`health`]     | `/healthz` and `/readyz`, with the roles' readiness checks       |
//! | [`limits`]     | limits every route shares (the largest body)                     |
//! | [`metrics`]    | `/metrics`: the node's registry, the actions route's own metrics |
//! | [`repository`] | the `WorkflowRepository` extension point and its file store      |
//! | [`notes`]      | other roles' notes on stored workflows in `list-workflows`       |
//! | [`registry`]   | the registry role and its four verbs                             |
//! | [`schema`]     | JSON Schema of a protobuf message, for the catalog               |
//! | [`openapi`]    | the node's OpenAPI 3.1 document, generated from the catalog      |
//! | [`telemetry`]  | traces over OTLP, and the W3C trace context across processes     |

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
pub mod auth;
pub mod config;
pub mod forms;
pub mod gate;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod notes;
pub mod openapi;
pub mod registry;
pub mod repository;
pub mod route;
pub mod schema;
pub mod telemetry;

pub use action::{Action, ActionError, ActionRequest, Caller, Code};
pub use node::{MountContext, MountError, MountedNode, Node, NodeError, Role};
pub use notes::{WorkflowNotes, WorkflowNotesSlot};
pub use registry::RegistryRole;
pub use repository::{WorkflowRepository, WorkflowSource};
