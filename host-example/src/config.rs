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
//! Other `PROTOMOLT_*` variables are not config. The project's own (the set-up
//! script's `PROTOMOLT_DEV`, for example) are listed in [`NOT_CONFIG_VARIABLES`]; any
//! other draws a warning naming the variable probably meant
//! ([`EnvOverrides::warnings`]), since `PROTOMOLT_JOBS_WORKER_ID` (one underscore) is
//! an easy slip.
//!
//! Errors are one line naming the full dotted key, where its value came from, and for
//! an unknown key the closest valid one ([`HostConfig::load_with`]);
//! [`HostConfig::to_masked_toml`] prints the effective config with its secrets masked.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use figment::error::Kind;
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use registry_stub::auth::AuthConfig;
use registry_stub::config::{NodeSection, RegistrySection, WorkflowSection, check_bind};
use serde::{Deserialize, Serialize};
use workflow::suggest::did_you_mean;

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
    /// Loads the file (when given) with `env` over it (the process environment is
    /// [`EnvOverrides::from_process`]), and checks the result; the error is one line
    /// naming the key, where its value came from, and the fix.
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
            .merge(env.clone())
            .extract_lossy()
            .map_err(|e| format!("invalid config: {}", describe(&e, &env)))?;
        config.check()?;
        Ok(config)
    }

    /// The config as TOML, every default filled in and the secrets masked (see
    /// [`mask_secrets`]); optional keys that are not set are left out (TOML has no
    /// null). What `check-config` prints.
    pub fn to_masked_toml(&self) -> Result<String, String> {
        let mut value = toml::Value::try_from(self)
            .map_err(|e| format!("cannot print the config as TOML: {e}"))?;
        mask_secrets(&mut value);
        let toml =
            toml::to_string(&value).map_err(|e| format!("cannot print the config as TOML: {e}"))?;
        Ok(format!(
            "# The effective config (file, environment, defaults); secrets masked ({MASK}), unset optional keys left out.\n{toml}"
        ))
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
        self.workflow
            .outbound
            .compile()
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

/// A figment error as one line: the full dotted key (never figment's `default.`
/// profile prefix), where the value came from (the file, or the variable that set
/// it), and for an unknown key the closest valid one.
fn describe(error: &figment::Error, env: &EnvOverrides) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| describe_one(&e, env))
        .collect::<Vec<_>>()
        .join("; ")
}

fn describe_one(error: &figment::Error, env: &EnvOverrides) -> String {
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name == ENV_SOURCE);
    // Where the value came from: ` (in FILE)` or ` (from VARIABLE)`.
    let source = |path: &[String]| -> String {
        if from_env {
            return match env.variable_for(path) {
                Some(variable) => format!(" (from {variable})"),
                None => " (from the environment)".to_owned(),
            };
        }
        match error.metadata.as_ref().and_then(|m| m.source.as_ref()) {
            Some(Source::File(file)) => format!(" (in {})", file.display()),
            _ => String::new(),
        }
    };
    match &error.kind {
        Kind::UnknownField(found, expected) => {
            // figment's path ends with the unknown key itself.
            let mut section: Vec<String> = error.path.clone();
            if section.last() == Some(found) {
                section.pop();
            }
            let mut key = section.clone();
            key.push(found.clone());
            let source = source(&key);
            let named = |name: &str| {
                let mut near = section.clone();
                near.push(name.to_owned());
                if from_env {
                    format!("{} ({})", dotted(&near), env_name(&near))
                } else {
                    dotted(&near)
                }
            };
            match did_you_mean(found, expected.iter().copied()) {
                Some(near) if section.is_empty() => {
                    format!("unknown section [{found}]{source}; did you mean [{near}]?")
                }
                Some(near) => format!(
                    "unknown key {}{source}; did you mean {}?",
                    dotted(&key),
                    named(near)
                ),
                None if section.is_empty() => format!(
                    "unknown section [{found}]{source}; the sections are {}",
                    expected.join(", ")
                ),
                None => format!(
                    "unknown key {}{source}; the keys of [{}] are {}",
                    dotted(&key),
                    dotted(&section),
                    expected.join(", ")
                ),
            }
        }
        // The environment's own errors name their variable.
        kind if error.path.is_empty() && from_env => one_line(&kind.to_string()),
        kind if error.path.is_empty() => format!("{}{}", one_line(&kind.to_string()), source(&[])),
        kind => format!(
            "{}{}: {}",
            dotted(&error.path),
            source(&error.path),
            one_line(&kind.to_string())
        ),
    }
}

/// A message on one line. A TOML syntax error comes with a snippet of the file over
/// several lines (`TOML parse error at line 1, column 6`, the line with a caret under
/// the column, `invalid table header`, ...): kept are the position and the message.
fn one_line(message: &str) -> String {
    let snippet = |line: &str| {
        let line = line.trim();
        line.is_empty()
            || line.starts_with('|')
            || line.split_once('|').is_some_and(|(number, _)| {
                let number = number.trim();
                !number.is_empty() && number.chars().all(|c| c.is_ascii_digit())
            })
    };
    let mut lines = message.lines().filter(|line| !snippet(line)).map(str::trim);
    let first = lines.next().unwrap_or_default().to_owned();
    let rest: Vec<&str> = lines.collect();
    if rest.is_empty() {
        first
    } else {
        format!("{first}: {}", rest.join("; "))
    }
}

/// `jobs.retention.completed_ms`, `registry.tls[0].ca_file`,
/// `jobs.kafka_options."sasl.password"`.
fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
            continue;
        }
        if !out.is_empty() {
            out.push('.');
        }
        if part.contains('.') {
            out.push_str(&format!("{part:?}"));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The variable that sets `path`: `PROTOMOLT_JOBS__WORKER_ID`, or for a librdkafka
/// option `PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD`.
fn env_name(path: &[String]) -> String {
    if let [jobs, options, option] = path
        && jobs == "jobs"
        && options == "kafka_options"
    {
        let name = option
            .split('_')
            .map(|part| part.replace('.', "_"))
            .collect::<Vec<_>>()
            .join("__");
        return format!("{PREFIX}{KAFKA_OPTION}{}", name.to_ascii_uppercase());
    }
    format!(
        "{PREFIX}{}",
        path.iter()
            .map(|p| p.to_ascii_uppercase())
            .collect::<Vec<_>>()
            .join("__")
    )
}

/// What a config key holds, as the serde types declare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    /// A value: a string, a number, a boolean, a list of values.
    Value,
    /// A table of named keys: a section, `[jobs.retention]`.
    Table,
    /// A table that takes any key: `[jobs.kafka_options]`.
    AnyKey,
    /// An array of tables: `[[registry.tls]]`.
    Tables,
}

/// One config key: its path (`["jobs", "worker_id"]`) and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigKey {
    path: Vec<String>,
    kind: KeyKind,
}

/// A key no config type has: serde answers it with the valid names of its level.
const PROBE: &str = "\u{0}probe";

/// Every key of the config outside arrays of tables, read from the serde types
/// themselves so the list never drifts from the structs: a table holding only an
/// unknown key at a path makes serde name that level's keys
/// (`deny_unknown_fields`), or accept it (a table of any key), or refuse its type (a
/// value).
fn config_keys() -> &'static [ConfigKey] {
    static KEYS: OnceLock<Vec<ConfigKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = Vec::new();
        let (_, sections) = probe(&[]);
        let mut pending: Vec<Vec<String>> =
            sections.iter().map(|n| vec![(*n).to_owned()]).collect();
        while let Some(path) = pending.pop() {
            let (kind, names) = probe(&path);
            // The config is a few tables deep; a deeper path would be a probe gone wrong.
            if kind == KeyKind::Table && path.len() < 8 {
                pending.extend(names.iter().map(|name| {
                    let mut child = path.clone();
                    child.push((*name).to_owned());
                    child
                }));
            }
            keys.push(ConfigKey { path, kind });
        }
        keys.sort_by(|a, b| a.path.cmp(&b.path));
        keys
    })
}

/// How the config types answer a probe.
enum Answer {
    /// They take it: a table of any key.
    Taken,
    /// They name the keys the probe's level has.
    Names(&'static [&'static str]),
    /// Something else: the type is not a table.
    Refused,
}

/// What the key at `path` holds, with the names of its keys when it is a table.
fn probe(path: &[String]) -> (KeyKind, &'static [&'static str]) {
    let attempt = |leaf: Value| {
        let value = path.iter().rev().fold(leaf, |inner, key| {
            let mut dict = Dict::new();
            dict.insert(key.clone(), inner);
            Value::from(dict)
        });
        match Figment::from(Serialized::defaults(value)).extract::<HostConfig>() {
            Ok(_) => Answer::Taken,
            Err(e) => match e.kind {
                Kind::UnknownField(found, names) if found == PROBE => Answer::Names(names),
                // A required key of a table holding the probe is missed only after the
                // probe was taken.
                Kind::MissingField(_) => Answer::Taken,
                _ => Answer::Refused,
            },
        }
    };
    let table = || {
        let mut dict = Dict::new();
        dict.insert(PROBE.to_owned(), Value::from(String::new()));
        Value::from(dict)
    };
    match attempt(table()) {
        Answer::Names(names) => (KeyKind::Table, names),
        Answer::Taken => (KeyKind::AnyKey, &[]),
        Answer::Refused => match attempt(Value::from(vec![table()])) {
            Answer::Names(_) => (KeyKind::Tables, &[]),
            Answer::Taken | Answer::Refused => (KeyKind::Value, &[]),
        },
    }
}

/// `PROTOMOLT_*` variables the project itself uses that are not node config, so the
/// node never warns about them. `./dev` exports `PROTOMOLT_DEV` (its own path; the
/// broker-outage tests restart the broker through it) and reads
/// `PROTOMOLT_TANSU_ROOT` (where the pinned broker is installed) and
/// `PROTOMOLT_TANSU_STORAGE` (where the development broker stores); the `protomolt`
/// command line reads `PROTOMOLT_URL` and `PROTOMOLT_TOKEN`. Whatever starts reading
/// another such variable adds it here (a test checks the repository's uses).
pub const NOT_CONFIG_VARIABLES: &[&str] = &[
    "PROTOMOLT_DEV",
    "PROTOMOLT_TANSU_ROOT",
    "PROTOMOLT_TANSU_STORAGE",
    "PROTOMOLT_URL",
    "PROTOMOLT_TOKEN",
];

/// The warning for a `PROTOMOLT_*` variable that sets nothing, naming the variable it
/// probably meant: its name with single underscores is compared with every key's.
fn unknown_variable(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    let rest = upper.strip_prefix(PREFIX).unwrap_or(&upper);
    let (rest, file) = match rest.strip_suffix(FILE_SUFFIX) {
        Some(rest) => (rest, FILE_SUFFIX),
        None => (rest, ""),
    };
    let flat = rest.replace("__", "_");
    let keys: Vec<(String, &ConfigKey)> = config_keys()
        .iter()
        .filter(|key| key.path.len() >= 2)
        .map(|key| (key.path.join("_").to_ascii_uppercase(), key))
        .collect();
    let meant = keys
        .iter()
        .find(|(flat_key, _)| *flat_key == flat)
        .or_else(|| {
            let near = did_you_mean(&flat, keys.iter().map(|(flat_key, _)| flat_key.as_str()))?;
            keys.iter().find(|(flat_key, _)| flat_key == near)
        });
    match meant {
        Some((_, key)) => format!(
            "{name} sets no config key and is ignored; did you mean {}{file} ({})?",
            env_name(&key.path),
            dotted(&key.path)
        ),
        None => format!(
            "{name} sets no config key and is ignored: config variables are {PREFIX}<SECTION>__<KEY> (two underscores after the section) or {PREFIX}{KAFKA_OPTION}<NAME>"
        ),
    }
}

/// What stands for a secret in printed config.
const MASK: &str = "***";

/// Masks the secrets of the config as a TOML value, in place:
///
/// - every URL's password (`postgres://user:***@host/db`) and its query parameters
///   named like a secret (`?password=***`): `jobs.database_url`,
///   `jobs.schema_registry_url`, `telemetry.otlp_endpoint`, whatever else holds one;
/// - the `password` of `jobs.database_url` in PostgreSQL's `key=value` form;
/// - the value of every `jobs.kafka_options` entry named like a secret
///   (`sasl.*`, or containing `password`, `secret`, `token` or `key`);
/// - every `auth.tokens[].token`.
fn mask_secrets(config: &mut toml::Value) {
    mask_urls(config);
    if let Some(url) = config
        .get_mut("jobs")
        .and_then(|jobs| jobs.get_mut("database_url"))
        && let toml::Value::String(url) = url
        && !url.contains("://")
    {
        *url = mask_key_value_password(url);
    }
    if let Some(toml::Value::Table(options)) = config
        .get_mut("jobs")
        .and_then(|jobs| jobs.get_mut("kafka_options"))
    {
        for (name, value) in options.iter_mut() {
            if is_secret_name(name) {
                *value = toml::Value::from(MASK);
            }
        }
    }
    if let Some(toml::Value::Array(tokens)) = config
        .get_mut("auth")
        .and_then(|auth| auth.get_mut("tokens"))
    {
        for token in tokens {
            if let Some(secret) = token.get_mut("token") {
                *secret = toml::Value::from(MASK);
            }
        }
    }
}

/// Whether a name (a librdkafka option, a URL's query parameter) holds a secret.
fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.starts_with("sasl.")
        || ["password", "passwd", "secret", "token", "key"]
            .iter()
            .any(|word| name.contains(word))
}

fn mask_urls(value: &mut toml::Value) {
    match value {
        toml::Value::String(text) if text.contains("://") => *text = mask_url(text),
        toml::Value::Array(items) => items.iter_mut().for_each(mask_urls),
        toml::Value::Table(table) => table.iter_mut().for_each(|(_, value)| mask_urls(value)),
        _ => {}
    }
}

/// `scheme://user:password@host/path?password=x` with the passwords masked; the user
/// stays (it says who connects). A password holding `/`, `?` or `#` unencoded still
/// ends at an `@` for the drivers, so everything after `user:` up to the last `@` is
/// masked: masking too much is harmless here, too little is a leak.
fn mask_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    let (authority, tail) = match rest.rsplit_once('@') {
        Some((userinfo, after)) => {
            let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
            let (host, tail) = after.split_at(host_end);
            let authority = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:{MASK}@{host}"),
                None => format!("{userinfo}@{host}"),
            };
            (authority, tail)
        }
        None => {
            let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (host, tail) = rest.split_at(host_end);
            (host.to_owned(), tail)
        }
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((query, fragment)) => (query, format!("#{fragment}")),
                None => (query, String::new()),
            };
            let query = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if is_secret_name(name) => format!("{name}={MASK}"),
                    _ => pair.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            format!("{path}?{query}{fragment}")
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// PostgreSQL's `host=db user=app password='s e'` with every `...password=` value
/// masked (quoted values may hold spaces and `\'`).
fn mask_key_value_password(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.to_ascii_lowercase().find("password") {
        let after_name = at + "password".len();
        let value_start = rest[after_name..]
            .trim_start()
            .strip_prefix('=')
            .map(|value| rest.len() - value.trim_start().len());
        let Some(start) = value_start else {
            out.push_str(&rest[..after_name]);
            rest = &rest[after_name..];
            continue;
        };
        let value = &rest[start..];
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let closes = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            });
            close.map_or(value.len(), |(i, _)| i + 2)
        } else {
            // Unquoted, a backslash escapes the next character (a space among them).
            let mut escaped = false;
            value
                .char_indices()
                .find(|&(_, c)| {
                    let ends = c.is_whitespace() && !escaped;
                    escaped = c == '\\' && !escaped;
                    ends
                })
                .map_or(value.len(), |(i, _)| i)
        };
        out.push_str(&rest[..start]);
        out.push_str(MASK);
        rest = &rest[start + end..];
    }
    out.push_str(rest);
    out
}

const PREFIX: &str = "PROTOMOLT_";
const KAFKA_OPTION: &str = "KAFKA_OPTION_";
const FILE_SUFFIX: &str = "_FILE";
/// The environment provider's name in figment's metadata.
const ENV_SOURCE: &str = "`PROTOMOLT_` environment variable(s)";

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

    /// One line for each `PROTOMOLT_*` variable that sets no config key and is not
    /// one the project uses for something else ([`NOT_CONFIG_VARIABLES`]), naming the
    /// variable it probably meant: `PROTOMOLT_JOBS_WORKER_ID sets no config key and is
    /// ignored; did you mean PROTOMOLT_JOBS__WORKER_ID (jobs.worker_id)?`. (A
    /// variable in the config form naming an unknown key is an error when the config
    /// loads.)
    pub fn warnings(&self) -> Vec<String> {
        let mut names: Vec<&str> = self
            .vars
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| {
                let upper = name.trim().to_ascii_uppercase();
                upper.starts_with(PREFIX)
                    && !NOT_CONFIG_VARIABLES.contains(&upper.as_str())
                    && Self::parse_name(name).is_none()
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(unknown_variable).collect()
    }

    /// The variable that set `path` (or the table holding it): the `_FILE` form when
    /// both are set, as it wins.
    fn variable_for(&self, path: &[String]) -> Option<String> {
        self.vars
            .iter()
            .filter_map(|(name, _)| Some((Self::parse_name(name)?, name)))
            .filter(|(target, _)| path.starts_with(&target.path))
            .max_by_key(|(target, _)| (target.path.len(), target.from_file))
            .map(|(_, name)| name.clone())
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
        // `describe` knows an error about a value from here by this name, and names
        // the variable that set it.
        Metadata::named(ENV_SOURCE)
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

    /// Loads `toml` from a file (no environment); the error has the file's path
    /// replaced by `FILE`.
    fn load_file(toml: &str) -> Result<HostConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(&path, toml).unwrap();
        HostConfig::load_with(Some(&path), EnvOverrides::default())
            .map_err(|e| e.replace(&path.display().to_string(), "FILE"))
    }

    #[test]
    fn a_misspelled_key_names_the_closest_valid_key() {
        let err = load_file("[jobs]\nworkers_count = 3\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown key jobs.workers_count (in FILE); did you mean jobs.worker_count?"
        );
        // No figment profile prefix, no list of every key.
        assert!(!err.contains("default."), "{err}");

        let err = load_file("[jobs.retention]\ncompleted = 1\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown key jobs.retention.completed (in FILE); did you mean jobs.retention.completed_ms?"
        );
        let err = load_file("[[registry.tls]]\ntargts = \"*:443\"\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown key registry.tls[0].targts (in FILE); did you mean registry.tls[0].targets?"
        );
    }

    #[test]
    fn a_misspelled_section_names_the_closest_section() {
        let err = load_file("[nodes]\nbind = \"127.0.0.1:1\"\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown section [nodes] (in FILE); did you mean [node]?"
        );
        let err = load_file("[zzz]\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown section [zzz] (in FILE); the sections are node, auth, registry, parse, jobs, telemetry, workflow"
        );
    }

    #[test]
    fn an_unknown_key_with_no_close_name_lists_the_keys_of_its_section() {
        let err = load_file("[registry]\nzzz = 1\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown key registry.zzz (in FILE); the keys of [registry] are workflows_dir, run_timeout_ms, max_concurrent_runs, max_response_bytes, tls"
        );
    }

    #[test]
    fn an_unknown_key_from_the_environment_names_its_variable_and_the_one_meant() {
        let err = load(&[("PROTOMOLT_JOBS__WORKERS_COUNT", "2")]).unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown key jobs.workers_count (from PROTOMOLT_JOBS__WORKERS_COUNT); did you mean jobs.worker_count (PROTOMOLT_JOBS__WORKER_COUNT)?"
        );
        // A `_FILE` variable is named as set.
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("bind");
        std::fs::write(&secret, "127.0.0.1:9").unwrap();
        let err = load(&[("PROTOMOLT_NODE__BIDN_FILE", secret.to_str().unwrap())]).unwrap_err();
        assert_eq!(
            err,
            "invalid config: unknown key node.bidn (from PROTOMOLT_NODE__BIDN_FILE); did you mean node.bind (PROTOMOLT_NODE__BIND)?"
        );
    }

    #[test]
    fn a_toml_syntax_error_is_one_line_with_its_position() {
        let err = load_file("[node\nbind = 3\n").unwrap_err();
        assert_eq!(
            err,
            "invalid config: TOML parse error at line 1, column 6: invalid table header; expected `.`, `]` (in FILE)"
        );
    }

    #[test]
    fn a_wrong_type_names_the_key_and_the_file_without_a_profile_prefix() {
        let err = load_file("[node]\nbind = 3\n").unwrap_err();
        assert!(
            err.starts_with("invalid config: node.bind (in FILE): invalid type"),
            "{err}"
        );
    }

    #[test]
    fn a_variable_with_one_underscore_is_warned_about_naming_the_variable_meant() {
        let env = EnvOverrides::new([
            ("PROTOMOLT_JOBS_WORKER_COUNT", "3"),
            ("PROTOMOLT_JOBS_DATABASE_URL_FILE", "/run/secrets/db"),
            ("PROTOMOLT_JOBS_RETENTION_COMPLETEDMS", "1"),
            ("PROTOMOLT_WHATEVER", "1"),
        ]);
        assert_eq!(
            env.warnings(),
            [
                "PROTOMOLT_JOBS_DATABASE_URL_FILE sets no config key and is ignored; did you mean PROTOMOLT_JOBS__DATABASE_URL_FILE (jobs.database_url)?",
                "PROTOMOLT_JOBS_RETENTION_COMPLETEDMS sets no config key and is ignored; did you mean PROTOMOLT_JOBS__RETENTION__COMPLETED_MS (jobs.retention.completed_ms)?",
                "PROTOMOLT_JOBS_WORKER_COUNT sets no config key and is ignored; did you mean PROTOMOLT_JOBS__WORKER_COUNT (jobs.worker_count)?",
                "PROTOMOLT_WHATEVER sets no config key and is ignored: config variables are PROTOMOLT_<SECTION>__<KEY> (two underscores after the section) or PROTOMOLT_KAFKA_OPTION_<NAME>",
            ]
        );
        // A warning, not an error: the config still loads.
        assert!(load(&[("PROTOMOLT_JOBS_WORKER_COUNT", "3")]).is_ok());
    }

    #[test]
    fn config_variables_and_the_projects_own_variables_are_not_warned_about() {
        let env = EnvOverrides::new([
            ("PROTOMOLT_DEV", "/work/dev"),
            ("PROTOMOLT_TANSU_ROOT", "/opt/tansu"),
            ("PROTOMOLT_URL", "http://127.0.0.1:8080"),
            ("PROTOMOLT_TOKEN", "t"),
            ("PROTOMOLT_NODE__BIND", "127.0.0.1:1"),
            ("PROTOMOLT_JOBS__DATABASE_URL_FILE", "/run/secrets/db"),
            ("PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD", "s"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(env.warnings(), Vec::<String>::new());
    }

    /// Every `PROTOMOLT_*` name the repository's code and `./dev` use is either config
    /// or in [`NOT_CONFIG_VARIABLES`], so the node never warns about the project's own
    /// variables.
    #[test]
    fn every_protomolt_variable_the_repository_uses_is_config_or_allowed() {
        fn files(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if !name.starts_with('.') && name != "target" && name != "node_modules" {
                        files(&path, out);
                    }
                } else if name == "dev" || name.ends_with(".rs") || name.ends_with(".sh") {
                    out.push(path);
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut paths = Vec::new();
        files(root, &mut paths);
        assert!(paths.iter().any(|p| p.ends_with("dev")), "{paths:?}");
        let mut unknown = Vec::new();
        for path in paths {
            // These spell wrong variables on purpose, to test the warnings.
            if path.ends_with("host-example/src/config.rs")
                || path.ends_with("host-example/tests/binary.rs")
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for (at, _) in text.match_indices(PREFIX) {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.ends_with('_') || EnvOverrides::parse_name(&name).is_some() {
                    continue;
                }
                if !NOT_CONFIG_VARIABLES.contains(&name.as_str()) {
                    unknown.push(format!("{name} in {}", path.display()));
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "add these to NOT_CONFIG_VARIABLES (with why) or make them config: {unknown:?}"
        );
    }

    #[test]
    fn the_key_list_is_read_from_the_config_types() {
        let kind = |path: &str| {
            let path: Vec<String> = path.split('.').map(str::to_owned).collect();
            config_keys()
                .iter()
                .find(|key| key.path == path)
                .map(|key| key.kind)
        };
        assert_eq!(kind("node"), Some(KeyKind::Table));
        assert_eq!(kind("node.bind"), Some(KeyKind::Value));
        assert_eq!(kind("auth"), Some(KeyKind::Table));
        assert_eq!(kind("auth.tokens"), Some(KeyKind::Tables));
        assert_eq!(kind("registry.tls"), Some(KeyKind::Tables));
        assert_eq!(kind("jobs.worker_id"), Some(KeyKind::Value));
        // The old name is still a key.
        assert_eq!(kind("jobs.worker_count"), Some(KeyKind::Value));
        assert_eq!(kind("jobs.kafka_options"), Some(KeyKind::AnyKey));
        assert_eq!(kind("jobs.retention"), Some(KeyKind::Table));
        assert_eq!(kind("jobs.retention.completed_ms"), Some(KeyKind::Value));
        assert_eq!(kind("telemetry.otlp_endpoint"), Some(KeyKind::Value));
        assert_eq!(kind("jobs.nope"), None);
    }

    #[test]
    fn the_printed_config_is_toml_with_every_secret_masked() {
        let config = load_file(
            r#"
[node]
roles = ["registry", "jobs"]

[[auth.tokens]]
name = "ci"
token = "token-0123456789-abcdef"
scopes = ["*"]

[jobs]
database_url = "postgres://app:hunter2@db:5432/protomolt?sslmode=require&sslpassword=pem-pass"
worker_id = "node-a"
schema_registry_url = "https://registry:reg-pass@schemas:8081"

[jobs.kafka_options]
"sasl.password" = "kafka-pass"
"sasl.username" = "kafka-user"
"ssl.key.pem" = "PEM-KEY"
"sasl.oauthbearer.client.secret" = "oauth-secret"
"security.protocol" = "SASL_SSL"

[telemetry]
otlp_endpoint = "http://otel:otel-pass@collector:4317"
"#,
        )
        .unwrap();
        let printed = config.to_masked_toml().unwrap();
        for secret in [
            "hunter2",
            "pem-pass",
            "token-0123456789-abcdef",
            "reg-pass",
            "kafka-pass",
            "kafka-user",
            "PEM-KEY",
            "oauth-secret",
            "otel-pass",
        ] {
            assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
        }
        let value: toml::Value = printed.parse().unwrap();
        assert_eq!(
            value["jobs"]["database_url"].as_str(),
            Some("postgres://app:***@db:5432/protomolt?sslmode=require&sslpassword=***")
        );
        assert_eq!(value["auth"]["tokens"][0]["token"].as_str(), Some("***"));
        assert_eq!(value["auth"]["tokens"][0]["name"].as_str(), Some("ci"));
        assert_eq!(
            value["jobs"]["kafka_options"]["security.protocol"].as_str(),
            Some("SASL_SSL")
        );
        assert_eq!(
            value["telemetry"]["otlp_endpoint"].as_str(),
            Some("http://otel:***@collector:4317")
        );
        // Defaults are filled in, in the structs' order; not a Rust debug dump.
        assert_eq!(value["jobs"]["lease_ms"].as_integer(), Some(300_000));
        assert!(
            printed.contains("\n[node]\nbind = \"127.0.0.1:8080\"\n"),
            "{printed}"
        );
        assert!(!printed.contains("HostConfig"), "{printed}");
    }

    #[test]
    fn the_printed_config_loads_back_as_the_same_config() {
        let config = load_file(
            "[node]\nroles = [\"registry\", \"parse\"]\n[[registry.tls]]\ntargets = \"*:443\"\nca_file = \"/ca.pem\"\n[jobs.retention]\ncompleted_ms = 1000\n",
        )
        .unwrap();
        let printed = config.to_masked_toml().unwrap();
        let reloaded = load_file(&printed).unwrap();
        assert_eq!(reloaded.to_masked_toml().unwrap(), printed);
    }

    #[test]
    fn a_database_url_in_key_value_form_loses_only_its_password() {
        assert_eq!(
            mask_key_value_password("host=db user=app password=hunter2 dbname=p"),
            "host=db user=app password=*** dbname=p"
        );
        assert_eq!(
            mask_key_value_password(r"host=db password = 'a b\' c' sslpassword=x"),
            "host=db password = *** sslpassword=***"
        );
        assert_eq!(mask_key_value_password("host=db"), "host=db");
        assert_eq!(
            mask_url("postgres://postgres@db/p"),
            "postgres://postgres@db/p"
        );
        assert_eq!(mask_url("postgres://u:p@ss@db/p"), "postgres://u:***@db/p");
        // Unencoded `/`, `?`, `#` in a password: the drivers still end it at the `@`.
        for url in [
            "postgres://app:pa/ss#word@db.internal:5432/jobs",
            "postgres://app:s3cr?et@db/jobs",
        ] {
            let masked = mask_url(url);
            assert!(
                masked.starts_with("postgres://app:***@db")
                    && !masked.contains("ss#word")
                    && !masked.contains("s3cr"),
                "{masked}"
            );
        }
        assert_eq!(
            mask_key_value_password(r"host=db user=app password=my\ secret dbname=p"),
            "host=db user=app password=*** dbname=p"
        );
        let config = load(&[(
            "PROTOMOLT_JOBS__DATABASE_URL",
            "host=db user=app password=hunter2",
        )])
        .unwrap();
        let printed = config.to_masked_toml().unwrap();
        assert!(
            printed.contains("database_url = \"host=db user=app password=***\""),
            "{printed}"
        );
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
            err.contains("node.shutdown_grace_ms (from PROTOMOLT_NODE__SHUTDOWN_GRACE_MS)"),
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
