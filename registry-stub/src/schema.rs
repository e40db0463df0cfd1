//! JSON Schema of a protobuf message as proto3 JSON carries it, for the catalog.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

/// Nesting beyond this is described as a plain object (recursive messages).
const MAX_DEPTH: usize = 8;

/// The JSON Schema (draft 2020-12 vocabulary) of `message`'s proto3 JSON form.
pub fn json_schema(message: &MessageDescriptor) -> Value {
    let mut schema = message_schema(message, 0);
    schema["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    schema["title"] = json!(message.full_name());
    schema
}

fn message_schema(message: &MessageDescriptor, depth: usize) -> Value {
    match message.full_name() {
        "google.protobuf.Struct" => return json!({ "type": "object" }),
        "google.protobuf.Value" => return json!({}),
        "google.protobuf.ListValue" => return json!({ "type": "array" }),
        "google.protobuf.Timestamp" => return json!({ "type": "string", "format": "date-time" }),
        "google.protobuf.Duration" => {
            return json!({ "type": "string", "pattern": "^-?[0-9]+(\\.[0-9]+)?s$" });
        }
        _ => {}
    }
    if depth >= MAX_DEPTH {
        return json!({ "type": "object" });
    }
    let properties: Map<String, Value> = message
        .fields()
        .map(|field| (field.json_name().to_owned(), field_schema(&field, depth)))
        .collect();
    json!({ "type": "object", "properties": properties, "additionalProperties": false })
}

fn field_schema(field: &FieldDescriptor, depth: usize) -> Value {
    if field.is_map() {
        let value = field
            .kind()
            .as_message()
            .map(|entry| entry.map_entry_value_field())
            .map_or_else(|| json!({}), |value| kind_schema(&value.kind(), depth + 1));
        return json!({ "type": "object", "additionalProperties": value });
    }
    let single = kind_schema(&field.kind(), depth + 1);
    if field.is_list() {
        json!({ "type": "array", "items": single })
    } else {
        single
    }
}

fn kind_schema(kind: &Kind, depth: usize) -> Value {
    match kind {
        Kind::Double | Kind::Float => json!({ "type": "number" }),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 | Kind::Uint32 | Kind::Fixed32 => {
            json!({ "type": "integer" })
        }
        // proto3 JSON accepts 64-bit integers as numbers or decimal strings.
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64 => {
            json!({ "type": ["integer", "string"] })
        }
        Kind::Bool => json!({ "type": "boolean" }),
        Kind::String => json!({ "type": "string" }),
        Kind::Bytes => json!({ "type": "string", "contentEncoding": "base64" }),
        Kind::Enum(e) => {
            json!({ "type": "string", "enum": e.values().map(|v| v.name().to_owned()).collect::<Vec<_>>() })
        }
        Kind::Message(m) => message_schema(m, depth),
    }
}
