//! Rules run: a literal as the field's value (exactly, or refused), a source read
//! from the scope and converted, the target written into the message being built.

use std::borrow::Cow;
use std::collections::HashMap;

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value};

use crate::rules::syntax::{Rule, RuleOp, Source};
use crate::rules::values::{kind_name, literal_value};
use crate::scope::Scope;

/// Converts a runtime value into a field of `kind` (the pairs [`assignable`](crate::rules::assignable) allows),
/// with conversions that cannot lose: anything else is an error, never a cast.
pub(super) fn convert(value: Value, kind: &Kind) -> Result<Value, String> {
    use Kind::*;
    Ok(match (value, kind) {
        (Value::I32(v), Int32 | Sint32 | Sfixed32) => Value::I32(v),
        (Value::I32(v), Int64 | Sint64 | Sfixed64) => Value::I64(v.into()),
        (Value::I32(v), Double) => Value::F64(v.into()),
        (Value::U32(v), Uint32 | Fixed32) => Value::U32(v),
        (Value::U32(v), Uint64 | Fixed64) => Value::U64(v.into()),
        (Value::U32(v), Int64 | Sint64 | Sfixed64) => Value::I64(v.into()),
        (Value::U32(v), Double) => Value::F64(v.into()),
        (Value::I64(v), Int64 | Sint64 | Sfixed64) => Value::I64(v),
        (Value::U64(v), Uint64 | Fixed64) => Value::U64(v),
        (Value::F32(v), Float) => Value::F32(v),
        (Value::F32(v), Double) => Value::F64(v.into()),
        (Value::F64(v), Double) => Value::F64(v),
        (Value::Bool(v), Bool) => Value::Bool(v),
        (Value::String(v), String) => Value::String(v),
        (Value::Bytes(v), Bytes) => Value::Bytes(v),
        // Enum numbers are only assignable between the same enum type (verified).
        (Value::EnumNumber(v), Enum(_)) => Value::EnumNumber(v),
        // `Value::is_valid` accepts any message for any message field: check the type.
        (Value::Message(m), Message(target))
            if m.descriptor().full_name() == target.full_name() =>
        {
            Value::Message(m)
        }
        (value, kind) => {
            return Err(format!(
                "a {value:?} value cannot become {}",
                kind_name(kind)
            ));
        }
    })
}

/// Converts every entry of a map value into the map field `field` (keys of the same
/// kind, values through [`convert`]).
fn convert_map(entries: HashMap<MapKey, Value>, field: &FieldDescriptor) -> Result<Value, String> {
    let entry = match field.kind() {
        // The entry accessors below may panic on a message that is not a map entry.
        Kind::Message(entry) if field.is_map() && entry.is_map_entry() => entry,
        _ => return Err(format!("'{}' is not a map", field.name())),
    };
    let key_kind = entry.map_entry_key_field().kind();
    let value_kind = entry.map_entry_value_field().kind();
    entries
        .into_iter()
        .map(|(key, value)| {
            if !key.is_valid(&key_kind) {
                return Err(format!(
                    "a map key {key:?} cannot become {}",
                    kind_name(&key_kind)
                ));
            }
            Ok((key, convert(value, &value_kind)?))
        })
        .collect::<Result<_, _>>()
        .map(Value::Map)
}

/// Reads a source path with protobuf presence: `None` when the field is unset and
/// tracks presence (a singular message, a proto3 `optional` scalar, a oneof member, a
/// proto2 optional field), or when the path passes through an unset message. Fields
/// without presence (plain proto3 scalars, repeated, maps) always read their value.
///
/// Only the value read is cloned, never the root message.
fn read_source(scope: &Scope, root: &str, fields: &[String]) -> Result<Option<Value>, String> {
    let value = scope
        .get_value(root)
        .ok_or_else(|| format!("'{root}' is not in scope yet"))?;
    let Some((last, parents)) = fields.split_last() else {
        // A skipped step's response is absent as a whole (its fields still read as
        // their kinds say: plain scalars at defaults, presence fields absent).
        if scope.is_skipped(root) {
            return Ok(None);
        }
        return Ok(Some(value.clone()));
    };
    let message = value
        .as_message()
        .ok_or_else(|| format!("'{root}' is not a message: its fields cannot be read"))?;
    let field_of = |message: &DynamicMessage, name: &str| {
        message
            .descriptor()
            .get_field_by_name(name)
            .ok_or_else(|| format!("{} has no field '{name}'", message.descriptor().full_name()))
    };
    let mut current = message;
    for name in parents {
        let field = field_of(current, name)?;
        if !current.has_field(&field) {
            return Ok(None);
        }
        current = match current.get_field(&field) {
            // A set field is stored in the message, so the value is borrowed.
            Cow::Borrowed(Value::Message(inner)) => inner,
            _ => return Err(format!("'{name}' is not a message")),
        };
    }
    let field = field_of(current, last)?;
    if field.supports_presence() && !current.has_field(&field) {
        return Ok(None);
    }
    Ok(Some(current.get_field(&field).into_owned()))
}

/// The message holding the target field: walks `parents` down from `message`,
/// creating unset parents only when `create` is true (`None` when one is unset).
fn target_parent<'m>(
    message: &'m mut DynamicMessage,
    parents: &[String],
    create: bool,
) -> Result<Option<&'m mut DynamicMessage>, String> {
    let mut current = message;
    for name in parents {
        let field = current
            .descriptor()
            .get_field_by_name(name)
            .ok_or_else(|| format!("no field '{name}'"))?;
        if !create && !current.has_field(&field) {
            return Ok(None);
        }
        current = current
            .get_field_mut(&field)
            .as_message_mut()
            .ok_or_else(|| format!("'{name}' is not a message"))?;
    }
    Ok(Some(current))
}

/// Applies one (verified) rule to `message`, reading sources from `scope`.
///
/// Presence is honoured: a rule whose source is absent (unset and tracking presence,
/// or behind an unset message) leaves the target untouched, so an unset wrapper,
/// timestamp, sub-message, `optional` scalar or oneof member stays unset rather than
/// becoming its default, and a rule per oneof member keeps the member the source set.
/// A rule that writes nothing (an absent source, an empty `+=`, a clear, an empty
/// list or map) never creates the target's parent messages.
pub fn apply_rule(rule: &Rule, message: &mut DynamicMessage, scope: &Scope) -> Result<(), String> {
    let (name, parents) = rule
        .target
        .split_last()
        .ok_or("a rule needs a target field")?;
    let target_field = |parent: &DynamicMessage| {
        parent
            .descriptor()
            .get_field_by_name(name)
            .ok_or_else(|| format!("no field '{name}'"))
    };
    match &rule.op {
        RuleOp::Clear => {
            if let Some(parent) = target_parent(message, parents, false)? {
                let field = target_field(parent)?;
                parent.clear_field(&field);
            }
        }
        RuleOp::Assign(Source::Literal(literal)) => {
            let parent = created_parent(message, parents)?;
            let field = target_field(parent)?;
            let value = literal_value(literal, &field.kind())?;
            parent
                .try_set_field(&field, value)
                .map_err(|e| e.to_string())?;
        }
        RuleOp::Assign(Source::Path { root, fields }) => {
            let Some(value) = read_source(scope, root, fields)? else {
                return Ok(());
            };
            let empty = match &value {
                Value::List(items) => items.is_empty(),
                Value::Map(entries) => entries.is_empty(),
                _ => false,
            };
            // An empty list or map replaces what earlier rules wrote, but does not
            // create a parent just to hold nothing.
            let Some(parent) = target_parent(message, parents, !empty)? else {
                return Ok(());
            };
            let field = target_field(parent)?;
            let kind = field.kind();
            let value = match value {
                Value::List(items) => Value::List(
                    items
                        .into_iter()
                        .map(|v| convert(v, &kind))
                        .collect::<Result<_, _>>()?,
                ),
                Value::Map(entries) => convert_map(entries, &field)?,
                single => convert(single, &kind)?,
            };
            parent
                .try_set_field(&field, value)
                .map_err(|e| e.to_string())?;
        }
        RuleOp::Append(Source::Literal(literal)) => {
            let parent = created_parent(message, parents)?;
            let field = target_field(parent)?;
            let value = literal_value(literal, &field.kind())?;
            append(parent, &field, vec![value])?;
        }
        RuleOp::Append(Source::Path { root, fields }) => {
            let additions = match read_source(scope, root, fields)? {
                None => return Ok(()),
                Some(Value::List(items)) => items,
                Some(single) => vec![single],
            };
            if additions.is_empty() {
                return Ok(());
            }
            let parent = created_parent(message, parents)?;
            let field = target_field(parent)?;
            let kind = field.kind();
            let additions = additions
                .into_iter()
                .map(|v| convert(v, &kind))
                .collect::<Result<_, _>>()?;
            append(parent, &field, additions)?;
        }
    }
    Ok(())
}

/// [`target_parent`] creating every unset parent, for a rule that writes a value.
fn created_parent<'m>(
    message: &'m mut DynamicMessage,
    parents: &[String],
) -> Result<&'m mut DynamicMessage, String> {
    target_parent(message, parents, true)?
        .ok_or_else(|| "the target's parent could not be created".to_owned())
}

fn append(
    parent: &mut DynamicMessage,
    field: &FieldDescriptor,
    additions: Vec<Value>,
) -> Result<(), String> {
    parent
        .get_field_mut(field)
        .as_list_mut()
        .ok_or_else(|| format!("'{}' is not repeated", field.name()))?
        .extend(additions);
    Ok(())
}
