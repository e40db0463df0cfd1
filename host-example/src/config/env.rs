//! The environment as config: `PROTOMOLT_<SECTION>__<KEY>`, `PROTOMOLT_KAFKA_OPTION_<NAME>`
//! and their `_FILE` forms (see the module documentation of [`crate::config`]), and a
//! warning for a variable that sets nothing.

use std::path::PathBuf;

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};
use workflow::suggest::did_you_mean;

use crate::config::keys::{
    ConfigKey, FILE_SUFFIX, KAFKA_OPTION, PREFIX, config_keys, dotted, env_name,
};

/// `PROTOMOLT_*` variables the project itself uses that are not node config, so the
/// node never warns about them. `./dev` exports `PROTOMOLT_DEV` (its own path; the
/// broker-outage tests restart the broker through it) and reads
/// `PROTOMOLT_TANSU_ROOT` (where the pinned broker is installed) and
/// `PROTOMOLT_TANSU_STORAGE` (where the development broker stores); the `protomolt`
/// command line reads `PROTOMOLT_URL` and `PROTOMOLT_TOKEN`; `bench peer` reads
/// `PROTOMOLT_PEER_MODULES` (where `./dev` installed the peer's packages). Whatever starts reading
/// another such variable adds it here (a test checks the repository's uses).
pub const NOT_CONFIG_VARIABLES: &[&str] = &[
    "PROTOMOLT_DEV",
    "PROTOMOLT_TANSU_ROOT",
    "PROTOMOLT_TANSU_STORAGE",
    "PROTOMOLT_URL",
    "PROTOMOLT_TOKEN",
    "PROTOMOLT_PEER_MODULES",
    // Rewrites the clients' generated files from a live node (tests/tests/clients.rs).
    "PROTOMOLT_UPDATE_CLIENTS",
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

/// The environment provider's name in figment's metadata.
pub(super) const ENV_SOURCE: &str = "`PROTOMOLT_` environment variable(s)";

/// The environment as config (the forms are in the module documentation): a figment
/// provider over a given set of variables, so tests pass their own.
#[derive(Debug, Clone, Default)]
pub struct EnvOverrides {
    vars: Vec<(String, String)>,
}

/// Where one variable goes.
pub(super) struct Override {
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
    pub(super) fn variable_for(&self, path: &[String]) -> Option<String> {
        self.vars
            .iter()
            .filter_map(|(name, _)| Some((Self::parse_name(name)?, name)))
            .filter(|(target, _)| path.starts_with(&target.path))
            .max_by_key(|(target, _)| (target.path.len(), target.from_file))
            .map(|(_, name)| name.clone())
    }

    pub(super) fn parse_name(name: &str) -> Option<Override> {
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
