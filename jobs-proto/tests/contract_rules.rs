//! Every rule of both contract messages, proven to reject a bad value with its field
//! path, and valid messages proven to pass, through the validating codec too.

use jobs_proto::v1::workflow_run_event::Type;
use jobs_proto::v1::{WorkflowRunEvent, WorkflowRunRequest};
use jobs_proto::{ContractError, DESCRIPTOR_POOL, FILE_DESCRIPTOR_SET, WireMessage};
use prost::Message;

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn valid_event() -> WorkflowRunEvent {
    WorkflowRunEvent {
        event_id: uuid(),
        job_id: uuid(),
        workflow_name: "embed-text".into(),
        r#type: Type::StepCheckpoint as i32,
        step: "tokenize".into(),
        attempt: 1,
        verdict: String::new(),
        error: String::new(),
        detail: None,
        occurred_at: Some(prost_types::Timestamp {
            seconds: 1_790_000_000,
            nanos: 0,
        }),
    }
}

fn valid_request() -> WorkflowRunRequest {
    WorkflowRunRequest {
        job_id: uuid(),
        workflow_name: "embed-text".into(),
        input: None,
        ..Default::default()
    }
}

/// Asserts the message is refused and that one violation names `field` with `rule`.
fn assert_violation<M: WireMessage>(message: &M, field: &str, rule: &str) {
    let err = message
        .validate()
        .expect_err("the message should be refused");
    let violations = err.violations();
    assert!(
        violations
            .iter()
            .any(|v| v.field_path == field && v.rule_id == rule),
        "expected a violation of {rule} on '{field}', got: {err}"
    );
}

#[test]
fn valid_messages_pass() {
    valid_event().validate().expect("a valid event passes");
    valid_request().validate().expect("a valid request passes");
    for ty in [Type::Accepted, Type::StepCheckpoint, Type::Waiting] {
        let event = WorkflowRunEvent {
            r#type: ty as i32,
            ..valid_event()
        };
        event
            .validate()
            .expect("non-terminal events need neither verdict nor error");
    }
    let completed = WorkflowRunEvent {
        r#type: Type::Completed as i32,
        verdict: "2 steps, output jobs.test.Embedding".into(),
        ..valid_event()
    };
    completed
        .validate()
        .expect("a COMPLETED event with its verdict passes");
    for ty in [Type::Failed, Type::Dead] {
        let event = WorkflowRunEvent {
            r#type: ty as i32,
            error: "GRPC: UNAVAILABLE".into(),
            ..valid_event()
        };
        event
            .validate()
            .expect("a failure event with its error passes");
    }
}

#[test]
fn event_ids_are_required_uuids() {
    assert_violation(
        &WorkflowRunEvent {
            event_id: String::new(),
            ..valid_event()
        },
        "event_id",
        "required",
    );
    assert_violation(
        &WorkflowRunEvent {
            event_id: "not-a-uuid".into(),
            ..valid_event()
        },
        "event_id",
        "string.uuid",
    );
    assert_violation(
        &WorkflowRunEvent {
            job_id: String::new(),
            ..valid_event()
        },
        "job_id",
        "required",
    );
    assert_violation(
        &WorkflowRunEvent {
            job_id: "1234".into(),
            ..valid_event()
        },
        "job_id",
        "string.uuid",
    );
    assert_violation(
        &WorkflowRunEvent {
            job_id: "'; DROP TABLE workflow_run; --".into(),
            ..valid_event()
        },
        "job_id",
        "string.uuid",
    );
}

#[test]
fn event_names_and_texts_are_bounded() {
    let at_limit = WorkflowRunEvent {
        workflow_name: "n".repeat(200),
        step: "s".repeat(200),
        ..valid_event()
    };
    at_limit
        .validate()
        .expect("200 characters is the limit, not past it");
    // The limit counts characters, not bytes.
    WorkflowRunEvent {
        workflow_name: "é".repeat(200),
        ..valid_event()
    }
    .validate()
    .expect("200 two-byte characters pass");

    assert_violation(
        &WorkflowRunEvent {
            workflow_name: "n".repeat(201),
            ..valid_event()
        },
        "workflow_name",
        "string.max_len",
    );
    assert_violation(
        &WorkflowRunEvent {
            workflow_name: String::new(),
            ..valid_event()
        },
        "workflow_name",
        "required",
    );
    assert_violation(
        &WorkflowRunEvent {
            step: "s".repeat(201),
            ..valid_event()
        },
        "step",
        "string.max_len",
    );
    assert_violation(
        &WorkflowRunEvent {
            verdict: "v".repeat(501),
            ..valid_event()
        },
        "verdict",
        "string.max_len",
    );
    assert_violation(
        &WorkflowRunEvent {
            error: "e".repeat(4001),
            ..valid_event()
        },
        "error",
        "string.max_len",
    );
    let long_error = WorkflowRunEvent {
        r#type: Type::Failed as i32,
        error: "e".repeat(4000),
        ..valid_event()
    };
    long_error
        .validate()
        .expect("a 4000-character error is allowed");
}

#[test]
fn event_type_attempt_and_time_rules() {
    assert_violation(
        &WorkflowRunEvent {
            r#type: Type::Unspecified as i32,
            ..valid_event()
        },
        "type",
        "enum.not_in",
    );
    assert_violation(
        &WorkflowRunEvent {
            r#type: 42,
            ..valid_event()
        },
        "type",
        "enum.defined_only",
    );
    assert_violation(
        &WorkflowRunEvent {
            attempt: -1,
            ..valid_event()
        },
        "attempt",
        "int32.gte",
    );
    assert_violation(
        &WorkflowRunEvent {
            occurred_at: None,
            ..valid_event()
        },
        "occurred_at",
        "required",
    );
}

#[test]
fn terminal_events_carry_verdict_or_error() {
    assert_violation(
        &WorkflowRunEvent {
            r#type: Type::Completed as i32,
            verdict: String::new(),
            ..valid_event()
        },
        "",
        "workflow_run_event.completed_has_verdict",
    );
    for ty in [Type::Failed, Type::Dead] {
        assert_violation(
            &WorkflowRunEvent {
                r#type: ty as i32,
                error: String::new(),
                ..valid_event()
            },
            "",
            "workflow_run_event.failure_has_error",
        );
    }
}

#[test]
fn every_violation_is_reported_not_just_the_first() {
    let broken = WorkflowRunEvent {
        event_id: "x".into(),
        job_id: "y".into(),
        r#type: Type::Completed as i32,
        attempt: -3,
        occurred_at: None,
        ..valid_event()
    };
    let err = broken.validate().expect_err("refused");
    let mut fields: Vec<_> = err
        .violations()
        .iter()
        .map(|v| v.field_path.as_str())
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["", "attempt", "event_id", "job_id", "occurred_at"],
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("protomolt.jobs.v1.WorkflowRunEvent breaks its rules"),
        "{text}"
    );
    assert!(
        text.contains("event_id:"),
        "the message names the field: {text}"
    );
    assert!(
        text.contains("(message): a COMPLETED event must carry its verdict"),
        "message-level rules say what they mean: {text}"
    );
}

#[test]
fn request_rules() {
    assert_violation(
        &WorkflowRunRequest {
            job_id: String::new(),
            ..valid_request()
        },
        "job_id",
        "required",
    );
    assert_violation(
        &WorkflowRunRequest {
            job_id: "not-a-uuid".into(),
            ..valid_request()
        },
        "job_id",
        "string.uuid",
    );
    assert_violation(
        &WorkflowRunRequest {
            workflow_name: String::new(),
            ..valid_request()
        },
        "workflow_name",
        "required",
    );
    assert_violation(
        &WorkflowRunRequest {
            workflow_name: "w".repeat(201),
            ..valid_request()
        },
        "workflow_name",
        "string.max_len",
    );
    WorkflowRunRequest {
        workflow_name: "w".repeat(200),
        ..valid_request()
    }
    .validate()
    .expect("at the limit");
}

#[test]
fn encoding_refuses_an_invalid_event() {
    let invalid = WorkflowRunEvent {
        r#type: Type::Dead as i32,
        error: String::new(),
        ..valid_event()
    };
    let err = invalid
        .encode_validated()
        .expect_err("nothing malformed is encoded");
    assert!(matches!(err, ContractError::Invalid { .. }), "{err}");

    let valid = valid_event();
    let bytes = valid.encode_validated().expect("a valid event encodes");
    assert_eq!(
        WorkflowRunEvent::decode_validated(&bytes).expect("round trip"),
        valid
    );
}

#[test]
fn decoding_refuses_garbage_and_invalid_messages() {
    let err =
        WorkflowRunRequest::decode_validated(&[0xff, 0xff, 0xff, 0xff, 0x0f]).expect_err("garbage");
    assert!(matches!(err, ContractError::Undecodable { .. }), "{err}");

    // Decodable bytes of a message that breaks its rules are refused too.
    let bad = WorkflowRunRequest {
        job_id: "nope".into(),
        ..valid_request()
    }
    .encode_to_vec();
    let err = WorkflowRunRequest::decode_validated(&bad).expect_err("invalid");
    assert_eq!(err.violations()[0].field_path, "job_id");

    // Empty bytes decode to an all-default request, which has no job id.
    let err = WorkflowRunRequest::decode_validated(&[]).expect_err("empty");
    assert!(
        err.violations().iter().any(|v| v.field_path == "job_id"),
        "{err}"
    );
}

#[test]
fn contract_descriptors_decode() {
    assert!(!FILE_DESCRIPTOR_SET.is_empty());
    for name in [
        "protomolt.jobs.v1.WorkflowRunEvent",
        "protomolt.jobs.v1.WorkflowRunRequest",
        "protomolt.jobs.v1.SendEvent",
    ] {
        assert!(
            DESCRIPTOR_POOL.get_message_by_name(name).is_some(),
            "{name} is in the pool"
        );
    }
    let messages: Vec<_> = DESCRIPTOR_POOL
        .all_messages()
        // A map field's entry type (WorkflowRunRequest.metadata) is not a message of
        // its own.
        .filter(|m| m.package_name() == "protomolt.jobs.v1" && !m.is_map_entry())
        .map(|m| m.name().to_owned())
        .collect();
    assert_eq!(
        messages,
        ["WorkflowRunEvent", "WorkflowRunRequest", "SendEvent"],
        "exactly three messages"
    );
}

/// Resolves the registry copy of the contract and the well-known types, and nothing
/// else: what a schema registry can resolve without references.
struct RegistryResolver(String);

impl protox::file::FileResolver for RegistryResolver {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == "jobs.proto" {
            return protox::file::File::from_source(name, &self.0);
        }
        protox::file::GoogleFileResolver::new().open_file(name)
    }
}

#[test]
fn the_registry_schema_needs_no_reference_and_describes_the_same_wire_format() {
    let schema = jobs_proto::wire::registry_schema();
    assert!(!schema.contains("buf/validate"), "{schema}");
    assert!(!schema.contains("(buf.validate."), "{schema}");
    let mut compiler = protox::Compiler::with_file_resolver(RegistryResolver(schema.clone()));
    compiler
        .open_file("jobs.proto")
        .unwrap_or_else(|e| panic!("the registry copy compiles on its own: {e}\n{schema}"));
    let registered = compiler.descriptor_pool();
    for name in [
        "protomolt.jobs.v1.WorkflowRunEvent",
        "protomolt.jobs.v1.WorkflowRunRequest",
        "protomolt.jobs.v1.SendEvent",
    ] {
        let full = DESCRIPTOR_POOL.get_message_by_name(name).unwrap();
        let copy = registered.get_message_by_name(name).unwrap();
        let shape = |m: &prost_reflect::MessageDescriptor| {
            m.fields()
                .map(|f| {
                    (
                        f.number(),
                        f.name().to_owned(),
                        format!("{:?}", f.kind()),
                        f.cardinality(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            shape(&full),
            shape(&copy),
            "{name}: same fields, numbers and types"
        );
    }
    let kinds = |pool: &prost_reflect::DescriptorPool| {
        pool.get_enum_by_name("protomolt.jobs.v1.WorkflowRunEvent.Type")
            .unwrap()
            .values()
            .map(|v| (v.number(), v.name().to_owned()))
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&DESCRIPTOR_POOL), kinds(&registered));
}

/// The shipped `proto/` directory is all a client in another language needs: the
/// contract compiles from it alone, and its `buf/validate/validate.proto` declares the
/// same messages and fields as the schema the validator evaluates.
#[test]
fn the_shipped_protos_compile_on_their_own_and_match_the_validators_schema() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto");
    for (path, text) in jobs_proto::PROTO_FILES {
        let on_disk = std::fs::read_to_string(format!("{root}/{path}")).unwrap();
        assert_eq!(&on_disk, text, "{path}: PROTO_FILES is the shipped file");
    }
    let shipped = protox::compile(["protomolt/jobs/v1/jobs.proto"], [root])
        .expect("the contract compiles from proto/ alone");
    let shipped = prost_reflect::DescriptorPool::from_file_descriptor_set(shipped).unwrap();
    let validator = prost_protovalidate_types::DESCRIPTOR_POOL.clone();
    let fields = |pool: &prost_reflect::DescriptorPool| {
        let mut all: Vec<(String, Vec<(String, u32)>)> = pool
            .all_messages()
            .filter(|m| m.package_name() == "buf.validate")
            .map(|m| {
                let mut fields: Vec<(String, u32)> = m
                    .fields()
                    .map(|f| (f.name().to_owned(), f.number()))
                    .collect();
                fields.sort();
                (m.full_name().to_owned(), fields)
            })
            .collect();
        all.sort();
        all
    };
    let shipped_fields = fields(&shipped);
    assert!(shipped_fields.len() > 20, "{}", shipped_fields.len());
    assert_eq!(
        shipped_fields,
        fields(&validator),
        "proto/buf/validate/validate.proto is the validator's version"
    );
}

#[test]
fn signal_records_are_read_and_hostile_ones_refused_with_why() {
    use jobs_proto::v1::SendEvent;
    use jobs_proto::wire::read_signal_record;
    use prost::Message as _;
    let payload = prost_types::Struct {
        fields: [(
            "score".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::NumberValue(3.0)),
            },
        )]
        .into(),
    };
    let event = |key: &str, id: &str| {
        SendEvent {
            key: key.into(),
            payload: Some(payload.clone()),
            event_id: id.into(),
        }
        .encode_to_vec()
    };
    let read = read_signal_record(Some(b"k"), Some(&event("", "e1"))).unwrap();
    assert_eq!((read.key.as_str(), read.event_id.as_str()), ("k", "e1"));
    assert_eq!(read.payload["score"], 3.0);
    let refused =
        |key: Option<&[u8]>, value: Option<&[u8]>| read_signal_record(key, value).unwrap_err();
    assert!(refused(None, None).contains("no value"));
    assert!(refused(None, Some(br#"{"key": "k"}"#)).contains("JSON"));
    assert!(refused(None, Some(&[0xde, 0xad, 0xbe, 0xef])).starts_with("not a SendEvent"));
    assert!(refused(None, Some(&event("", "e"))).contains("no key"));
    assert!(refused(Some(b"b"), Some(&event("a", "e"))).contains("differ"));
    assert!(refused(None, Some(&event(&"k".repeat(1001), "e"))).contains("rules"));
    assert!(refused(None, Some(&event("k", &"e".repeat(201)))).contains("rules"));
    let no_payload = SendEvent {
        key: "k".into(),
        payload: None,
        event_id: String::new(),
    }
    .encode_to_vec();
    assert!(refused(None, Some(&no_payload)).contains("rules"));
    // A record key with NUL stands in for an empty key only if it is a usable key.
    assert!(refused(Some(b"a\0b"), Some(&event("", "e"))).contains("NUL"));
}
