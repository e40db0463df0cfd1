//! JSON Schema of a protobuf message as proto3 JSON carries it, for the catalog.
//!
//! It says what the route's parser accepts, not only the canonical form: each field
//! under its JSON name and, as an alias, its proto name (`jobId` or `job_id`);
//! integers as numbers or decimal strings; floats also as `"NaN"`, `"Infinity"`,
//! `"-Infinity"`; enums by name or number; well-known types in their JSON forms.

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
        "google.protobuf.FieldMask" => return json!({ "type": "string" }),
        "google.protobuf.Empty" => return json!({ "type": "object", "maxProperties": 0 }),
        "google.protobuf.Any" => {
            return json!({ "type": "object", "properties": { "@type": { "type": "string" } }, "required": ["@type"] });
        }
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => return float_schema(),
        "google.protobuf.Int64Value" | "google.protobuf.UInt64Value" => return integer_schema(),
        "google.protobuf.Int32Value" | "google.protobuf.UInt32Value" => return integer_schema(),
        "google.protobuf.BoolValue" => return json!({ "type": "boolean" }),
        "google.protobuf.StringValue" => return json!({ "type": "string" }),
        "google.protobuf.BytesValue" => {
            return json!({ "type": "string", "contentEncoding": "base64" });
        }
        _ => {}
    }
    if depth >= MAX_DEPTH {
        return json!({ "type": "object" });
    }
    let mut properties = Map::new();
    for field in message.fields() {
        let schema = field_schema(&field, depth);
        if field.name() != field.json_name() {
            let mut alias = schema.clone();
            alias["description"] = json!(format!(
                "the proto name of `{}`, accepted as an alias",
                field.json_name()
            ));
            properties.insert(field.name().to_owned(), alias);
        }
        properties.insert(field.json_name().to_owned(), schema);
    }
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

/// proto3 JSON integers: a number, or a decimal string.
fn integer_schema() -> Value {
    json!({ "type": ["integer", "string"], "pattern": "^-?[0-9]+$" })
}

/// proto3 JSON floats: a number, a decimal string, or a named special value.
fn float_schema() -> Value {
    json!({ "type": ["number", "string"] })
}

fn kind_schema(kind: &Kind, depth: usize) -> Value {
    match kind {
        Kind::Double | Kind::Float => float_schema(),
        Kind::Int32
        | Kind::Sint32
        | Kind::Sfixed32
        | Kind::Uint32
        | Kind::Fixed32
        | Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64
        | Kind::Uint64
        | Kind::Fixed64 => integer_schema(),
        Kind::Bool => json!({ "type": "boolean" }),
        Kind::String => json!({ "type": "string" }),
        Kind::Bytes => json!({ "type": "string", "contentEncoding": "base64" }),
        Kind::Enum(e) => {
            let names = e.values().map(|v| json!(v.name()));
            let numbers = e.values().map(|v| json!(v.number()));
            json!({ "type": ["string", "integer"], "enum": names.chain(numbers).collect::<Vec<_>>() })
        }
        Kind::Message(m) => message_schema(m, depth),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_says_what_the_parser_accepts() {
        let pool = workflow::schema::compile_proto_pool(
            "spelling.proto",
            r#"syntax = "proto3";
               package spelling;
               enum Color { COLOR_UNSPECIFIED = 0; RED = 1; }
               message Request { string job_id = 1; int32 max_attempts = 2; Color color = 3; double score = 4; }"#,
        )
        .unwrap();
        let schema = json_schema(&pool.get_message_by_name("spelling.Request").unwrap());
        let properties = &schema["properties"];
        assert_eq!(properties["jobId"], json!({ "type": "string" }));
        assert_eq!(properties["job_id"]["type"], "string");
        assert!(
            properties["job_id"]["description"]
                .as_str()
                .unwrap()
                .contains("alias")
        );
        assert_eq!(
            properties["maxAttempts"],
            json!({ "type": ["integer", "string"], "pattern": "^-?[0-9]+$" })
        );
        assert_eq!(
            properties["color"]["enum"],
            json!(["COLOR_UNSPECIFIED", "RED", 0, 1])
        );
        assert_eq!(properties["score"]["type"], json!(["number", "string"]));
    }
}
