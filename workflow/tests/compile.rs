//! Compilation and static verification: every problem is a finding naming its step and
//! JSON path, and several problems give several findings.

use base64::Engine as _;
use serde_json::{Value, json};
use workflow::testkit::{
    findings, fixture_descriptor_set, step, three_step_workflow, two_step_workflow, workflow,
};
use workflow::{CompiledWorkflow, Finding};

const TARGET: &str = "127.0.0.1:1";

/// The findings of a new workflow, which a job's snapshot is not held to: it
/// compiles as a snapshot.
fn new_findings(envelope: &Value) -> Vec<Finding> {
    CompiledWorkflow::compile(envelope).unwrap_or_else(|f| panic!("compiles as a snapshot: {f}"));
    workflow::testkit::new_findings(envelope)
}

fn assert_finding(all: &[Finding], step: Option<&str>, path: &str, needle: &str) {
    workflow::testkit::assert_finding(all, step, path, &[needle]);
}

#[test]
fn the_fixture_workflows_compile() {
    let wf = CompiledWorkflow::compile(&two_step_workflow(TARGET)).expect("two steps compile");
    assert_eq!(wf.name, "embed-text");
    assert_eq!(wf.steps.len(), 2);
    assert_eq!(wf.output_type().full_name(), "jobs.test.Embedding");
    assert_eq!(
        wf.deadline,
        std::time::Duration::from_secs(30),
        "the default segment deadline"
    );
    let wf = CompiledWorkflow::compile(&three_step_workflow(TARGET)).expect("three steps compile");
    assert!(wf.has_external_step());
    assert!(
        wf.step("review")
            .is_some_and(|s| s.is_external() && s.validate)
    );
}

#[test]
fn an_unknown_scope_is_a_finding() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["rules"] = json!(["ids = typo.ids"]);
    let all = findings(&envelope);
    assert_finding(
        &all,
        Some("embed"),
        "$.steps[1].rules[0]",
        "unknown scope 'typo'",
    );
    assert_finding(
        &all,
        Some("embed"),
        "$.steps[1].rules[0]",
        "earlier step (tokenize)",
    );
}

#[test]
fn a_forward_reference_is_a_finding() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rules"] = json!(["text = input.text", "fail = embed.values"]);
    let all = findings(&envelope);
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].rules[1]",
        "forward reference to step 'embed'",
    );
}

#[test]
fn a_type_mismatch_is_a_finding() {
    let mut envelope = two_step_workflow(TARGET);
    // Text.text is a string; Tokens.ids is repeated int64.
    envelope["steps"][1]["rules"] = json!(["ids = input.text"]);
    let all = findings(&envelope);
    assert_finding(
        &all,
        Some("embed"),
        "$.steps[1].rules[0]",
        "cannot assign string to 'ids' (repeated int64)",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rules"] = json!(["text = 42"]);
    assert_finding(
        &findings(&envelope),
        Some("tokenize"),
        "$.steps[0].rules[0]",
        "cannot become string",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rules"] = json!(["colour = input.text"]);
    assert_finding(
        &findings(&envelope),
        Some("tokenize"),
        "$.steps[0].rules[0]",
        "jobs.test.Text has no field 'colour'",
    );
}

#[test]
fn conversions_follow_protobuf_widening() {
    // int64 ids appended one by one from an int32 score would be fine; string into
    // int is not, and '+=' needs a repeated target.
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["rules"] = json!(["ids += tokenize.ids", "ids += 7", "fail = true"]);
    CompiledWorkflow::compile(&envelope).expect("appending compatible values compiles");

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["rules"] = json!(["fail += tokenize.fail"]);
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].rules[0]",
        "'+=' needs a repeated target",
    );
}

#[test]
fn an_unknown_method_is_a_finding() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["method"] = json!("jobs.test.Embedder/Embedd");
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].method",
        "has no method 'Embedd' (its methods: Embed)",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["method"] = json!("jobs.test.Nope/Embed");
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].method",
        "unknown service 'jobs.test.Nope'",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["method"] = json!("Embed");
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].method",
        "package.Service/Method",
    );
}

#[test]
fn an_uncompilable_when_is_a_finding() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["when"] = json!("size(tokenize.ids >");
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].when",
        "not valid CEL",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["when"] = json!("size(tokenz.ids) > 0");
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].when",
        "unknown scope 'tokenz'",
    );
}

#[test]
fn several_problems_give_several_findings() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rules"] = json!(["text = typo.text", "fail = embed.values"]);
    envelope["steps"][1]["rules"] = json!(["ids = input.text"]);
    envelope["steps"][1]["when"] = json!("((");
    envelope["output"]["rules"] = json!(["vector = embed.nope"]);
    let all = findings(&envelope);
    assert_eq!(all.len(), 5, "{all:#?}");
    assert_finding(
        &all,
        None,
        "$.output.rules[0]",
        "jobs.test.Vector has no field 'nope'",
    );
}

#[test]
fn structural_problems_are_findings_with_paths() {
    let all = findings(&json!({ "steps": [] }));
    assert_finding(&all, None, "$.name", "'name' is required");
    assert_finding(&all, None, "$.schema", "'schema' is required");
    assert_finding(&all, None, "$.inputType", "'inputType' is required");
    assert_finding(&all, None, "$.steps", "at least one step");

    let all = findings(&json!("not an object"));
    assert_finding(&all, None, "$", "must be a JSON object");

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["name"] = json!("tokenize");
    assert_finding(
        &findings(&envelope),
        Some("tokenize"),
        "$.steps[1].name",
        "duplicate step name 'tokenize'",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rule"] = json!(["text = input.text"]);
    envelope["stpes"] = json!([]);
    let all = findings(&envelope);
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].rule",
        "unknown field 'rule'; did you mean 'rules'?",
    );
    assert_finding(
        &all,
        None,
        "$.stpes",
        "unknown field 'stpes'; did you mean 'steps'?",
    );
    // The issue's own example: a gate misspelled.
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["wen"] = json!("true");
    assert_finding(
        &findings(&envelope),
        Some("embed"),
        "$.steps[1].wen",
        "did you mean 'when'?",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]
        .as_object_mut()
        .unwrap()
        .remove("target");
    envelope["steps"][1]["deadlineMs"] = json!(-5);
    envelope["steps"][1]["validate"] = json!("yes");
    let all = findings(&envelope);
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].target",
        "'target' is required",
    );
    assert_finding(
        &all,
        Some("embed"),
        "$.steps[1].deadlineMs",
        "whole number of milliseconds",
    );
    assert_finding(&all, Some("embed"), "$.steps[1].validate", "true or false");

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["name"] = json!("input");
    envelope["steps"][1]["name"] = json!("embed-step");
    let all = findings(&envelope);
    assert_finding(&all, Some("input"), "$.steps[0].name", "reserved");
    assert_finding(
        &all,
        Some("embed-step"),
        "$.steps[1].name",
        "not an identifier",
    );
}

#[test]
fn schema_problems_are_findings() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["schema"]["descriptorSetBase64"] = json!("%%% not base64 %%%");
    assert_finding(
        &findings(&envelope),
        None,
        "$.schema.descriptorSetBase64",
        "not valid base64",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["schema"]["descriptorSetBase64"] =
        json!(base64::engine::general_purpose::STANDARD.encode([0xff, 0xff, 0xff]));
    assert_finding(
        &findings(&envelope),
        None,
        "$.schema.descriptorSetBase64",
        "not a usable FileDescriptorSet",
    );

    // The fixture set without its imports: jobs_test.proto imports buf/validate.
    let full = prost_reflect::DescriptorPool::decode(fixture_descriptor_set()).unwrap();
    let only_fixture = prost_types::FileDescriptorSet {
        file: full
            .file_descriptor_protos()
            .filter(|f| f.name() == "jobs_test.proto")
            .cloned()
            .collect(),
    };
    let mut envelope = two_step_workflow(TARGET);
    envelope["schema"]["descriptorSetBase64"] = json!(
        base64::engine::general_purpose::STANDARD
            .encode(prost::Message::encode_to_vec(&only_fixture))
    );
    assert_finding(
        &findings(&envelope),
        None,
        "$.schema.descriptorSetBase64",
        "every import included",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["inputType"] = json!("jobs.test.Txt");
    envelope["output"]["type"] = json!("jobs.test.Nothing");
    let all = findings(&envelope);
    assert_finding(
        &all,
        None,
        "$.inputType",
        "unknown message type 'jobs.test.Txt'",
    );
    assert_finding(
        &all,
        None,
        "$.output.type",
        "unknown message type 'jobs.test.Nothing'",
    );
}

#[test]
fn hostile_envelopes_are_bounded() {
    let steps: Vec<Value> = (0..201)
        .map(|i| {
            step(
                &format!("s{i}"),
                TARGET,
                "jobs.test.Tokenizer/Tokenize",
                &[],
            )
        })
        .collect();
    assert_finding(
        &findings(&workflow("big", steps, None)),
        None,
        "$.steps",
        "limit of 200",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["name"] = json!("n".repeat(201));
    assert_finding(
        &findings(&envelope),
        None,
        "$.name",
        "longer than 200 characters",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rules"] = json!(vec!["text = input.text"; 201]);
    assert_finding(
        &findings(&envelope),
        Some("tokenize"),
        "$.steps[0].rules",
        "limit of 200",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][0]["rules"] = json!([12, "=", "text = \"unterminated"]);
    let all = findings(&envelope);
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].rules[0]",
        "must be a string",
    );
    assert_finding(&all, Some("tokenize"), "$.steps[0].rules[1]", "");
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].rules[2]",
        "not a valid JSON string",
    );
}

#[test]
fn inputs_are_parsed_strictly() {
    let wf = CompiledWorkflow::compile(&two_step_workflow(TARGET)).unwrap();
    wf.parse_input(&json!({ "text": "hi" }))
        .expect("a valid input");
    let err = wf
        .parse_input(&json!({ "txt": "hi" }))
        .expect_err("unknown field");
    assert!(err.to_string().contains("txt"), "{err}");
    let err = wf
        .parse_input(&json!({ "text": 5 }))
        .expect_err("wrong type");
    assert!(err.to_string().contains("jobs.test.Text"), "{err}");
    assert!(wf.parse_input(&json!([1, 2])).is_err());
}

#[test]
fn compiled_workflows_can_be_shared_across_tasks() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledWorkflow>();
    assert_send_sync::<workflow::Runner>();
}

#[test]
fn declared_rules_check_supplied_responses() {
    let wf = CompiledWorkflow::compile(&three_step_workflow(TARGET)).unwrap();
    let review = wf.step("review").unwrap().output_type();
    let scored_without_notes =
        workflow::compile::decode_json(&review, &json!({ "score": 5 })).unwrap();
    let violations = wf.violations(&scored_without_notes).unwrap();
    assert_eq!(violations.len(), 1);
    assert_eq!(
        violations[0].rule_id, "review.notes_when_scored",
        "the message-level CEL rule"
    );
    assert_eq!(violations[0].field_path, "");

    let out_of_range =
        workflow::compile::decode_json(&review, &json!({ "notes": "x", "score": 11 })).unwrap();
    let violations = wf.violations(&out_of_range).unwrap();
    assert_eq!(violations[0].field_path, "score");
    // The verdict shows the value that broke the rule, and a message-level rule none.
    assert_eq!(violations[0].value.as_deref(), Some("11"));
    assert!(
        violations[0].to_string().ends_with("(got 11)"),
        "{}",
        violations[0]
    );
    let long = "n".repeat(5_000);
    let noted =
        workflow::compile::decode_json(&review, &json!({ "notes": long, "score": 99 })).unwrap();
    for violation in wf.violations(&noted).unwrap() {
        let shown = violation.value.unwrap_or_default();
        assert!(shown.len() <= workflow::failure::MAX_SHOWN_VALUE, "{shown}");
    }

    let fine =
        workflow::compile::decode_json(&review, &json!({ "notes": "x", "score": 10 })).unwrap();
    assert!(wf.violations(&fine).unwrap().is_empty());
}

#[test]
fn an_external_step_may_bound_its_wait_and_only_an_external_step() {
    let mut envelope = three_step_workflow(TARGET);
    envelope["steps"][1]["waitTimeoutMs"] = json!(86_400_000);
    envelope["steps"][1]["onTimeout"] = json!("dead");
    let wf = CompiledWorkflow::compile(&envelope).expect("compiles");
    assert_eq!(
        wf.steps[1].wait_timeout,
        Some(std::time::Duration::from_secs(86_400))
    );
    assert_eq!(wf.steps[1].on_timeout, workflow::OnTimeout::Dead);
    let plain = CompiledWorkflow::compile(&three_step_workflow(TARGET)).unwrap();
    assert_eq!(plain.steps[1].wait_timeout, None);
    assert_eq!(plain.steps[1].on_timeout, workflow::OnTimeout::Fail);

    let mut bad = three_step_workflow(TARGET);
    bad["steps"][0]["waitTimeoutMs"] = json!(1000);
    bad["steps"][0]["onTimeout"] = json!("fail");
    bad["steps"][1]["waitTimeoutMs"] = json!(0);
    bad["steps"][1]["onTimeout"] = json!("retry");
    let all = findings(&bad);
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].waitTimeoutMs",
        "applies to steps that wait",
    );
    assert_finding(
        &all,
        Some("tokenize"),
        "$.steps[0].onTimeout",
        "applies to steps that wait",
    );
    assert_finding(
        &all,
        Some("review"),
        "$.steps[1].waitTimeoutMs",
        "from 1 to 31622400000",
    );
    assert_finding(
        &all,
        Some("review"),
        "$.steps[1].onTimeout",
        "must be \"fail\" or \"dead\"",
    );
    for hostile in [json!(-5), json!(1.5), json!("1000"), json!(u64::MAX)] {
        let mut envelope = three_step_workflow(TARGET);
        envelope["steps"][1]["waitTimeoutMs"] = hostile.clone();
        assert_finding(
            &findings(&envelope),
            Some("review"),
            "$.steps[1].waitTimeoutMs",
            "whole number of milliseconds",
        );
    }
}

#[test]
fn a_when_reading_a_missing_field_or_not_a_boolean_is_a_finding() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["when"] = json!("size(tokenize.id) > 0");
    assert_finding(
        &new_findings(&envelope),
        Some("embed"),
        "$.steps[1].when",
        "jobs.test.Tokens has no field 'id'; did you mean 'ids'?",
    );

    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1]["when"] = json!("tokenize.ids");
    assert_finding(
        &new_findings(&envelope),
        Some("embed"),
        "$.steps[1].when",
        "`when` must be a boolean, but `tokenize.ids` is a list",
    );
}

#[test]
fn an_external_step_may_declare_only_its_types() {
    let mut envelope = two_step_workflow(TARGET);
    envelope["steps"][1] = json!({
        "name": "approve", "completion": "external",
        "requestType": "jobs.test.Tokens", "rules": ["ids = tokenize.ids"],
        "outputType": "jobs.test.Review",
    });
    envelope.as_object_mut().unwrap().remove("output");
    let compiled = CompiledWorkflow::compile(&envelope).unwrap_or_else(|f| panic!("{f}"));
    let approve = &compiled.steps[1];
    assert!(approve.method.is_none() && approve.target.is_none());
    assert_eq!(approve.output_type().full_name(), "jobs.test.Review");
    assert_eq!(
        approve.request_type.as_ref().map(|t| t.full_name()),
        Some("jobs.test.Tokens")
    );

    // Just the answer's type.
    envelope["steps"][1] =
        json!({ "name": "approve", "completion": "external", "outputType": "jobs.test.Review" });
    CompiledWorkflow::compile(&envelope).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn an_external_steps_types_are_checked() {
    let mut envelope = two_step_workflow(TARGET);
    envelope.as_object_mut().unwrap().remove("output");
    let cases = [
        (
            json!({ "name": "approve", "completion": "external" }),
            "$.steps[1].outputType",
            "an external step needs 'outputType'",
        ),
        (
            json!({ "name": "approve", "completion": "external", "outputType": "jobs.test.Review",
                    "method": "jobs.test.ReviewDesk/Review" }),
            "$.steps[1].method",
            "not both",
        ),
        (
            json!({ "name": "approve", "completion": "external", "outputType": "jobs.test.Review",
                    "rules": ["text = input.text"] }),
            "$.steps[1].rules",
            "declare its type as 'requestType'",
        ),
        (
            json!({ "name": "approve", "completion": "external", "outputType": "Review" }),
            "$.steps[1].outputType",
            "did you mean 'jobs.test.Review'?",
        ),
        (
            json!({ "name": "approve", "completion": "external", "outputType": "jobs.test.Review",
                    "requestType": "jobs.test.Tokens", "rules": ["idz = tokenize.ids"] }),
            "$.steps[1].rules[0]",
            "jobs.test.Tokens has no field 'idz'",
        ),
        (
            json!({ "name": "embed", "target": TARGET, "method": "jobs.test.Embedder/Embed",
                    "outputType": "jobs.test.Review" }),
            "$.steps[1].outputType",
            "only an external step declares 'outputType'",
        ),
    ];
    for (step, path, needle) in cases {
        envelope["steps"][1] = step.clone();
        let name = step["name"].as_str().unwrap();
        assert_finding(&findings(&envelope), Some(name), path, needle);
    }
}

#[test]
fn a_target_that_is_not_host_and_port_is_a_finding_naming_the_forms() {
    for (target, needle) in [
        (
            "http://127.0.0.1:50071",
            "has a scheme ('http://'): a target is host:port",
        ),
        ("127.0.0.1", "has no port"),
        ("127.0.0.1:0", "is not a number from 1 to 65535"),
        ("127.0.0.1:http", "is not a number from 1 to 65535"),
        ("127.0.0.1:+80", "is not a number from 1 to 65535"),
        ("host/path:1", "has a path"),
        ("bad host:1", "is not a hostname or an IP address"),
        ("[::1:50051", "is not a hostname or an IP address"),
        // An IPv4 address in another form is no name (the C resolver reads it as one).
        (
            "10.6488325:443",
            "is neither a name nor an IP address as written",
        ),
        (
            "0XA630005:443",
            "is neither a name nor an IP address as written",
        ),
        (
            "012.0.0.1:443",
            "is neither a name nor an IP address as written",
        ),
        // A zone is an interface name or number, nothing a URI could read otherwise.
        (
            "[fd00::1%25@10.0.0.1]:443",
            "is not a hostname or an IP address",
        ),
    ] {
        let mut envelope = two_step_workflow(TARGET);
        envelope["steps"][0]["target"] = json!(target);
        assert_finding(
            &new_findings(&envelope),
            Some("tokenize"),
            "$.steps[0].target",
            needle,
        );
    }
    for target in [
        "localhost:50051",
        "tokenizer.internal:443",
        "[::1]:50051",
        "10.0.0.5:1",
        "[fe80::1%25eth0]:50051",
        "svc-2.internal:443",
    ] {
        let mut envelope = two_step_workflow(TARGET);
        envelope["steps"][0]["target"] = json!(target);
        CompiledWorkflow::compile_new(&envelope).unwrap_or_else(|f| panic!("{target}: {f}"));
    }
}

#[test]
fn a_jobs_snapshot_is_not_held_to_the_checks_of_a_new_workflow() {
    // Accepted before the gate type-check and the target check existed: its workers
    // must still compile it, so the job runs.
    let mut envelope = two_step_workflow("svc_with:bad port");
    envelope["steps"][1]["when"] = json!("tokenize.ids");
    CompiledWorkflow::compile(&envelope).unwrap_or_else(|f| panic!("{f}"));
    let findings = new_findings(&envelope);
    assert_eq!(findings.len(), 3, "two targets and the gate: {findings:?}");
}

#[test]
fn a_new_workflow_name_with_an_invisible_formatting_character_is_a_finding() {
    for name in ["embed\u{202e}txt.exe", "embed\u{200b}text", "\u{feff}embed"] {
        let mut envelope = two_step_workflow(TARGET);
        envelope["name"] = json!(name);
        assert_finding(
            &new_findings(&envelope),
            None,
            "$.name",
            "invisible formatting character",
        );
    }
    let mut envelope = two_step_workflow(TARGET);
    envelope["name"] = json!("émbed-текст");
    assert!(
        CompiledWorkflow::compile_new(&envelope).is_ok(),
        "letters of any script are fine"
    );
}
