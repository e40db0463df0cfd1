//! A protobuf message described for a human form: the console's review and submit
//! forms are generated from it.
//!
//! Where [`crate::schema`] says what the parser accepts, this says what a person
//! fills in: each field with its label, its kind (well-known types such as
//! `Timestamp` as kinds of their own), its enum values, its nested fields, the comment
//! the proto file carries for it (when the descriptor set kept source info), and the
//! `buf.validate` rules it declares, each with the message protovalidate gives when it
//! is broken and a short summary to show beside the field.
//!
//! A rule is marked `checkedBy: "page"` when the console checks it as the reviewer
//! types (lengths, bounds, lists, enum membership, UUIDs, required), `"node"` when the
//! page leaves it to the node (CEL, patterns, emails, URIs, float bounds, time-relative
//! rules, rules on the items of a list or map): the console asks the node with
//! `complete-step`'s `dryRun` before it sends an answer, so no rule is left unchecked.
//!
//! The description is bounded, whatever the descriptors (a descriptor set is the
//! submitter's data): nesting deeper than [`MAX_DEPTH`] is described as free JSON;
//! comments, enum values and rule values are cut to a size; and past [`MAX_FIELDS`]
//! fields, or about [`MAX_FORM_BYTES`] of description, the rest are left out
//! (`truncated: true`). A message type used in many places costs each time, so the
//! budget, not the shape, bounds the answer.

mod rules;

use std::collections::HashMap;

use prost_reflect::{FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};
use rules::{MAX_RULES, cut, field_rules, message_rules};
use serde_json::{Map, Value, json};

/// Nesting beyond this is a free-JSON field (recursive messages end here).
pub const MAX_DEPTH: usize = 6;
/// Fields described in all, across every level; the rest are left out.
pub const MAX_FIELDS: usize = 1_000;
/// About this much description in all (comments, enum values, rules); the fields
/// past it are left out.
pub const MAX_FORM_BYTES: usize = 1 << 20;
/// A comment is cut to this many characters.
const MAX_COMMENT_CHARS: usize = 1_000;
/// An enum lists at most this many values (the form offers those).
const MAX_ENUM_VALUES: usize = 1_000;

/// The form of `message`: `{messageType, messageRules, fields}`.
pub fn describe_message(message: &MessageDescriptor) -> Value {
    let mut describer = Describer::default();
    let fields = describer.fields(message, 0);
    json!({
        "messageType": message.full_name(),
        "messageRules": message_rules(message),
        "fields": fields,
        "truncated": describer.truncated,
    })
}

/// Walks a message, counting the fields it has described and caching each file's
/// comments.
#[derive(Default)]
struct Describer {
    described: usize,
    /// About how many bytes of description so far.
    spent: usize,
    /// True once a message had more fields than [`MAX_FIELDS`] left room for.
    truncated: bool,
    comments: HashMap<String, HashMap<Vec<i32>, String>>,
}

impl Describer {
    fn fields(&mut self, message: &MessageDescriptor, depth: usize) -> Vec<Value> {
        let mut described = Vec::new();
        for field in message.fields() {
            if self.described >= MAX_FIELDS || self.spent >= MAX_FORM_BYTES {
                self.truncated = true;
                break;
            }
            described.push(self.field(&field, depth));
        }
        described
    }

    fn field(&mut self, field: &FieldDescriptor, depth: usize) -> Value {
        self.described += 1;
        let mut out = Map::new();
        out.insert("name".into(), json!(field.name()));
        out.insert("jsonName".into(), json!(field.json_name()));
        out.insert("label".into(), json!(label(field.name())));
        out.insert(
            "description".into(),
            json!(self.comment(&field.parent_file(), field.path())),
        );
        out.insert("repeated".into(), json!(field.is_list()));
        out.insert("map".into(), json!(field.is_map()));
        let mut optional = field.supports_presence() && field.kind().as_message().is_none();
        if let Some(oneof) = field.containing_oneof().filter(|o| !o.is_synthetic()) {
            out.insert("oneof".into(), json!(oneof.name()));
        }
        if field.is_map() {
            // A map field's kind is its synthetic entry message: key and value.
            if let Some(entry) = field.kind().as_message() {
                let key = self.field(&entry.map_entry_key_field(), depth + 1);
                let value = self.field(&entry.map_entry_value_field(), depth + 1);
                out.insert("kind".into(), json!("map"));
                out.insert("key".into(), key);
                out.insert("value".into(), value);
            }
        } else {
            let kind = field.kind();
            if let Some(wrapped) = kind.as_message().and_then(wrapper_kind) {
                out.insert("kind".into(), json!(wrapped));
                optional = true;
            } else {
                self.kind(&kind, depth, &mut out);
            }
        }
        out.insert("optional".into(), json!(optional));
        let mut declared = field_rules(field);
        declared.rules.truncate(MAX_RULES);
        // protovalidate checks a field without presence (a plain proto3 scalar, a
        // list, a map) at its zero value when it is left empty, unless told to ignore
        // it; a field with presence left unset is skipped.
        let applies_when_empty = !declared.ignore_empty && !field.supports_presence();
        out.insert("required".into(), json!(declared.required));
        out.insert("rulesApplyWhenEmpty".into(), json!(applies_when_empty));
        // What this field adds (its children counted as they are described).
        self.spent += 200
            + out["description"].as_str().map_or(0, str::len)
            + out
                .get("enumValues")
                .and_then(Value::as_array)
                .map_or(0, |values| values.len() * 48)
            + declared
                .rules
                .iter()
                .map(|rule| rule.to_string().len())
                .sum::<usize>();
        out.insert("rules".into(), Value::Array(declared.rules));
        Value::Object(out)
    }

    fn kind(&mut self, kind: &Kind, depth: usize, out: &mut Map<String, Value>) {
        let name = match kind {
            Kind::Double => "double",
            Kind::Float => "float",
            Kind::Int32 => "int32",
            Kind::Int64 => "int64",
            Kind::Uint32 => "uint32",
            Kind::Uint64 => "uint64",
            Kind::Sint32 => "sint32",
            Kind::Sint64 => "sint64",
            Kind::Fixed32 => "fixed32",
            Kind::Fixed64 => "fixed64",
            Kind::Sfixed32 => "sfixed32",
            Kind::Sfixed64 => "sfixed64",
            Kind::Bool => "bool",
            Kind::String => "string",
            Kind::Bytes => "bytes",
            Kind::Enum(e) => {
                if e.values().len() > MAX_ENUM_VALUES {
                    self.truncated = true;
                }
                let values: Vec<Value> = e
                    .values()
                    .take(MAX_ENUM_VALUES)
                    .map(|v| json!({ "name": v.name(), "number": v.number() }))
                    .collect();
                out.insert("enumValues".into(), Value::Array(values));
                out.insert("messageType".into(), json!(e.full_name()));
                "enum"
            }
            Kind::Message(m) => {
                out.insert("messageType".into(), json!(m.full_name()));
                match m.full_name() {
                    "google.protobuf.Timestamp" => "timestamp",
                    "google.protobuf.Duration" => "duration",
                    name if name.starts_with("google.protobuf.") => "json",
                    _ if depth + 1 >= MAX_DEPTH => "json",
                    _ => {
                        let fields = self.fields(m, depth + 1);
                        out.insert("fields".into(), Value::Array(fields));
                        "message"
                    }
                }
            }
        };
        out.insert("kind".into(), json!(name));
    }

    /// The comment the proto file carries for the element at `path`: the leading
    /// comment, else the trailing one; empty without source info.
    fn comment(&mut self, file: &FileDescriptor, path: &[i32]) -> String {
        let comments = self
            .comments
            .entry(file.name().to_owned())
            .or_insert_with(|| {
                file.file_descriptor_proto()
                    .source_code_info
                    .iter()
                    .flat_map(|info| &info.location)
                    .filter_map(|location| {
                        let text = location
                            .leading_comments
                            .as_deref()
                            .filter(|c| !c.trim().is_empty())
                            .or(location.trailing_comments.as_deref())?;
                        Some((
                            location.path.clone(),
                            cut(&tidy_comment(text), MAX_COMMENT_CHARS),
                        ))
                    })
                    .collect()
            });
        comments.get(path).cloned().unwrap_or_default()
    }
}

/// A comment's lines, each trimmed, joined with single spaces (paragraphs kept).
fn tidy_comment(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `reviewer_email` → `Reviewer email`.
fn label(name: &str) -> String {
    let spaced = name.replace('_', " ");
    let mut chars = spaced.trim().chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The scalar kind a wrapper type (`google.protobuf.Int32Value`) carries.
fn wrapper_kind(message: &MessageDescriptor) -> Option<&'static str> {
    Some(match message.full_name() {
        "google.protobuf.DoubleValue" => "double",
        "google.protobuf.FloatValue" => "float",
        "google.protobuf.Int64Value" => "int64",
        "google.protobuf.UInt64Value" => "uint64",
        "google.protobuf.Int32Value" => "int32",
        "google.protobuf.UInt32Value" => "uint32",
        "google.protobuf.BoolValue" => "bool",
        "google.protobuf.StringValue" => "string",
        "google.protobuf.BytesValue" => "bytes",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::rules::snake_case;
    use super::*;

    const PROTO: &str = r#"syntax = "proto3";
package forms;
import "buf/validate/validate.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Verdict { VERDICT_UNSPECIFIED = 0; APPROVE = 1; DENY = 2; }

message Detail { string comment = 1; }

// A reviewer's answer.
message Answer {
  option (buf.validate.message).cel = {
    id: "answer.reason_when_denied"
    message: "a denial needs a reason"
    expression: "this.verdict != 2 || this.reason != ''"
  };
  // Who answered.
  string reviewer_email = 1 [(buf.validate.field).string.email = true, (buf.validate.field).required = true];
  int32 score = 2 [(buf.validate.field).int32 = {gte: 0, lte: 10}];
  int64 big = 3 [(buf.validate.field).int64.lt = 9000000000];
  Verdict verdict = 4 [(buf.validate.field).enum.defined_only = true];
  repeated string tags = 5 [(buf.validate.field).repeated = {max_items: 3, items: {string: {min_len: 1}}}];
  Detail detail = 6;
  google.protobuf.Timestamp decided_at = 7 [(buf.validate.field).timestamp.lt_now = true];
  google.protobuf.Int32Value maybe = 8;
  map<string, int32> counts = 9;
  string reason = 10 [(buf.validate.field).string = {min_len: 3, max_len: 200, pattern: "^[a-z ]+$"}];
  optional bool urgent = 11;
  string nickname = 13 [(buf.validate.field).string.min_len = 2, (buf.validate.field).ignore = IGNORE_IF_ZERO_VALUE];
  int32 outside = 12 [(buf.validate.field).int32 = {gt: 10, lt: 0}];
}
"#;

    fn answer_form(with_comments: bool) -> Value {
        let bytes = if with_comments {
            workflow::schema::compile_proto_source_documented("forms.proto", PROTO)
        } else {
            workflow::schema::compile_proto_source("forms.proto", PROTO)
        }
        .unwrap();
        let pool = prost_reflect::DescriptorPool::decode(bytes.as_slice()).unwrap();
        describe_message(&pool.get_message_by_name("forms.Answer").unwrap())
    }

    fn field<'a>(form: &'a Value, name: &str) -> &'a Value {
        form["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()
    }

    fn rule_of<'a>(field: &'a Value, id: &str) -> &'a Value {
        field["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no rule {id} in {field}"))
    }

    #[test]
    fn every_kind_is_named_with_its_rules_and_comments() {
        let form = answer_form(true);
        assert_eq!(form["messageType"], "forms.Answer");
        assert_eq!(
            form["messageRules"],
            json!([{ "id": "answer.reason_when_denied", "message": "a denial needs a reason" }])
        );
        let email = field(&form, "reviewer_email");
        assert_eq!(email["jsonName"], "reviewerEmail");
        assert_eq!(email["label"], "Reviewer email");
        assert_eq!(email["description"], "Who answered.");
        assert_eq!(email["required"], true);
        assert_eq!(rule_of(email, "string.email")["checkedBy"], "node");

        let score = field(&form, "score");
        assert_eq!(score["kind"], "int32");
        assert_eq!(
            rule_of(score, "int32.lte")["message"],
            "value must be less than or equal to 10"
        );
        assert_eq!(rule_of(score, "int32.gte")["summary"], "≥ 0");
        assert_eq!(
            rule_of(field(&form, "big"), "int64.lt")["value"],
            "9000000000"
        );

        let verdict = field(&form, "verdict");
        assert_eq!(verdict["kind"], "enum");
        assert_eq!(
            verdict["enumValues"][1],
            json!({ "name": "APPROVE", "number": 1 })
        );

        let tags = field(&form, "tags");
        assert_eq!(tags["repeated"], true);
        assert_eq!(tags["kind"], "string");
        assert_eq!(rule_of(tags, "repeated.max_items")["checkedBy"], "page");
        assert_eq!(rule_of(tags, "repeated.items")["checkedBy"], "node");

        let detail = field(&form, "detail");
        assert_eq!(detail["kind"], "message");
        assert_eq!(detail["fields"][0]["name"], "comment");

        let decided = field(&form, "decided_at");
        assert_eq!(decided["kind"], "timestamp");
        assert_eq!(rule_of(decided, "timestamp.lt_now")["checkedBy"], "node");

        let maybe = field(&form, "maybe");
        assert_eq!(
            (maybe["kind"].as_str(), maybe["optional"].as_bool()),
            (Some("int32"), Some(true))
        );
        let counts = field(&form, "counts");
        assert_eq!(counts["kind"], "map");
        assert_eq!(counts["value"]["kind"], "int32");
        assert_eq!(field(&form, "urgent")["optional"], true);
        assert_eq!(field(&form, "score")["optional"], false);

        let reason = field(&form, "reason");
        assert_eq!(
            rule_of(reason, "string.min_len")["message"],
            "value length must be at least 3 characters"
        );
        assert_eq!(rule_of(reason, "string.pattern")["value"], "^[a-z ]+$");
        // Left empty, a plain scalar is checked at its zero value, unless ignored; a
        // field with presence is skipped.
        assert_eq!(reason["rulesApplyWhenEmpty"], true);
        assert_eq!(field(&form, "nickname")["rulesApplyWhenEmpty"], false);
        assert_eq!(field(&form, "urgent")["rulesApplyWhenEmpty"], false);
        assert_eq!(field(&form, "detail")["rulesApplyWhenEmpty"], false);
        assert_eq!(tags["rulesApplyWhenEmpty"], true);
        // An exclusive range is left to the node.
        assert_eq!(
            rule_of(field(&form, "outside"), "int32.gt")["checkedBy"],
            "node"
        );
    }

    #[test]
    fn a_hostile_schema_is_described_within_a_budget() {
        let comment = "x".repeat(50_000);
        let values: String = (1..3_000).map(|i| format!(" V{i} = {i};")).collect();
        let fields: String = (1..=200).map(|i| format!(" Big f{i} = {i};")).collect();
        let source = format!(
            "syntax = \"proto3\"; package h;\n\
             enum Many {{ MANY_UNSPECIFIED = 0;{values} }}\n\
             message Big {{\n// {comment}\nstring a = 1;\n// {comment}\nMany b = 2; Many c = 3; Many d = 4; }}\n\
             message Top {{{fields} }}"
        );
        let bytes = workflow::schema::compile_proto_source_documented("h.proto", &source).unwrap();
        let pool = prost_reflect::DescriptorPool::decode(bytes.as_slice()).unwrap();
        let form = describe_message(&pool.get_message_by_name("h.Top").unwrap());
        assert_eq!(form["truncated"], true);
        let size = form.to_string().len();
        assert!(size < 3 * MAX_FORM_BYTES, "{size} bytes");
        let first = &form["fields"][0]["fields"][0];
        assert_eq!(
            first["description"].as_str().unwrap().chars().count(),
            MAX_COMMENT_CHARS
        );
        let many = &form["fields"][0]["fields"][1];
        assert_eq!(
            many["enumValues"].as_array().unwrap().len(),
            MAX_ENUM_VALUES
        );
    }

    #[test]
    fn without_source_info_descriptions_are_empty() {
        let form = answer_form(false);
        assert_eq!(field(&form, "reviewer_email")["description"], "");
    }

    #[test]
    fn recursion_ends_as_free_json() {
        let bytes = workflow::schema::compile_proto_source(
            "tree.proto",
            "syntax = \"proto3\"; package tree; message Node { string name = 1; repeated Node children = 2; }",
        )
        .unwrap();
        let pool = prost_reflect::DescriptorPool::decode(bytes.as_slice()).unwrap();
        let form = describe_message(&pool.get_message_by_name("tree.Node").unwrap());
        let mut level = &form["fields"][1];
        let mut depth = 1;
        while level["kind"] == "message" {
            level = &level["fields"][1];
            depth += 1;
        }
        assert_eq!(level["kind"], "json");
        assert_eq!(depth, MAX_DEPTH);
    }

    #[test]
    fn labels_read_as_words() {
        assert_eq!(label("reviewer_email"), "Reviewer email");
        assert_eq!(label("x"), "X");
        assert_eq!(snake_case("minLen"), "min_len");
        assert_eq!(
            tidy_comment(" Who\n answered.\n\n Second.\n"),
            "Who answered.\nSecond."
        );
    }
}
