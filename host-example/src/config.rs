//! The node config: `[node]`, `[auth]`, `[registry]`, `[parse]`, `[jobs]`, `[telemetry]`, loaded from TOML with
//! environment overrides.
//!
//! The environment forms ([`EnvOverrides`]):
//!
//! - `PROTOMOLT_<SECTION>__<KEY>=value` sets `<section>.<key>` (`__` separates the
//!   parts, names are lower-cased): `PROTOMOLT_NODE__BIND=127.0.0.1:9000`. Values stay
//!   strings until the key's type asks for more, so `PROTOMOLT_JOBS__WORKER_ID=123` is
//!   the string `"123"` while `PROTOMOLT_JOBS__WORKER_COUNT=2` is the number 2. A value
//!   written as `[a, b]` is a list (`PROTOMOLT_NODE__ROLES=[registry,jobs]`).
//! - `PROTOMOLT_KAFKA_OPTION_<NAME>=value` sets `jobs.kafka_options."<name>"`: the name
//!   is lower-cased and each `_` becomes a `.` (`__` stands for a literal `_`), so
//!   `PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD=s3cret` is `"sasl.password" = "s3cret"`. The
//!   value is taken verbatim.
//! - Either form with `_FILE` appended reads the value from that file, verbatim but for
//!   a trailing newline: `PROTOMOLT_JOBS__DATABASE_URL_FILE=/run/secrets/db`. When both
//!   forms of one key are set, the file wins.
//!
//! Other `PROTOMOLT_*` variables (the set-up script's `PROTOMOLT_DEV`, for example) are
//! not config.

use std::path::{Path, PathBuf};

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use registry_stub::auth::AuthConfig;
use registry_stub::config::{NodeSection, RegistrySection, check_bind};
use serde::Deserialize;

use jobs_role::JobsConfig;

use crate::parse::ParseConfig;

/// Everything the host reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    pub node: NodeSection,
    pub auth: Option<AuthConfig>,
    pub registry: RegistrySection,
    pub parse: ParseConfig,
    pub jobs: JobsConfig,
    pub telemetry: TelemetrySection,
}

/// `[telemetry]`: traces, off unless an endpoint is set.
#[derive(Debug, Clone, Default, Deserialize)]
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
    /// Loads the file (when given) and the process environment, and checks the result;
    /// the error is one line naming the key and the fix.
    pub fn load(path: Option<&Path>) -> Result<HostConfig, String> {
        Self::load_with(path, EnvOverrides::from_process())
    }

    /// Loads the file (when given) with `env` over it, and checks the result.
    pub fn load_with(path: Option<&Path>, env: EnvOverrides) -> Result<HostConfig, String> {
        let mut figment = Figment::new();
        if let Some(path) = path {
            if !path.exists() {
                return Err(format!("config file {} does not exist", path.display()));
            }
            figment = figment.merge(Toml::file(path));
        }
        // Lossy: the environment provides strings, and a string that spells a number or
        // a boolean becomes one where the key's type asks for it.
        let config: HostConfig = figment
            .merge(env)
            .extract_lossy()
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

const PREFIX: &str = "PROTOMOLT_";
const KAFKA_OPTION: &str = "KAFKA_OPTION_";
const FILE_SUFFIX: &str = "_FILE";

/// The environment as config (the forms are in the module documentation): a figment
/// provider over a given set of variables, so tests pass their own.
#[derive(Debug, Clone, Default)]
pub struct EnvOverrides {
    vars: Vec<(String, String)>,
}

/// Where one variable goes.
struct Override {
    path: Vec<String>,
    /// Read the value from the file the variable names.
    from_file: bool,
    /// Take the value as written, never as a list or a table (secrets).
    verbatim: bool,
}

impl EnvOverrides {
    /// Over `vars` (name, value).
    pub fn new<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> EnvOverrides {
        EnvOverrides {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// Over the process environment.
    pub fn from_process() -> EnvOverrides {
        Self::new(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }))
    }

    fn parse_name(name: &str) -> Option<Override> {
        let upper = name.trim().to_ascii_uppercase();
        let rest = upper.strip_prefix(PREFIX)?;
        let (rest, from_file) = match rest.strip_suffix(FILE_SUFFIX) {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        if let Some(option) = rest.strip_prefix(KAFKA_OPTION) {
            let option = option
                .to_ascii_lowercase()
                .split("__")
                .map(|part| part.replace('_', "."))
                .collect::<Vec<_>>()
                .join("_");
            if option.is_empty() || option.split('.').any(str::is_empty) {
                return None;
            }
            return Some(Override {
                path: vec!["jobs".into(), "kafka_options".into(), option],
                from_file,
                verbatim: true,
            });
        }
        // Only `<SECTION>__<KEY>` names are config.
        if !rest.contains("__") {
            return None;
        }
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if path.iter().any(String::is_empty) {
            return None;
        }
        Some(Override {
            path,
            from_file,
            verbatim: from_file,
        })
    }
}

/// A value as the environment gives it: a string, unless written as a list or table.
fn env_value(raw: &str) -> Value {
    match raw.parse::<Value>() {
        Ok(structured @ (Value::Array(..) | Value::Dict(..))) => structured,
        Ok(Value::String(_, unquoted)) => Value::from(unquoted),
        _ => Value::from(raw.to_owned()),
    }
}

fn insert(dict: &mut Dict, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = dict;
    for key in parents {
        let entry = current
            .entry(key.clone())
            .or_insert_with(|| Value::from(Dict::new()));
        if !matches!(entry, Value::Dict(..)) {
            *entry = Value::from(Dict::new());
        }
        current = match entry {
            Value::Dict(_, next) => next,
            // Made a table just above.
            _ => return,
        };
    }
    current.insert(last.clone(), value);
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        // Errors name the key and the variable that set it:
        // `node.shutdown_grace_ms (PROTOMOLT_NODE__SHUTDOWN_GRACE_MS)`.
        Metadata::named("`PROTOMOLT_` environment variable(s)").interpolater(
            |_: &Profile, keys: &[&str]| {
                let variable = keys
                    .iter()
                    .map(|k| k.to_ascii_uppercase())
                    .collect::<Vec<_>>()
                    .join("__");
                format!("{} ({PREFIX}{variable})", keys.join("."))
            },
        )
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut overrides: Vec<(Override, &str, &str)> = self
            .vars
            .iter()
            .filter_map(|(name, value)| {
                Some((Self::parse_name(name)?, name.as_str(), value.as_str()))
            })
            .collect();
        // Files after plain values, so a `_FILE` form wins over its plain form.
        overrides.sort_by_key(|(o, name, _)| (o.from_file, name.to_owned()));
        let mut dict = Dict::new();
        for (target, name, value) in overrides {
            let raw = if target.from_file {
                let path = PathBuf::from(value);
                let contents = read_secret(&path)
                    .map_err(|e| format!("{name}: cannot read {}: {e}", path.display()))?;
                contents
                    .strip_suffix('\n')
                    .map(|c| c.strip_suffix('\r').unwrap_or(c))
                    .unwrap_or(&contents)
                    .to_owned()
            } else {
                value.to_owned()
            };
            let value = if target.verbatim {
                Value::from(raw)
            } else {
                env_value(&raw)
            };
            insert(&mut dict, &target.path, value);
        }
        Ok(Profile::Default.collect(dict))
    }
}

/// The most a `_FILE` secret may hold: a secret, not a data set (and never
/// `/dev/zero` read until memory runs out).
const MAX_SECRET_BYTES: u64 = 1024 * 1024;

/// Reads a `_FILE` value, at most [`MAX_SECRET_BYTES`].
fn read_secret(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut contents = String::new();
    std::fs::File::open(path)?
        .take(MAX_SECRET_BYTES + 1)
        .read_to_string(&mut contents)?;
    if contents.len() as u64 > MAX_SECRET_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_SECRET_BYTES} bytes; a secret file holds one value"
        )));
    }
    Ok(contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<HostConfig, String> {
        HostConfig::load_with(None, EnvOverrides::new(vars.iter().copied()))
    }

    #[test]
    fn a_numeric_looking_value_for_a_string_key_stays_a_string() {
        let config = load(&[("PROTOMOLT_JOBS__WORKER_ID", "123")]).unwrap();
        assert_eq!(config.jobs.worker_id, "123");
        let config = load(&[("PROTOMOLT_JOBS__WORKER_ID", "true")]).unwrap();
        assert_eq!(config.jobs.worker_id, "true");
    }

    #[test]
    fn numeric_and_list_keys_still_parse_from_the_environment() {
        let config = load(&[
            ("PROTOMOLT_JOBS__MAX_IN_FLIGHT", "2"),
            ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "45000"),
            ("PROTOMOLT_NODE__ROLES", "[registry,parse]"),
            ("PROTOMOLT_REGISTRY__MAX_CONCURRENT_RUNS", "3"),
        ])
        .unwrap();
        assert_eq!(config.jobs.max_in_flight, 2);
        assert_eq!(config.node.shutdown_grace_ms, 45_000);
        assert_eq!(config.node.roles, ["registry", "parse"]);
        assert_eq!(config.registry.max_concurrent_runs, 3);

        let err = load(&[("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "soon")]).unwrap_err();
        assert!(
            err.contains("node.shutdown_grace_ms (PROTOMOLT_NODE__SHUTDOWN_GRACE_MS)"),
            "{err}"
        );
    }

    #[test]
    fn a_kafka_option_comes_from_the_environment_with_dots_in_its_name() {
        let config = load(&[
            ("PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD", "s3cret"),
            ("PROTOMOLT_KAFKA_OPTION_SECURITY_PROTOCOL", "SASL_SSL"),
            ("PROTOMOLT_KAFKA_OPTION_SASL_KERBEROS_KINIT__CMD", "kinit"),
            // Verbatim: not a list, not a number.
            ("PROTOMOLT_KAFKA_OPTION_SASL_USERNAME", "[007"),
        ])
        .unwrap();
        let options = &config.jobs.kafka_options;
        assert_eq!(options["sasl.password"], "s3cret");
        assert_eq!(options["security.protocol"], "SASL_SSL");
        assert_eq!(options["sasl.kerberos.kinit_cmd"], "kinit");
        assert_eq!(options["sasl.username"], "[007");
    }

    #[test]
    fn a_file_form_reads_the_secret_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        std::fs::write(&db, "postgres://u:p@db/protomolt\n").unwrap();
        let password = dir.path().join("password");
        std::fs::write(&password, "from-file").unwrap();
        let config = load(&[
            ("PROTOMOLT_JOBS__DATABASE_URL", "postgres://plain"),
            ("PROTOMOLT_JOBS__DATABASE_URL_FILE", db.to_str().unwrap()),
            (
                "PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD_FILE",
                password.to_str().unwrap(),
            ),
            ("PROTOMOLT_JOBS__WORKER_ID", "w1"),
        ])
        .unwrap();
        assert_eq!(
            config.jobs.database_url.as_deref(),
            Some("postgres://u:p@db/protomolt")
        );
        assert_eq!(config.jobs.kafka_options["sasl.password"], "from-file");

        let err = load(&[("PROTOMOLT_JOBS__DATABASE_URL_FILE", "/no/such/secret")]).unwrap_err();
        assert!(
            err.contains("PROTOMOLT_JOBS__DATABASE_URL_FILE: cannot read /no/such/secret"),
            "{err}"
        );

        // Not a secret: /dev/zero is refused after a megabyte, not read until memory
        // runs out.
        let err = load(&[("PROTOMOLT_JOBS__WORKER_ID_FILE", "/dev/zero")]).unwrap_err();
        assert!(err.contains("larger than 1048576 bytes"), "{err}");
    }

    #[test]
    fn variables_without_a_section_are_not_config() {
        let config = load(&[("PROTOMOLT_DEV", "/somewhere"), ("PROTOMOLT_", "x")]).unwrap();
        assert_eq!(config.node, NodeSection::default());
    }

    #[test]
    fn the_node_grace_must_exceed_the_jobs_grace_when_jobs_run() {
        let err = load(&[
            ("PROTOMOLT_NODE__ROLES", "[registry,jobs]"),
            ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "2000"),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            "invalid config: [node].shutdown_grace_ms (2000) must be greater than [jobs].shutdown_grace_ms (20000): running jobs need the node to wait for their grace"
        );
        // Equal is not enough: the node must outlast the jobs' grace.
        assert!(
            load(&[
                ("PROTOMOLT_NODE__ROLES", "[registry,jobs]"),
                ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "20000"),
            ])
            .is_err()
        );
        assert!(
            load(&[
                ("PROTOMOLT_NODE__ROLES", "[registry,jobs]"),
                ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "25000"),
            ])
            .is_ok()
        );
        // Without the jobs role there are no jobs to wait for.
        assert!(load(&[("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "2000")]).is_ok());
    }

    #[test]
    fn zero_run_limits_are_refused_naming_the_key() {
        let err = load(&[("PROTOMOLT_REGISTRY__MAX_CONCURRENT_RUNS", "0")]).unwrap_err();
        assert!(err.contains("registry.max_concurrent_runs"), "{err}");
        let err = load(&[("PROTOMOLT_REGISTRY__RUN_TIMEOUT_MS", "0")]).unwrap_err();
        assert!(err.contains("registry.run_timeout_ms"), "{err}");
    }
}
