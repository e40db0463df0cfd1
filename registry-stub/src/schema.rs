//! JSON Schema of a protobuf message as proto3 JSON carries it.
//!
//! Two flavours. [`json_schema`], for the catalog, says what the route's parser
//! accepts, not only the canonical form: each field under its JSON name and, as an
//! alias, its proto name (`jobId` or `job_id`); integers as numbers or decimal
//! strings; floats also as `"NaN"`, `"Infinity"`, `"-Infinity"`; enums by name or
//! number; well-known types in their JSON forms. [`canonical_schema`], for the
//! OpenAPI document, says what a client should send and will read: JSON names only,
//! integers as numbers, enums by name, so a generated client has one name and one
//! type per field.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

/// Nesting beyond this is described as a plain object (recursive messages).
const MAX_DEPTH: usize = 8;

/// Which form a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    /// Everything the parser accepts (the catalog).
    Lenient,
    /// The canonical form a client sends and reads (the OpenAPI document).
    Canonical,
}

/// The JSON Schema (draft 2020-12 vocabulary) of `message`'s proto3 JSON form.
pub fn json_schema(message: &MessageDescriptor) -> Value {
    let mut schema = message_schema(message, 0, Flavour::Lenient);
    schema["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    schema["title"] = json!(message.full_name());
    schema
}

/// The JSON Schema of `message`'s canonical proto3 JSON form: JSON names only,
/// integers as numbers, enums by name. `closed`: unknown properties are refused (a
/// request); open for an answer, which may gain fields.
pub fn canonical_schema(message: &MessageDescriptor, closed: bool) -> Value {
    let mut schema = message_schema(message, 0, Flavour::Canonical);
    schema["title"] = json!(message.full_name());
    if !closed {
        open_answer(&mut schema);
    }
    schema
}

/// An answer's schema as answers are written: any object may gain fields, and a
/// scalar field may be `null` (a summary's `finishedAt` before the job finished).
fn open_answer(schema: &mut Value) {
    let Some(fields) = schema.as_object_mut() else {
        return;
    };
    if fields.get("additionalProperties") == Some(&Value::Bool(false)) {
        fields.remove("additionalProperties");
    }
    if let Some(Value::String(kind)) = fields.get("type")
        && matches!(kind.as_str(), "string" | "integer" | "number" | "boolean")
    {
        let kind = kind.clone();
        fields.insert("type".into(), json!([kind, "null"]));
    }
    if let Some(Value::Object(properties)) = fields.get_mut("properties") {
        for property in properties.values_mut() {
            open_answer(property);
        }
    }
    if let Some(items) = fields.get_mut("items") {
        open_answer(items);
    }
}

fn message_schema(message: &MessageDescriptor, depth: usize, flavour: Flavour) -> Value {
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
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
            return float_schema(flavour);
        }
        "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.Int32Value"
        | "google.protobuf.UInt32Value" => return integer_schema(flavour),
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
        let schema = field_schema(&field, depth, flavour);
        if flavour == Flavour::Lenient && field.name() != field.json_name() {
            let mut alias = schema.clone();
            alias["description"] = json!(format!(
                "the proto name of `{}`, accepted as an alias",
                field.json_name()
            ));
            properties.insert(field.name().to_owned(), alias);
        }
        properties.insert(field.json_name().to_owned(), schema);
    }
    let mut schema =
        json!({ "type": "object", "properties": properties, "additionalProperties": false });
    if flavour == Flavour::Canonical {
        // A generated client names the nested message's type after it.
        schema["title"] = json!(message.full_name());
    }
    schema
}

fn field_schema(field: &FieldDescriptor, depth: usize, flavour: Flavour) -> Value {
    if field.is_map() {
        let value = field
            .kind()
            .as_message()
            .map(|entry| entry.map_entry_value_field())
            .map_or_else(
                || json!({}),
                |value| kind_schema(&value.kind(), depth + 1, flavour),
            );
        return json!({ "type": "object", "additionalProperties": value });
    }
    let single = kind_schema(&field.kind(), depth + 1, flavour);
    if field.is_list() {
        json!({ "type": "array", "items": single })
    } else {
        single
    }
}

/// proto3 JSON integers: a number, or a decimal string (canonical: a number).
fn integer_schema(flavour: Flavour) -> Value {
    match flavour {
        Flavour::Lenient => json!({ "type": ["integer", "string"], "pattern": "^-?[0-9]+$" }),
        Flavour::Canonical => json!({ "type": "integer" }),
    }
}

/// proto3 JSON floats: a number, a decimal string, or a named special value
/// (canonical: a number).
fn float_schema(flavour: Flavour) -> Value {
    match flavour {
        Flavour::Lenient => json!({ "type": ["number", "string"] }),
        Flavour::Canonical => json!({ "type": "number" }),
    }
}

fn kind_schema(kind: &Kind, depth: usize, flavour: Flavour) -> Value {
    match kind {
        Kind::Double | Kind::Float => float_schema(flavour),
        Kind::Int32
        | Kind::Sint32
        | Kind::Sfixed32
        | Kind::Uint32
        | Kind::Fixed32
        | Kind::Int64
        | Kind::Sint64
        | Kind::Sfixed64
        | Kind::Uint64
        | Kind::Fixed64 => integer_schema(flavour),
        Kind::Bool => json!({ "type": "boolean" }),
        Kind::String => json!({ "type": "string" }),
        Kind::Bytes => json!({ "type": "string", "contentEncoding": "base64" }),
        Kind::Enum(e) => {
            let names = e.values().map(|v| json!(v.name()));
            if flavour == Flavour::Canonical {
                return json!({ "type": "string", "enum": names.collect::<Vec<_>>() });
            }
            let numbers = e.values().map(|v| json!(v.number()));
            json!({ "type": ["string", "integer"], "enum": names.chain(numbers).collect::<Vec<_>>() })
        }
        Kind::Message(m) => message_schema(m, depth, flavour),
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

    #[test]
    fn the_canonical_schema_has_one_name_and_one_type_per_field() {
        let pool = workflow::schema::compile_proto_pool(
            "canonical.proto",
            r#"syntax = "proto3";
               package canonical;
               enum Color { COLOR_UNSPECIFIED = 0; RED = 1; }
               message Request { string job_id = 1; int64 max_attempts = 2; Color color = 3; double score = 4; }"#,
        )
        .unwrap();
        let message = pool.get_message_by_name("canonical.Request").unwrap();
        let request = canonical_schema(&message, true);
        let properties = &request["properties"];
        assert!(properties.get("job_id").is_none(), "no proto-name alias");
        assert_eq!(properties["maxAttempts"], json!({ "type": "integer" }));
        assert_eq!(
            properties["color"],
            json!({ "type": "string", "enum": ["COLOR_UNSPECIFIED", "RED"] })
        );
        assert_eq!(properties["score"], json!({ "type": "number" }));
        assert_eq!(request["additionalProperties"], false);
        let answer = canonical_schema(&message, false);
        assert!(
            answer.get("additionalProperties").is_none(),
            "an answer may gain fields"
        );
        assert_eq!(
            answer["properties"]["jobId"]["type"],
            json!(["string", "null"])
        );
    }
}
