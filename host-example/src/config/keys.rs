//! The config's keys: how a key is written (dotted, and as its environment
//! variable), and the table of every key, read from the serde types themselves.

use std::sync::OnceLock;

use figment::Figment;
use figment::error::Kind;
use figment::providers::Serialized;
use figment::value::{Dict, Value};

use crate::config::model::HostConfig;

/// What every config variable starts with.
pub(super) const PREFIX: &str = "PROTOMOLT_";
pub(super) const KAFKA_OPTION: &str = "KAFKA_OPTION_";
pub(super) const FILE_SUFFIX: &str = "_FILE";

/// `jobs.retention.completed_ms`, `registry.tls[0].ca_file`,
/// `jobs.kafka_options."sasl.password"`.
pub(super) fn dotted(path: &[String]) -> String {
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
pub(super) fn env_name(path: &[String]) -> String {
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
pub(super) enum KeyKind {
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
pub(super) struct ConfigKey {
    pub(super) path: Vec<String>,
    pub(super) kind: KeyKind,
}

/// A key no config type has: serde answers it with the valid names of its level.
const PROBE: &str = "\u{0}probe";

/// Every key of the config outside arrays of tables, read from the serde types
/// themselves so the list never drifts from the structs: a table holding only an
/// unknown key at a path makes serde name that level's keys
/// (`deny_unknown_fields`), or accept it (a table of any key), or refuse its type (a
/// value).
pub(super) fn config_keys() -> &'static [ConfigKey] {
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

/// What the key at `path` holds, with the names of its keys when it is a table (of
/// each element's keys, for an array of tables).
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
            // The names of each element's keys.
            Answer::Names(names) => (KeyKind::Tables, names),
            Answer::Taken | Answer::Refused => (KeyKind::Value, &[]),
        },
    }
}

/// Every key a config file may set, one line each, for `protomolt-node config-keys`:
/// the dotted key and the variable that overrides it. The keys of an array of
/// tables' entries (`auth.tokens[].name`) have no variable; `[jobs.kafka_options]`
/// takes any librdkafka option.
pub(super) fn key_listing() -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for key in config_keys() {
        match key.kind {
            KeyKind::Table => {}
            KeyKind::Value => lines.push((dotted(&key.path), env_name(&key.path))),
            KeyKind::AnyKey => {
                let mut path = key.path.clone();
                path.push("<option>".to_owned());
                lines.push((
                    format!("{}.\"<option>\"", dotted(&key.path)),
                    env_name(&path),
                ));
            }
            KeyKind::Tables => {
                let (_, names) = probe(&key.path);
                for name in names {
                    lines.push((
                        format!("{}[].{name}", dotted(&key.path)),
                        format!("(each [[{}]] entry)", dotted(&key.path)),
                    ));
                }
            }
        }
    }
    lines
}
