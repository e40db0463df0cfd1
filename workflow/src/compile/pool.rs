//! The envelope's schema: its descriptor set decoded (import cycles refused), and
//! the message types and methods it names resolved, with "did you mean" for a miss.

use base64::Engine as _;
use prost_reflect::{DescriptorPool, MessageDescriptor, MethodDescriptor};
use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};

pub(super) fn schema_pool(
    draft: &mut Draft<'_>,
    root: &Map<String, Value>,
) -> Option<DescriptorPool> {
    let Some(schema) = root.get("schema") else {
        draft.find(None, "$.schema", "'schema' is required: {\"descriptorSetBase64\": \"<FileDescriptorSet, imports included>\"}");
        return None;
    };
    let Some(schema) = schema.as_object() else {
        draft.find(
            None,
            "$.schema",
            format!("'schema' must be an object, not {}", json_kind(schema)),
        );
        return None;
    };
    draft.unknown_keys(schema, SCHEMA_KEYS, None, "$.schema");
    let encoded = draft.string(schema, "descriptorSetBase64", true, None, "$.schema")?;
    let bytes = match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
        Ok(bytes) => bytes,
        Err(e) => {
            draft.find(
                None,
                "$.schema.descriptorSetBase64",
                format!("not valid base64 (standard alphabet, padded): {e}"),
            );
            return None;
        }
    };
    match DescriptorPool::decode(bytes.as_slice()) {
        Ok(pool) => match import_cycle(&pool) {
            None => Some(pool),
            Some(cycle) => {
                draft.find(
                    None,
                    "$.schema.descriptorSetBase64",
                    format!("its files import each other in a cycle ({}), which protoc refuses: build the set from .proto files that compile", cycle.join(" → ")),
                );
                None
            }
        },
        Err(e) => {
            draft.find(
                None,
                "$.schema.descriptorSetBase64",
                format!("not a usable FileDescriptorSet: {e} (build it with every import included, e.g. protoc --include_imports)"),
            );
            None
        }
    }
}

/// The keys of `schema`.
pub(super) const SCHEMA_KEYS: &[&str] = &["descriptorSetBase64"];
/// A cycle of imports among the pool's files, as the chain of file names, found
/// without recursion (the set is user input).
fn import_cycle(pool: &DescriptorPool) -> Option<Vec<String>> {
    let imports: std::collections::HashMap<String, Vec<String>> = pool
        .files()
        .map(|file| {
            let names = file.dependencies().map(|d| d.name().to_owned()).collect();
            (file.name().to_owned(), names)
        })
        .collect();
    // 0: unseen, 1: on the current chain, 2: done.
    let mut state: std::collections::HashMap<&str, u8> = std::collections::HashMap::new();
    // In name order, so the cycle reported is the same every time.
    let mut starts: Vec<&String> = imports.keys().collect();
    starts.sort();
    for start in starts {
        if state.get(start.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut chain: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        state.insert(start.as_str(), 1);
        while let Some((file, next)) = chain.last().copied() {
            let deps = imports.get(file).map(Vec::as_slice).unwrap_or_default();
            match deps.get(next) {
                Some(dep) => {
                    if let Some(top) = chain.last_mut() {
                        top.1 += 1;
                    }
                    match state.get(dep.as_str()).copied().unwrap_or(0) {
                        1 => {
                            let from = chain.iter().position(|(f, _)| *f == dep).unwrap_or(0);
                            let mut cycle: Vec<String> =
                                chain[from..].iter().map(|(f, _)| (*f).to_owned()).collect();
                            cycle.push(dep.clone());
                            return Some(cycle);
                        }
                        0 if imports.contains_key(dep) => {
                            state.insert(dep.as_str(), 1);
                            chain.push((dep.as_str(), 0));
                        }
                        _ => {}
                    }
                }
                None => {
                    state.insert(file, 2);
                    chain.pop();
                }
            }
        }
    }
    None
}

pub(super) fn resolve_message(
    draft: &mut Draft<'_>,
    pool: &DescriptorPool,
    name: &str,
    step: Option<&str>,
    path: &str,
) -> Option<MessageDescriptor> {
    let name = name.trim_start_matches('.');
    let found = pool.get_message_by_name(name);
    if found.is_none() {
        let names: Vec<String> = pool
            .all_messages()
            .map(|m| m.full_name().to_owned())
            .collect();
        draft.find(
            step,
            path,
            format!(
                "unknown message type '{name}': it is not in the schema's descriptor set{}",
                suggest_full_name(name, &names)
            ),
        );
    }
    found
}

/// "; did you mean 'pkg.Name'?" for a type or service named without its package
/// (the one full name ending in `.name`) or misspelled, or nothing.
fn suggest_full_name(name: &str, full_names: &[String]) -> String {
    let suffix = format!(".{name}");
    let mut by_suffix = full_names.iter().filter(|full| full.ends_with(&suffix));
    let guess = match (by_suffix.next(), by_suffix.next()) {
        (Some(only), None) => Some(only.as_str()),
        _ => crate::suggest::did_you_mean(name, full_names.iter().map(String::as_str)),
    };
    match guess {
        Some(guess) => format!(
            "; did you mean '{guess}'? (types and services are named in full, with their package)"
        ),
        None => String::new(),
    }
}

pub(super) fn resolve_method(
    draft: &mut Draft<'_>,
    pool: &DescriptorPool,
    name: &str,
    step: &str,
    path: &str,
) -> Option<MethodDescriptor> {
    let Some((service_name, method_name)) = name.trim_start_matches('/').split_once('/') else {
        draft.find(
            Some(step),
            path,
            format!("method '{name}' must look like 'package.Service/Method'"),
        );
        return None;
    };
    let Some(service) = pool.get_service_by_name(service_name) else {
        let names: Vec<String> = pool.services().map(|s| s.full_name().to_owned()).collect();
        draft.find(
            Some(step),
            path,
            format!(
                "unknown service '{service_name}': it is not in the schema's descriptor set{}",
                suggest_full_name(service_name, &names)
            ),
        );
        return None;
    };
    let method = service.methods().find(|m| m.name() == method_name);
    if method.is_none() {
        let known: Vec<String> = service.methods().map(|m| m.name().to_owned()).collect();
        draft.find(
            Some(step),
            path,
            format!(
                "service '{service_name}' has no method '{method_name}' (its methods: {})",
                known.join(", ")
            ),
        );
    }
    if let Some(m) = &method
        && (m.is_client_streaming() || m.is_server_streaming())
    {
        draft.find(
            Some(step),
            path,
            format!("method '{name}' streams; only unary methods can be steps"),
        );
        return None;
    }
    method
}
