//! Rules checked before they run: what a source path reads (its [`Shape`]) and
//! whether it fits the target, widening only where protobuf does without loss.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::rules::syntax::{Rule, RuleOp, Source};
use crate::rules::values::{kind_name, literal_value};

/// The static type of a value: a field's kind and whether it is repeated or a map.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Element kind (for a map: the map entry message).
    pub kind: Kind,
    /// One value, a list, or a map.
    pub cardinality: Cardinality,
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cardinality {
    /// One value.
    Single,
    /// A repeated field.
    Repeated,
    /// A map field.
    Map,
}

impl Shape {
    fn of(field: &FieldDescriptor) -> Shape {
        let cardinality = if field.is_map() {
            Cardinality::Map
        } else if field.is_list() {
            Cardinality::Repeated
        } else {
            Cardinality::Single
        };
        Shape {
            kind: field.kind(),
            cardinality,
        }
    }

    /// `string`, `repeated int64`, `map (...)`: as findings name a type.
    pub fn describe(&self) -> String {
        let kind = kind_name(&self.kind);
        match self.cardinality {
            Cardinality::Single => kind,
            Cardinality::Repeated => format!("repeated {kind}"),
            Cardinality::Map => format!("map ({kind})"),
        }
    }
}

/// Walks `fields` down from `message`: every field but the last must be a singular
/// message. Returns the last field, or `None` for an empty path.
pub fn resolve_fields(
    message: &MessageDescriptor,
    fields: &[String],
) -> Result<Option<FieldDescriptor>, String> {
    let mut current = message.clone();
    let mut last = None;
    for (i, name) in fields.iter().enumerate() {
        let Some(field) = current.get_field_by_name(name) else {
            let known: Vec<String> = current.fields().map(|f| f.name().to_owned()).collect();
            return Err(format!(
                "{} has no field '{name}' (its fields: {})",
                current.full_name(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        if i + 1 < fields.len() {
            match (field.kind(), field.is_list() || field.is_map()) {
                (Kind::Message(inner), false) => current = inner,
                _ => {
                    return Err(format!(
                        "'{name}' is {} and cannot be walked into",
                        Shape::of(&field).describe()
                    ));
                }
            }
        }
        last = Some(field);
    }
    Ok(last)
}

/// The static shape of a source path rooted at a message of type `root`.
pub fn source_shape(root: &MessageDescriptor, fields: &[String]) -> Result<Shape, String> {
    Ok(match resolve_fields(root, fields)? {
        Some(field) => Shape::of(&field),
        None => Shape {
            kind: Kind::Message(root.clone()),
            cardinality: Cardinality::Single,
        },
    })
}

/// Checks a rule against the message it builds (`target_type`); `source_type` gives the
/// static shape of a path source (already resolved by the caller).
pub fn check_rule(
    rule: &Rule,
    target_type: &MessageDescriptor,
    source: Option<&Shape>,
) -> Result<(), String> {
    let field = resolve_fields(target_type, &rule.target)?
        .ok_or_else(|| "a rule needs a target field".to_owned())?;
    let target = Shape::of(&field);
    match &rule.op {
        RuleOp::Clear => Ok(()),
        RuleOp::Assign(Source::Literal(literal)) | RuleOp::Append(Source::Literal(literal)) => {
            if matches!(rule.op, RuleOp::Append(_)) && target.cardinality != Cardinality::Repeated {
                return Err(format!(
                    "'+=' needs a repeated target; '{}' is {}",
                    field.name(),
                    target.describe()
                ));
            }
            if matches!(rule.op, RuleOp::Assign(_)) && target.cardinality != Cardinality::Single {
                return Err(format!(
                    "a literal cannot be assigned to '{}' ({}); use '+=' to append it",
                    field.name(),
                    target.describe()
                ));
            }
            literal_value(literal, &target.kind)
                .map(|_| ())
                .map_err(|e| {
                    format!(
                        "cannot write it into '{}' ({}): {e}",
                        field.name(),
                        target.describe()
                    )
                })
        }
        RuleOp::Assign(Source::Path { .. }) => {
            let source = source.ok_or("the source has no known type")?;
            if source.cardinality != target.cardinality {
                return Err(format!(
                    "cannot assign {} to '{}' ({}){}",
                    source.describe(),
                    field.name(),
                    target.describe(),
                    if target.cardinality == Cardinality::Repeated {
                        "; use '+=' to append one value"
                    } else {
                        ""
                    }
                ));
            }
            let compatible = if target.cardinality == Cardinality::Map {
                same_map_types(&source.kind, &target.kind)
            } else {
                assignable(&source.kind, &target.kind)
            };
            compatible.then_some(()).ok_or_else(|| {
                format!(
                    "cannot assign {} to '{}' ({})",
                    source.describe(),
                    field.name(),
                    target.describe()
                )
            })
        }
        RuleOp::Append(Source::Path { .. }) => {
            let source = source.ok_or("the source has no known type")?;
            if target.cardinality != Cardinality::Repeated {
                return Err(format!(
                    "'+=' needs a repeated target; '{}' is {}",
                    field.name(),
                    target.describe()
                ));
            }
            if source.cardinality == Cardinality::Map || !assignable(&source.kind, &target.kind) {
                return Err(format!(
                    "cannot append {} to '{}' ({})",
                    source.describe(),
                    field.name(),
                    target.describe()
                ));
            }
            Ok(())
        }
    }
}

/// True when two map fields (given by their entry types) have the same key type and
/// the same value type. Each map field has its own entry message, so two maps of
/// different messages never share an entry type even when their keys and values match.
fn same_map_types(source: &Kind, target: &Kind) -> bool {
    let (Kind::Message(source), Kind::Message(target)) = (source, target) else {
        return false;
    };
    // The entry accessors below may panic on a message that is not a map entry.
    if !source.is_map_entry() || !target.is_map_entry() {
        return false;
    }
    let same = |a: &FieldDescriptor, b: &FieldDescriptor| match (a.kind(), b.kind()) {
        (Kind::Message(a), Kind::Message(b)) => a.full_name() == b.full_name(),
        (Kind::Enum(a), Kind::Enum(b)) => a.full_name() == b.full_name(),
        (a, b) => a == b,
    };
    same(&source.map_entry_key_field(), &target.map_entry_key_field())
        && same(
            &source.map_entry_value_field(),
            &target.map_entry_value_field(),
        )
}

/// True when protobuf widens `from` into `to` without loss.
pub fn assignable(from: &Kind, to: &Kind) -> bool {
    use Kind::*;
    let signed32 = |k: &Kind| matches!(k, Int32 | Sint32 | Sfixed32);
    let signed64 = |k: &Kind| matches!(k, Int64 | Sint64 | Sfixed64);
    let unsigned32 = |k: &Kind| matches!(k, Uint32 | Fixed32);
    let unsigned64 = |k: &Kind| matches!(k, Uint64 | Fixed64);
    match (from, to) {
        (Message(a), Message(b)) => a.full_name() == b.full_name(),
        (Enum(a), Enum(b)) => a.full_name() == b.full_name(),
        (a, b) if signed32(a) => signed32(b) || signed64(b) || matches!(b, Double),
        (a, b) if unsigned32(a) => {
            unsigned32(b) || unsigned64(b) || signed64(b) || matches!(b, Double)
        }
        (a, b) if signed64(a) => signed64(b),
        (a, b) if unsigned64(a) => unsigned64(b),
        (Float, Float | Double)
        | (Double, Double)
        | (Bool, Bool)
        | (String, String)
        | (Bytes, Bytes) => true,
        _ => false,
    }
}
