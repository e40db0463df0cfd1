//! The config model: every section the host reads, and the checks that types alone
//! cannot make.

use registry_stub::auth::AuthConfig;
use registry_stub::config::{NodeSection, RegistrySection, WorkflowSection, check_bind};
use serde::{Deserialize, Serialize};

use jobs_role::JobsConfig;

use crate::parse::ParseConfig;

/// Everything the host reads.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    pub node: NodeSection,
    pub auth: Option<AuthConfig>,
    pub registry: RegistrySection,
    pub parse: ParseConfig,
    pub jobs: JobsConfig,
    pub telemetry: TelemetrySection,
    pub workflow: WorkflowSection,
}

/// `[telemetry]`: traces, off unless an endpoint is set.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// An OTLP/gRPC collector (`http://collector:4317`): spans of every verb, job
    /// segment and step call are sent there.
    pub otlp_endpoint: Option<String>,
    /// The service name the spans carry.
    pub service_name: Option<String>,
}

/// The roles this host knows how to mount.
pub const KNOWN_ROLES: &[&str] = &["registry", "parse", "jobs"];

impl HostConfig {
    /// Checks what types alone cannot.
    pub fn check(&self) -> Result<(), String> {
        for role in &self.node.roles {
            if !KNOWN_ROLES.contains(&role.as_str()) {
                return Err(format!(
                    "invalid config: node.roles names unknown role '{role}' (this node knows: {})",
                    KNOWN_ROLES.join(", ")
                ));
            }
        }
        if self.node.roles.iter().any(|r| r == "jobs") {
            self.jobs
                .check()
                .map_err(|e| format!("invalid config: {e}"))?;
            // The node's grace bounds the whole shutdown; if it ends first, a running
            // segment is aborted and its row stays RUNNING until its lease expires.
            if self.node.shutdown_grace_ms <= self.jobs.shutdown_grace_ms {
                return Err(format!(
                    "invalid config: [node].shutdown_grace_ms ({}) must be greater than [jobs].shutdown_grace_ms ({}): running jobs need the node to wait for their grace",
                    self.node.shutdown_grace_ms, self.jobs.shutdown_grace_ms
                ));
            }
        }
        self.registry
            .run_limits()
            .check()
            .map_err(|e| format!("invalid config: {e}"))?;
        if self.registry.max_response_bytes == 0 {
            return Err("invalid config: registry.max_response_bytes must be at least 1".into());
        }
        self.workflow
            .outbound
            .compile()
            .map_err(|e| format!("invalid config: {e}"))?;
        self.workflow
            .check()
            .map_err(|e| format!("invalid config: {e}"))?;
        for host in &self.node.allowed_hosts {
            let plain = !host.trim().is_empty()
                && !host.contains("://")
                && !host.contains('/')
                && !host.chars().any(|c| c.is_whitespace() || c.is_control());
            if !plain {
                return Err(format!(
                    "invalid config: node.allowed_hosts entry '{}' must be a host name or host:port, as a browser sends it in Host (jobs.internal or jobs.internal:8443)",
                    host.escape_debug()
                ));
            }
        }
        check_bind(self.node.bind, self.auth.as_ref())
    }
}
