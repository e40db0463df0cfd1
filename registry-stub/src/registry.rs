//! The registry role: the workflow repository, the shared runner, and its four verbs.
//!
//! | verb             | scope            | answer                                                  |
//! |------------------|------------------|---------------------------------------------------------|
//! | `put-workflow`   | `registry:write` | `{ok, name, created}`; findings answer 400              |
//! | `get-workflow`   | `registry:read`  | `{ok, workflow, source}` or `{ok: false, error}`        |
//! | `list-workflows` | `registry:read`  | `{workflows: [{name, source, steps}]}`                  |
//! | `run-workflow`   | `workflow:run`   | `{ok, output, steps}` or `{ok: false, failedStep, error}` |
//!
//! `run-workflow` holds its HTTP request for the whole run, so it is bounded
//! ([`RunLimits`]): a run longer than `registry.run_timeout_ms` is stopped and answers
//! `unavailable`, and beyond `registry.max_concurrent_runs` runs at once a call answers
//! `unavailable` straight away instead of queuing.

use std::sync::Arc;

use prost_reflect::{DescriptorPool, MessageDescriptor};
use serde_json::{Value, json};
use workflow::{Checkpoint, CompiledWorkflow, Findings, RunError, Runner};

use workflow::outbound::OutboundPolicy;

use crate::action::{Action, ActionError, ActionRequest, ActionResult};
use crate::config::{RegistryConfig, RegistrySection, RunLimits, TlsSection};
use crate::node::{MountContext, MountError, Role};
use crate::repository::{FileWorkflowRepository, RepositoryError, WorkflowRepository, check_name};

/// The registry's surface contract: request and response messages of its verbs.
pub const REGISTRY_PROTO: &str = include_str!("../proto/registry.proto");
const REGISTRY_PROTO_FILE: &str = "protomolt/registry/v1/registry.proto";

/// The registry role.
pub struct RegistryRole {
    config: RegistryConfig,
    limits: RunLimits,
    max_response_bytes: usize,
    max_map_items: usize,
    tls: Vec<TlsSection>,
    outbound: OutboundPolicy,
}

impl RegistryRole {
    /// A registry storing workflows under `config.workflows_dir`, with the default
    /// limits of `run-workflow`.
    pub fn new(config: RegistryConfig) -> Self {
        RegistryRole {
            config,
            limits: RunLimits::default(),
            max_response_bytes: workflow::runner::DEFAULT_MAX_RESPONSE_BYTES,
            max_map_items: workflow::runner::DEFAULT_MAX_MAP_ITEMS,
            tls: Vec::new(),
            outbound: OutboundPolicy::unrestricted(),
        }
    }

    /// What the node's workflows may call (`[workflow.outbound]`): `put-workflow`,
    /// `run-workflow` and roles' contributions are refused with a finding per broken
    /// rule, and the shared engine checks every call against it (jobs included).
    /// Without it, nothing is refused.
    pub fn with_outbound(mut self, policy: OutboundPolicy) -> Self {
        self.outbound = policy;
        self
    }

    /// A registry configured by a whole `[registry]` section.
    pub fn from_section(section: &RegistrySection) -> Self {
        Self::new(section.store())
            .with_run_limits(section.run_limits())
            .with_max_response_bytes(section.max_response_bytes)
            .with_tls(section.tls.clone())
    }

    /// How TLS steps reach their targets (`[[registry.tls]]`); the files are read when
    /// the role mounts, and a file that cannot be read stops the node from booting.
    pub fn with_tls(mut self, tls: Vec<TlsSection>) -> Self {
        self.tls = tls;
        self
    }

    /// The most elements a map step may fan out over (`[workflow].max_map_items`).
    pub fn with_max_map_items(mut self, items: usize) -> Self {
        self.max_map_items = items;
        self
    }

    /// The largest step response the shared engine accepts (unless a step says
    /// otherwise).
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Replaces the limits of `run-workflow`.
    pub fn with_run_limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// A 400 listing every finding of a workflow that does not compile, with one detail
/// per finding (`step`, `path`, `message`).
pub fn findings_error(findings: &Findings) -> ActionError {
    let details = findings
        .0
        .iter()
        .map(|f| json!({ "step": f.step, "path": f.path, "message": f.message }))
        .collect();
    ActionError::invalid(findings.to_string()).with_details(details)
}

/// Looks up a message of a role's surface contract.
pub fn surface_message(pool: &DescriptorPool, name: &str) -> Result<MessageDescriptor, MountError> {
    pool.get_message_by_name(name)
        .ok_or_else(|| MountError(format!("the surface contract has no message {name}")))
}

fn repository_error(error: RepositoryError) -> ActionError {
    match error {
        RepositoryError::Findings(findings) => findings_error(&findings),
        RepositoryError::InvalidName { .. } => {
            ActionError::invalid(format!("workflow.name: {error}"))
        }
        RepositoryError::Contributed { .. } => ActionError::invalid(error.to_string()),
        RepositoryError::Io { .. } => ActionError::internal(error),
    }
}

#[async_trait::async_trait]
impl Role for RegistryRole {
    fn name(&self) -> &str {
        "registry"
    }

    async fn mount(&self, ctx: &mut MountContext) -> Result<(), MountError> {
        self.limits.check().map_err(MountError)?;
        let pool = workflow::schema::compile_proto_pool(REGISTRY_PROTO_FILE, REGISTRY_PROTO)
            .map_err(MountError)?;
        let message = |name: &str| surface_message(&pool, &format!("protomolt.registry.v1.{name}"));
        let repository = Arc::new(
            FileWorkflowRepository::open_with(
                &self.config.workflows_dir,
                Arc::new(self.outbound.clone()),
            )
            .await
            .map_err(|e| {
                MountError(format!(
                    "opening the workflows directory (registry.workflows_dir): {e}"
                ))
            })?,
        );
        let mut tls = Vec::with_capacity(self.tls.len());
        for (index, entry) in self.tls.iter().enumerate() {
            tls.push(entry.load(index).await.map_err(MountError)?);
        }
        let runner = Arc::new(
            Runner::new()
                .with_max_response_bytes(self.max_response_bytes)
                .with_max_map_items(self.max_map_items)
                .with_outbound(self.outbound.clone())
                .with_tls_targets(tls),
        );
        ctx.provide::<Arc<dyn WorkflowRepository>>(repository.clone());
        ctx.provide::<Arc<Runner>>(runner.clone());

        let store = repository.clone();
        ctx.add_action(Action::new(
            "put-workflow",
            "Compile, verify and store a workflow under its own name (files in the registry's directory); dryRun checks it as a put would and stores nothing.",
            "registry:write",
            message("PutWorkflowRequest")?,
            message("PutWorkflowResponse")?,
            move |request: ActionRequest| {
                let store = store.clone();
                async move {
                    let envelope = request.get("workflow").cloned().unwrap_or(Value::Null);
                    if request.get("dryRun").and_then(Value::as_bool) == Some(true) {
                        let (name, created) =
                            store.check(envelope).await.map_err(repository_error)?;
                        return Ok(
                            json!({ "ok": true, "name": name, "created": created, "checked": true }),
                        );
                    }
                    let (name, created) = store.put(envelope).await.map_err(repository_error)?;
                    Ok(json!({ "ok": true, "name": name, "created": created }))
                }
            },
        ));

        let store = repository.clone();
        ctx.add_action(Action::new(
            "get-workflow",
            "Read one stored workflow by name.",
            "registry:read",
            message("GetWorkflowRequest")?,
            message("GetWorkflowResponse")?,
            move |request: ActionRequest| {
                let store = store.clone();
                async move {
                    let name = request.str("name");
                    check_name(name).map_err(|e| ActionError::invalid(format!("name: {e}")))?;
                    Ok(match store.resolve(name) {
                        Some(stored) => json!({ "ok": true, "workflow": stored.envelope, "source": stored.source.label() }),
                        None => json!({ "ok": false, "error": format!("no workflow named '{name}'") }),
                    })
                }
            },
        ));

        let store = repository.clone();
        let notes = crate::notes::WorkflowNotesSlot::default();
        ctx.provide(notes.clone());
        ctx.add_action(Action::new(
            "list-workflows",
            "List every stored workflow: name, source (file or contributing role), step count, and whether the jobs role has it paused.",
            "registry:read",
            message("ListWorkflowsRequest")?,
            message("ListWorkflowsResponse")?,
            move |_request: ActionRequest| {
                let (store, notes) = (store.clone(), notes.clone());
                async move {
                    let notes = notes.notes().await;
                    let workflows: Vec<Value> = store
                        .list()
                        .into_iter()
                        .map(|s| {
                            let mut summary = json!({ "name": s.name, "source": s.source.label(), "steps": s.steps });
                            if let Some(Value::Object(note)) = notes.get(&s.name) {
                                for (key, value) in note {
                                    summary[key.as_str()] = value.clone();
                                }
                            }
                            summary
                        })
                        .collect();
                    Ok(json!({ "workflows": workflows }))
                }
            },
        ));

        let store: Arc<dyn WorkflowRepository> = repository;
        let limits = self.limits;
        // Refuse rather than queue: a queued caller holds a connection for nothing,
        // and a burst would otherwise grow without bound.
        let slots = Arc::new(tokio::sync::Semaphore::new(
            limits
                .max_concurrent_runs
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        ));
        ctx.add_action(Action::new(
            "run-workflow",
            "Run a workflow synchronously (inline, or stored by name) and answer its output and every step's checkpoint; bounded by registry.run_timeout_ms and registry.max_concurrent_runs.",
            "workflow:run",
            message("RunWorkflowRequest")?,
            message("RunWorkflowResponse")?,
            move |request: ActionRequest| {
                let (store, runner, slots) = (store.clone(), runner.clone(), slots.clone());
                async move {
                    let _slot = slots.try_acquire_owned().map_err(|_| {
                        ActionError::unavailable(format!(
                            "too many workflows running (registry.max_concurrent_runs = {}); retry later",
                            limits.max_concurrent_runs
                        ))
                    })?;
                    tokio::time::timeout(
                        limits.run_timeout(),
                        run_workflow(store.as_ref(), &runner, &request),
                    )
                    .await
                    .map_err(|_| {
                        ActionError::unavailable(format!(
                            "the run was stopped after registry.run_timeout_ms = {} ms; submit long workflows as jobs (submit-workflow) or raise the setting",
                            limits.run_timeout_ms
                        ))
                    })?
                }
            },
        ));
        Ok(())
    }
}

/// The envelope a request names: inline `workflow`, or stored `workflowName`.
pub fn requested_envelope(
    store: &dyn WorkflowRepository,
    request: &ActionRequest,
) -> Result<Value, ActionError> {
    if let Some(inline) = request.get("workflow") {
        return Ok(inline.clone());
    }
    let name = request.str("workflowName");
    store
        .resolve(name)
        .map(|stored| stored.envelope)
        .ok_or_else(|| {
            ActionError::invalid(format!(
                "workflowName: no stored workflow named '{name}' (list-workflows shows them)"
            ))
        })
}

async fn run_workflow(
    store: &dyn WorkflowRepository,
    runner: &Runner,
    request: &ActionRequest,
) -> ActionResult {
    let envelope = requested_envelope(store, request)?;
    // Compiling a large envelope takes seconds, and the input's rules are the author's
    // CEL: neither runs on the async threads.
    let compiled = tokio::task::spawn_blocking(move || CompiledWorkflow::compile_new(&envelope))
        .await
        .map_err(ActionError::internal)?
        .map_err(|f| findings_error(&f))?;
    let breaches = runner.outbound().findings(&compiled);
    if !breaches.is_empty() {
        return Err(findings_error(&Findings(breaches)));
    }
    let input = compiled
        .parse_input_within(
            request.get("input").unwrap_or(&json!({})),
            workflow::compile::RULES_TIME_LIMIT,
        )
        .await
        .map_err(|e| ActionError::invalid(e.located("input")))?;
    Ok(match runner.run(&compiled, &input).await {
        Ok(outcome) => json!({
            "ok": true,
            "output": outcome.output_json(),
            "steps": outcome.steps.iter().map(Checkpoint::to_json).collect::<Vec<_>>(),
        }),
        Err(RunError::WouldPark) => {
            json!({ "ok": false, "error": RunError::WouldPark.to_string() })
        }
        Err(RunError::Failed(failure)) => {
            json!({ "ok": false, "failedStep": failure.step, "error": failure.to_string() })
        }
    })
}
