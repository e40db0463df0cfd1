//! The node config: `[node]`, `[auth]`, `[registry]`, `[parse]`, `[jobs]`, loaded from TOML with
//! environment overrides (`PROTOMOLT_NODE__BIND=...`).

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use registry_stub::auth::AuthConfig;
use registry_stub::config::{NodeSection, RegistryConfig, check_bind};
use serde::Deserialize;

use jobs_role::JobsConfig;

use crate::parse::ParseConfig;

/// Everything the host reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    pub node: NodeSection,
    pub auth: Option<AuthConfig>,
    pub registry: RegistryConfig,
    pub parse: ParseConfig,
    pub jobs: JobsConfig,
}

/// The roles this host knows how to mount.
pub const KNOWN_ROLES: &[&str] = &["registry", "parse", "jobs"];

impl HostConfig {
    /// Loads the file (when given) and the environment, and checks the result; the
    /// error is one line naming the key and the fix.
    pub fn load(path: Option<&Path>) -> Result<HostConfig, String> {
        let mut figment = Figment::new();
        if let Some(path) = path {
            if !path.exists() {
                return Err(format!("config file {} does not exist", path.display()));
            }
            figment = figment.merge(Toml::file(path));
        }
        // Only `PROTOMOLT_<SECTION>__<KEY>` variables are config; other PROTOMOLT_*
        // variables (the set-up script's, for example) are not.
        figment = figment.merge(
            Env::prefixed("PROTOMOLT_")
                .split("__")
                .filter(|key| key.as_str().contains('.')),
        );
        let config: HostConfig = figment
            .extract()
            .map_err(|e| format!("invalid config: {}", one_line(&e)))?;
        config.check()?;
        Ok(config)
    }

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
        }
        check_bind(self.node.bind, self.auth.as_ref())
    }
}

fn one_line(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}
