//! The node's typed configuration (the `[node]`, `[auth]` and `[registry]` sections)
//! and the bind policy.
//!
//! Defaults: bind `127.0.0.1:8080`, roles `["registry"]`, text logs, 30 s shutdown
//! grace, workflows stored in `./workflows`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::auth::AuthConfig;

/// The `[node]` section.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// Address the actions route listens on.
    pub bind: SocketAddr,
    /// Roles to mount, by name.
    pub roles: Vec<String>,
    /// How long running work may take to finish after SIGINT/SIGTERM.
    pub shutdown_grace_ms: u64,
}

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            roles: vec!["registry".into()],
            shutdown_grace_ms: 30_000,
        }
    }
}

impl NodeSection {
    /// The shutdown grace as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

/// The `[registry]` section.
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
