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
                "registry" => {
                    Some(Arc::new(
                        RegistryRole::from_section(&config.registry)
                            .with_outbound(
                                // HostConfig::check refused rules that do not compile; if it
                                // was skipped, fail closed rather than open.
                                config.workflow.outbound.compile().unwrap_or_else(|_| {
                                    workflow::outbound::OutboundPolicy::nothing()
                                }),
                            )
                            .with_max_map_items(config.workflow.max_map_items),
                    ))
                }
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

/// The node the config describes, its roles not mounted yet.
fn node(config: &HostConfig) -> Node {
    roles(config).into_iter().fold(
        Node::new()
            .with_auth(config.auth.clone())
            .with_hosts(config.node.host_policy()),
        Node::shared_role,
    )
}

/// What `run` refuses before it serves, checked without starting anything (no
/// database, broker or socket): the roles' requirements and order, as mounting checks
/// them ([`Node::check_roles`], the same function), and, with the registry role on,
/// that every `[[registry.tls]]` file can be read. `check-config` runs it after
/// [`HostConfig::check`].
pub async fn check(config: &HostConfig) -> Result<(), String> {
    node(config)
        .check_roles()
        .map_err(|e| format!("invalid config: {e}"))?;
    if config.node.roles.iter().any(|r| r == "registry") {
        for (index, entry) in config.registry.tls.iter().enumerate() {
            entry
                .load(index)
                .await
                .map_err(|e| format!("invalid config: {e}"))?;
        }
    }
    Ok(())
}

/// Mounts the configured roles and starts their background tasks.
pub async fn start(config: &HostConfig) -> Result<RunningNode, String> {
    let mounted = node(config).mount().await.map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(roles: &[&str]) -> HostConfig {
        let mut config = HostConfig::default();
        config.node.roles = roles.iter().map(|r| (*r).to_owned()).collect();
        config
    }

    #[tokio::test]
    async fn check_refuses_the_roles_run_refuses_without_starting_anything() {
        let err = check(&config(&["jobs"])).await.unwrap_err();
        assert_eq!(
            err,
            "invalid config: role 'jobs' requires role 'registry', which is not mounted on this node: add \"registry\" to [node].roles"
        );
        // The refusal mounting gives (run mounts through the same function).
        let Err(mounting) = node(&config(&["jobs"])).mount().await else {
            panic!("the jobs role mounted without the registry role");
        };
        assert_eq!(err, format!("invalid config: {mounting}"));

        let err = check(&config(&["registry", "registry"])).await.unwrap_err();
        assert_eq!(
            err,
            "invalid config: role 'registry' is listed twice in [node].roles"
        );
        // In any order: mounting orders them.
        check(&config(&["jobs", "registry", "parse"]))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn check_refuses_a_tls_file_that_cannot_be_read() {
        let mut config = config(&["registry"]);
        config.registry.tls = vec![registry_stub::config::TlsSection {
            targets: "*:443".into(),
            ca_file: Some("/no/such/ca.pem".into()),
            cert_file: None,
            key_file: None,
        }];
        let err = check(&config).await.unwrap_err();
        assert!(
            err.starts_with("invalid config: registry.tls[0].ca_file: cannot read /no/such/ca.pem"),
            "{err}"
        );
    }
}
