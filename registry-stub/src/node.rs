//! Roles, and the node that mounts them.
//!
//! A [`Role`] contributes through its [`MountContext`]: actions, workflows (through
//! the [`WorkflowRepository`] the registry role provides), background tasks and extra
//! HTTP routes. Roles share values through the context's typed extensions: the
//! registry role provides `Arc<dyn WorkflowRepository>` and `Arc<workflow::Runner>`,
//! and roles that require it read them.
//!
//! [`Node::mount`] orders roles so that each mounts after the roles it requires, and
//! refuses to boot, with one line naming the fix, when a required role is missing,
//! when roles require each other in a cycle, when a role is listed twice, or when two
//! roles claim the same verb. [`MountedNode::start`] spawns the background tasks;
//! [`RunningNode::serve`] serves HTTP until a signal, then bounds the whole shutdown
//! (in-flight requests and background tasks) by one grace period;
//! [`RunningNode::shutdown`] cancels the tasks and waits up to a grace period.

use std::collections::BTreeMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::action::Action;
use crate::auth::AuthConfig;
use crate::gate::{Gate, HostPolicy};
use crate::health::{ReadinessCheck, health_routes};
use crate::metrics::{HttpMetrics, metrics_router};
use crate::repository::WorkflowRepository;
use crate::route::{Catalog, actions_router, protected_routes, public_routes, scoped_routes};

/// A role failed to mount; the message says why and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MountError(pub String);

/// Why a node refuses to boot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// A role requires a role that is not mounted.
    #[error(
        "role '{role}' requires role '{missing}', which is not mounted on this node: add \"{missing}\" to [node].roles"
    )]
    MissingRole {
        /// The role with the requirement.
        role: String,
        /// The role it requires.
        missing: String,
    },
    /// The same role is listed twice.
    #[error("role '{0}' is listed twice in [node].roles")]
    DuplicateRole(String),
    /// Roles require each other in a cycle.
    #[error("roles {0:?} require each other in a cycle")]
    Cycle(Vec<String>),
    /// Two roles claim one verb.
    #[error(
        "verb '{verb}' is contributed by both the {first} and the {second} role: a verb can have only one owner"
    )]
    DuplicateVerb {
        /// The verb.
        verb: String,
        /// The role that contributed it first.
        first: String,
        /// The role that contributed it again.
        second: String,
    },
    /// A role's own mount step failed.
    #[error("mounting the {role} role failed: {error}")]
    Mount {
        /// The role.
        role: String,
        /// Its error.
        error: MountError,
    },
}

/// A composable part of a node.
#[async_trait::async_trait]
pub trait Role: Send + Sync {
    /// The role's name in `[node].roles`.
    fn name(&self) -> &str;

    /// Roles that must be mounted on the same node, before this one.
    fn requires(&self) -> Vec<String> {
        Vec::new()
    }

    /// Contributes actions, workflows, tasks and routes.
    async fn mount(&self, ctx: &mut MountContext) -> Result<(), MountError>;
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a role mounts into.
pub struct MountContext {
    role: String,
    actions: BTreeMap<String, (String, Action)>,
    routes: Vec<Router>,
    scoped_routes: Vec<(String, Router)>,
    /// The routes roles described for the OpenAPI document: (path, path item).
    documented: Vec<(String, serde_json::Value)>,
    public_routes: Vec<Router>,
    readiness: Vec<(String, ReadinessCheck)>,
    metrics: prometheus_client::registry::Registry,
    tasks: Vec<(String, Task)>,
    extensions: http::Extensions,
    shutdown: CancellationToken,
    duplicate: Option<NodeError>,
}

impl MountContext {
    fn new() -> Self {
        MountContext {
            role: String::new(),
            actions: BTreeMap::new(),
            routes: Vec::new(),
            scoped_routes: Vec::new(),
            documented: Vec::new(),
            public_routes: Vec::new(),
            readiness: Vec::new(),
            metrics: prometheus_client::registry::Registry::default(),
            tasks: Vec::new(),
            extensions: http::Extensions::new(),
            shutdown: CancellationToken::new(),
            duplicate: None,
        }
    }

    /// The role being mounted.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// Describes a route this role adds (`path`, an OpenAPI 3.1 path item) in the
    /// node's OpenAPI document, beside the verbs (which are described from the
    /// catalog on their own).
    pub fn document_route(&mut self, path: &str, item: serde_json::Value) {
        self.documented.push((path.to_owned(), item));
    }

    /// Contributes a verb to the shared catalog.
    pub fn add_action(&mut self, action: Action) {
        if let Some((first, _)) = self.actions.get(&action.name) {
            self.duplicate.get_or_insert(NodeError::DuplicateVerb {
                verb: action.name.clone(),
                first: first.clone(),
                second: self.role.clone(),
            });
            return;
        }
        self.actions
            .insert(action.name.clone(), (self.role.clone(), action));
    }

    /// Contributes extra HTTP routes, merged beside the actions route and protected
    /// like it: with `[auth]` on, a request needs a valid bearer token (any accepted
    /// token; these routes declare no scope), and bodies are limited to
    /// [`crate::route::MAX_BODY_BYTES`]. Refusals use the actions route's error model.
    pub fn add_routes(&mut self, routes: Router) {
        self.routes.push(routes);
    }

    /// Contributes extra HTTP routes protected like the actions route's verbs: with
    /// `[auth]` on, a request needs a bearer token granting `scope` (`jobs:read`,
    /// `metrics:read`, ...); bodies are limited as on every route.
    pub fn add_scoped_routes(&mut self, scope: &str, routes: Router) {
        self.scoped_routes.push((scope.to_owned(), routes));
    }

    /// Contributes a check `/readyz` runs (named `<role>/<name>`): `Ok` when what
    /// the role needs answers, or why not, in words safe to show without a token.
    pub fn add_readiness_check<F, Fut>(&mut self, name: &str, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let check: ReadinessCheck = Arc::new(move || Box::pin(check()));
        self.readiness
            .push((format!("{}/{name}", self.role), check));
    }

    /// The node's metrics registry, for the role to register its metrics in while it
    /// mounts; `GET /metrics` serves them (see [`crate::metrics`]). Names start with
    /// `protomolt_<role>_`, by convention.
    pub fn metrics(&mut self) -> &mut prometheus_client::registry::Registry {
        &mut self.metrics
    }

    /// Contributes extra HTTP routes that answer without a token even when `[auth]`
    /// is on (a health check, for example). Only the body limit applies. Use
    /// [`MountContext::add_routes`] for anything that reads or changes state.
    pub fn add_public_routes(&mut self, routes: Router) {
        self.public_routes.push(routes);
    }

    /// Contributes a background task. It starts with the node and must return soon
    /// after [`MountContext::shutdown_token`] is cancelled.
    pub fn spawn_task(&mut self, name: &str, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks
            .push((format!("{}/{name}", self.role), Box::pin(task)));
    }

    /// Cancelled when the node shuts down.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Shares a value with the roles mounted after this one.
    pub fn provide<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        self.extensions.insert(value);
    }

    /// A value an earlier role shared.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.extensions.get::<T>().cloned()
    }

    /// The registry's workflow repository.
    pub fn workflows(&self) -> Result<Arc<dyn WorkflowRepository>, MountError> {
        self.get::<Arc<dyn WorkflowRepository>>().ok_or_else(|| {
            MountError(format!(
                "the {} role needs the registry role's workflow repository: mount \"registry\" too",
                self.role
            ))
        })
    }

    /// Contributes a workflow to the registry's repository, in memory.
    pub fn contribute_workflow(&self, envelope: serde_json::Value) -> Result<String, MountError> {
        self.workflows()?
            .contribute(&self.role, envelope)
            .map_err(|e| MountError(format!("contributing a workflow: {e}")))
    }
}

/// A node under construction: roles and authentication.
pub struct Node {
    roles: Vec<Arc<dyn Role>>,
    auth: Option<AuthConfig>,
    hosts: HostPolicy,
}

impl Default for Node {
    fn default() -> Self {
        Self::new()
    }
}

impl Node {
    /// An empty node, answering loopback names only (see [`Node::with_hosts`]).
    pub fn new() -> Self {
        Node {
            roles: Vec::new(),
            auth: None,
            hosts: HostPolicy {
                loopback: true,
                allowed_hosts: Vec::new(),
            },
        }
    }

    /// The `Host` and `Origin` values the node answers (by default, a loopback node's:
    /// `localhost`, `127.0.0.0/8` and `[::1]`).
    pub fn with_hosts(mut self, hosts: HostPolicy) -> Self {
        self.hosts = hosts;
        self
    }

    /// Requires bearer tokens on the actions route.
    pub fn with_auth(mut self, auth: Option<AuthConfig>) -> Self {
        self.auth = auth;
        self
    }

    /// Adds a role.
    pub fn role(mut self, role: impl Role + 'static) -> Self {
        self.roles.push(Arc::new(role));
        self
    }

    /// Adds a shared role.
    pub fn shared_role(mut self, role: Arc<dyn Role>) -> Self {
        self.roles.push(role);
        self
    }

    /// Checks the roles as [`Node::mount`] does before it mounts anything (a required
    /// role missing, a role listed twice, roles requiring each other in a cycle),
    /// without mounting or starting anything: `protomolt-node check-config` runs it.
    /// (Two roles claiming one verb shows only when they mount.)
    pub fn check_roles(&self) -> Result<(), NodeError> {
        mount_order(&self.roles).map(|_| ())
    }

    /// Orders and mounts every role.
    pub async fn mount(self) -> Result<MountedNode, NodeError> {
        let ordered = mount_order(&self.roles)?;
        let mut ctx = MountContext::new();
        for role in ordered {
            ctx.role = role.name().to_owned();
            role.mount(&mut ctx)
                .await
                .map_err(|error| NodeError::Mount {
                    role: role.name().to_owned(),
                    error,
                })?;
            if let Some(duplicate) = ctx.duplicate.take() {
                return Err(duplicate);
            }
        }
        let catalog = Catalog::new(
            ctx.actions
                .into_values()
                .map(|(_, action)| action)
                .collect(),
        );
        let gate = Arc::new(Gate::new(self.auth, self.hosts));
        let http = HttpMetrics::register(&mut ctx.metrics);
        let openapi = Arc::new(crate::openapi::document(catalog.actions(), &ctx.documented));
        let mut router = actions_router(Arc::new(catalog), openapi, gate.clone(), http);
        // Layers apply to the routes a router has when they are added, so each group
        // is wrapped before it is merged and the actions route keeps its own checks.
        let protected = ctx.routes.into_iter().fold(Router::new(), Router::merge);
        router = router.merge(protected_routes(protected, gate.clone()));
        for (scope, routes) in ctx.scoped_routes {
            router = router.merge(scoped_routes(routes, gate.clone(), &scope));
        }
        router = router.merge(public_routes(health_routes(ctx.readiness)));
        router = router.merge(scoped_routes(
            metrics_router(Arc::new(ctx.metrics)),
            gate.clone(),
            "metrics:read",
        ));
        let public = ctx
            .public_routes
            .into_iter()
            .fold(Router::new(), Router::merge);
        router = router.merge(public_routes(public));
        Ok(MountedNode {
            router,
            tasks: ctx.tasks,
            shutdown: ctx.shutdown,
            extensions: ctx.extensions,
        })
    }
}

fn mount_order(roles: &[Arc<dyn Role>]) -> Result<Vec<Arc<dyn Role>>, NodeError> {
    for (i, role) in roles.iter().enumerate() {
        if roles[..i].iter().any(|r| r.name() == role.name()) {
            return Err(NodeError::DuplicateRole(role.name().to_owned()));
        }
        for required in role.requires() {
            if !roles.iter().any(|r| r.name() == required) {
                return Err(NodeError::MissingRole {
                    role: role.name().to_owned(),
                    missing: required,
                });
            }
        }
    }
    let mut pending: Vec<Arc<dyn Role>> = roles.to_vec();
    let mut ordered: Vec<Arc<dyn Role>> = Vec::with_capacity(roles.len());
    while !pending.is_empty() {
        let ready = pending.iter().position(|role| {
            role.requires()
                .iter()
                .all(|required| ordered.iter().any(|r| r.name() == required))
        });
        match ready {
            Some(i) => ordered.push(pending.remove(i)),
            None => {
                return Err(NodeError::Cycle(
                    pending.iter().map(|r| r.name().to_owned()).collect(),
                ));
            }
        }
    }
    Ok(ordered)
}

/// A mounted node whose tasks have not started.
pub struct MountedNode {
    router: Router,
    tasks: Vec<(String, Task)>,
    shutdown: CancellationToken,
    extensions: http::Extensions,
}

impl MountedNode {
    /// The node's HTTP surface (the actions route and every role's routes).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// A value a role shared while mounting.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.extensions.get::<T>().cloned()
    }

    /// Starts every background task.
    pub fn start(self) -> RunningNode {
        let handles = self
            .tasks
            .into_iter()
            .map(|(name, task)| {
                tracing::debug!(task = %name, "starting");
                (name, tokio::spawn(task))
            })
            .collect();
        RunningNode {
            router: self.router,
            handles,
            shutdown: self.shutdown,
            extensions: self.extensions,
        }
    }
}

/// A node whose background tasks run.
pub struct RunningNode {
    router: Router,
    handles: Vec<(String, JoinHandle<()>)>,
    shutdown: CancellationToken,
    extensions: http::Extensions,
}

impl RunningNode {
    /// The node's HTTP surface.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// A value a role shared while mounting.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.extensions.get::<T>().cloned()
    }

    /// Serves HTTP on `listener` until `signal` completes, then shuts down within
    /// `grace`: new connections stop, background tasks are cancelled, and in-flight
    /// requests and tasks get until `grace` after the signal. Whatever still runs then
    /// is abandoned (requests) or aborted (tasks), so the node's grace bounds the whole
    /// shutdown.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
        grace: Duration,
    ) -> std::io::Result<()> {
        let shutdown = self.shutdown.clone();
        let (signalled, signal_seen) = tokio::sync::watch::channel(None);
        let server = axum::serve(listener, self.router.clone()).with_graceful_shutdown(
            async move {
                signal.await;
                tracing::info!(
                    grace_ms = grace.as_millis() as u64,
                    "shutting down: no new requests; in-flight requests and background tasks get the grace period"
                );
                signalled.send_replace(Some(tokio::time::Instant::now() + grace));
                shutdown.cancel();
            },
        );
        // Reached `grace` after the signal; never before the signal.
        let mut seen = signal_seen.clone();
        let drain_deadline = async move {
            match seen.wait_for(Option::is_some).await.map(|d| *d) {
                Ok(Some(deadline)) => tokio::time::sleep_until(deadline).await,
                _ => std::future::pending().await,
            }
        };
        let served = tokio::select! {
            served = server.into_future() => served,
            () = drain_deadline => {
                // Dropping the server stops waiting for its connections; their tasks
                // end with the runtime when the process exits.
                tracing::warn!("requests still in flight after the shutdown grace; not waiting for them");
                Ok(())
            }
        };
        // Without a signal (the server failed), the tasks get the whole grace from now.
        let deadline = signal_seen
            .borrow()
            .unwrap_or_else(|| tokio::time::Instant::now() + grace);
        self.shutdown_by(deadline).await;
        served
    }

    /// Aborts every task at once, with no shutdown path: what a crash does to the
    /// node's work (tests use it for `kill -9` without a process of its own).
    pub fn abort(self) {
        for (name, handle) in self.handles {
            tracing::debug!(task = %name, "aborted");
            handle.abort();
        }
    }

    /// Cancels every task and waits up to `grace` for each to finish.
    pub async fn shutdown(self, grace: Duration) {
        self.shutdown_by(tokio::time::Instant::now() + grace).await;
    }

    /// Cancels every task and waits until `deadline` for them to finish, then aborts
    /// the rest.
    async fn shutdown_by(self, deadline: tokio::time::Instant) {
        self.shutdown.cancel();
        for (name, mut handle) in self.handles {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(_) => tracing::debug!(task = %name, "stopped"),
                Err(_) => {
                    tracing::warn!(task = %name, "still running after the shutdown grace; aborting it");
                    handle.abort();
                }
            }
        }
    }
}
