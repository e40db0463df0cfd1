//! The node's typed configuration (the `[node]`, `[auth]` and `[registry]` sections)
//! and the bind policy.
//!
//! Defaults: bind `127.0.0.1:8080`, roles `["registry"]`, text logs, 30 s shutdown
//! grace, workflows stored in `./workflows`, `run-workflow` stopped after 60 s and at
//! most 64 runs at once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::AuthConfig;

/// The `[node]` section.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// Address the actions route listens on.
    pub bind: SocketAddr,
    /// Roles to mount, by name.
    pub roles: Vec<String>,
    /// How long running work may take to finish after SIGINT/SIGTERM.
    pub shutdown_grace_ms: u64,
    /// Further names the node is reached by, as `host` (any port) or `host:port`
    /// (`["jobs.internal:8443"]`): a request whose `Host` or `Origin` names neither a
    /// loopback address (on a loopback bind) nor one of these is refused, so a web page
    /// cannot reach the node by rebinding its own name. On a non-loopback bind an empty
    /// list leaves `Host` unchecked. See [`crate::gate`].
    pub allowed_hosts: Vec<String>,
}

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            roles: vec!["registry".into()],
            shutdown_grace_ms: 30_000,
            allowed_hosts: Vec::new(),
        }
    }
}

impl NodeSection {
    /// The `Host` and `Origin` values the node answers.
    pub fn host_policy(&self) -> crate::gate::HostPolicy {
        crate::gate::HostPolicy::for_bind(self.bind, self.allowed_hosts.clone())
    }

    /// The shutdown grace as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

/// Where the registry stores workflows (the storage part of the `[registry]` section;
/// [`RegistrySection`] is the whole section).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// Directory of stored workflows, one `NAME.json` each (created when missing).
    pub workflows_dir: PathBuf,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            workflows_dir: PathBuf::from("workflows"),
        }
    }
}

/// Limits of the synchronous `run-workflow` verb: it holds an HTTP request open for
/// the whole run, so both its length and the number of runs at once are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// A run taking longer is stopped and answers `unavailable`
    /// (`registry.run_timeout_ms`).
    pub run_timeout_ms: u64,
    /// Runs beyond this many at once answer `unavailable` at once instead of queuing
    /// (`registry.max_concurrent_runs`).
    pub max_concurrent_runs: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            run_timeout_ms: 60_000,
            max_concurrent_runs: 64,
        }
    }
}

impl RunLimits {
    /// The run timeout as a duration.
    pub fn run_timeout(&self) -> Duration {
        Duration::from_millis(self.run_timeout_ms)
    }

    /// Checks that both limits are at least 1; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        if self.run_timeout_ms == 0 {
            return Err("registry.run_timeout_ms must be greater than 0".into());
        }
        if self.max_concurrent_runs == 0 {
            return Err("registry.max_concurrent_runs must be at least 1".into());
        }
        Ok(())
    }
}

/// The whole `[registry]` section as a node config reads it: where workflows are
/// stored ([`RegistryConfig`]) and the limits of `run-workflow` ([`RunLimits`]).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RegistrySection {
    /// Directory of stored workflows, one `NAME.json` each (created when missing).
    pub workflows_dir: PathBuf,
    /// See [`RunLimits::run_timeout_ms`].
    pub run_timeout_ms: u64,
    /// See [`RunLimits::max_concurrent_runs`].
    pub max_concurrent_runs: usize,
    /// The largest step response the node's engine accepts (both `run-workflow` and
    /// jobs), unless a step declares its own `maxResponseBytes`.
    pub max_response_bytes: usize,
    /// How TLS steps reach their targets (`[[registry.tls]]`): a CA bundle and a client
    /// certificate per target pattern; the first match applies, public roots otherwise.
    pub tls: Vec<TlsSection>,
}

/// One `[[registry.tls]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// `host:port` pattern, `*` matching any run of characters (`*.internal:443`).
    pub targets: String,
    /// PEM CA bundle to trust for these targets instead of the public roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain (mutual TLS); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl TlsSection {
    /// Reads the files; the error names the entry, the key and the file.
    pub async fn load(&self, index: usize) -> Result<workflow::grpc::TlsTarget, String> {
        let read = |key: &'static str, path: &PathBuf| {
            let path = path.clone();
            async move {
                tokio::fs::read_to_string(&path).await.map_err(|e| {
                    format!(
                        "registry.tls[{index}].{key}: cannot read {}: {e}",
                        path.display()
                    )
                })
            }
        };
        let ca_pem = match &self.ca_file {
            Some(path) => Some(read("ca_file", path).await?),
            None => None,
        };
        let identity = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                Some((read("cert_file", cert).await?, read("key_file", key).await?))
            }
            (None, None) => None,
            _ => {
                return Err(format!(
                    "registry.tls[{index}]: cert_file and key_file go together (a client certificate needs its key)"
                ));
            }
        };
        Ok(workflow::grpc::TlsTarget {
            pattern: self.targets.clone(),
            ca_pem,
            identity,
        })
    }
}

impl Default for RegistrySection {
    fn default() -> Self {
        let limits = RunLimits::default();
        RegistrySection {
            workflows_dir: RegistryConfig::default().workflows_dir,
            run_timeout_ms: limits.run_timeout_ms,
            max_concurrent_runs: limits.max_concurrent_runs,
            max_response_bytes: workflow::runner::DEFAULT_MAX_RESPONSE_BYTES,
            tls: Vec::new(),
        }
    }
}

impl RegistrySection {
    /// Where workflows are stored.
    pub fn store(&self) -> RegistryConfig {
        RegistryConfig {
            workflows_dir: self.workflows_dir.clone(),
        }
    }

    /// The limits of `run-workflow`.
    pub fn run_limits(&self) -> RunLimits {
        RunLimits {
            run_timeout_ms: self.run_timeout_ms,
            max_concurrent_runs: self.max_concurrent_runs,
        }
    }
}

/// The `[workflow]` section: what the engine's steps may call, and how far a map step
/// may fan out.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WorkflowSection {
    /// `[workflow.outbound]`: the outbound call policy ([`workflow::outbound`]). By
    /// default loopback targets only (`localhost`, `127.0.0.0/8`, `[::1]`, any port),
    /// TLS required elsewhere.
    pub outbound: workflow::outbound::OutboundRules,
    /// The most elements one map step (`forEach`) may fan out over (default 10,000,
    /// at most [`MAX_MAP_ITEMS_CEILING`]); a longer list fails the step, naming both
    /// numbers.
    pub max_map_items: usize,
}

/// The largest `[workflow].max_map_items` a node accepts.
pub const MAX_MAP_ITEMS_CEILING: usize = 1_000_000;

impl Default for WorkflowSection {
    fn default() -> Self {
        WorkflowSection {
            outbound: workflow::outbound::OutboundRules::default(),
            max_map_items: workflow::runner::DEFAULT_MAX_MAP_ITEMS,
        }
    }
}

impl WorkflowSection {
    /// Refuses a `max_map_items` of 0 or past [`MAX_MAP_ITEMS_CEILING`].
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_MAP_ITEMS_CEILING).contains(&self.max_map_items) {
            return Err(format!(
                "workflow.max_map_items must be from 1 to {MAX_MAP_ITEMS_CEILING}, not {}",
                self.max_map_items
            ));
        }
        Ok(())
    }
}

/// Refuses a bind that would expose an unauthenticated node beyond this machine.
pub fn check_bind(bind: SocketAddr, auth: Option<&AuthConfig>) -> Result<(), String> {
    match auth {
        Some(auth) => auth.check(),
        None if bind.ip().is_loopback() => Ok(()),
        None => Err(format!(
            "refusing to bind {bind} without [auth]: an unauthenticated node only binds to loopback (127.0.0.1 or ::1); add [[auth.tokens]] or bind to 127.0.0.1"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_nodes_stay_on_loopback() {
        assert!(check_bind("127.0.0.1:8080".parse().unwrap(), None).is_ok());
        assert!(check_bind("[::1]:8080".parse().unwrap(), None).is_ok());
        let err = check_bind("0.0.0.0:8080".parse().unwrap(), None).unwrap_err();
        assert!(
            err.contains("refusing to bind 0.0.0.0:8080 without [auth]"),
            "{err}"
        );
    }
}
