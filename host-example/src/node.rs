//! Building and serving a node from its config.

use std::sync::Arc;

use jobs_role::JobsModule;
use registry_stub::node::RunningNode;
use registry_stub::{Node, RegistryRole, Role};

use crate::config::HostConfig;
use crate::parse::ParseRole;

/// The roles `[node].roles` enables, constructed from their config sections.
fn roles(config: &HostConfig) -> Vec<Arc<dyn Role>> {
    config
        .node
        .roles
        .iter()
        .filter_map(|name| -> Option<Arc<dyn Role>> {
            match name.as_str() {
                "registry" => Some(Arc::new(RegistryRole::from_section(&config.registry))),
                "parse" => Some(Arc::new(ParseRole {
                    config: config.parse.clone(),
                })),
                "jobs" => Some(Arc::new(JobsModule::new(config.jobs.clone()))),
                // HostConfig::check refused unknown names already.
                _ => None,
            }
        })
        .collect()
}

/// Mounts the configured roles and starts their background tasks.
pub async fn start(config: &HostConfig) -> Result<RunningNode, String> {
    let mut node = Node::new().with_auth(config.auth.clone());
    for role in roles(config) {
        node = node.shared_role(role);
    }
    let mounted = node.mount().await.map_err(|e| e.to_string())?;
    Ok(mounted.start())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the node");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        () = terminate => {}
    }
}

/// Serves the node until SIGINT/SIGTERM.
pub async fn run(config: HostConfig) -> Result<(), String> {
    let node = start(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.node.bind)
        .await
        .map_err(|e| format!("cannot bind {} (node.bind): {e}", config.node.bind))?;
    if config.auth.is_none() {
        tracing::warn!(bind = %config.node.bind, "no [auth] configured: every call is accepted, so the node only binds to loopback");
    }
    // The address actually bound (a port of 0 in the config picks a free one).
    let addr = listener
        .local_addr()
        .map_or_else(|_| config.node.bind.to_string(), |a| a.to_string());
    tracing::info!(%addr, roles = ?config.node.roles, "serving POST /v1/actions/{{verb}} and GET /v1/actions");
    node.serve(listener, shutdown_signal(), config.node.shutdown_grace())
        .await
        .map_err(|e| format!("serving: {e}"))
}
