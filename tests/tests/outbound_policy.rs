//! The outbound call policy (`[workflow.outbound]`): a workflow naming a target the
//! policy forbids is refused when it is accepted, with a finding naming the step and
//! the rule; a job accepted before fails loud instead of calling; a name that resolves
//! into a forbidden range is refused at connect time. The listeners here count every
//! connection, so "nothing was called" is observed, not assumed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::outbound::{OutboundPolicy, OutboundRules};
use workflow::testkit::two_step_workflow;

const WAIT: Duration = Duration::from_secs(30);

fn policy(rules: OutboundRules) -> OutboundPolicy {
    rules.compile().expect("valid rules")
}

fn allowing(allow: &[&str]) -> OutboundPolicy {
    policy(OutboundRules {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        ..OutboundRules::default()
    })
}

/// A listener on 127.0.0.1 that accepts (and drops) connections, counting them.
async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (address.to_string(), accepted)
}

fn finding_messages(answer: &Value) -> Vec<(String, String, String)> {
    answer["details"]
        .as_array()
        .map(|details| {
            details
                .iter()
                .map(|d| {
                    (
                        d["step"].as_str().unwrap_or_default().to_owned(),
                        d["path"].as_str().unwrap_or_default().to_owned(),
                        d["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_workflow_naming_a_forbidden_target_is_refused_by_every_verb_that_accepts_one() {
    let db = TestDatabase::create().await;
    let (target, accepted) = counting_listener().await;
    let node = JobsNode::start_with(
        test_config(&db.url, "strict", 1),
        None,
        policy(OutboundRules {
            allow: vec!["*.svc.cluster.local:50051".into()],
            max_step_deadline_ms: Some(1_000),
            ..OutboundRules::default()
        }),
    )
    .await;
    let forbidden = two_step_workflow(&target);
    for (verb, body) in [
        (
            "submit-workflow",
            json!({ "workflow": forbidden, "input": { "text": "hi" } }),
        ),
        (
            "run-workflow",
            json!({ "workflow": forbidden, "input": { "text": "hi" } }),
        ),
        ("put-workflow", json!({ "workflow": forbidden })),
    ] {
        let (status, answer) = node.call(verb, body).await;
        assert_eq!(status, 400, "{verb}: {answer}");
        let findings = finding_messages(&answer);
        assert!(
            findings
                .iter()
                .any(|(step, path, message)| step == "tokenize"
                    && path == "$.steps[0].target"
                    && message.contains(&format!(
                        "the target '{target}' is not allowed by workflow.outbound.allow"
                    ))
                    && message.contains("*.svc.cluster.local:50051")),
            "{verb}: {findings:#?}"
        );
        assert!(
            findings.iter().any(|(step, _, _)| step == "embed"),
            "every step is named: {findings:#?}"
        );
    }
    let (_, answer) = node
        .call(
            "submit-workflows",
            json!({ "workflow": forbidden, "submissions": [{ "input": { "text": "a" } }] }),
        )
        .await;
    assert!(
        answer.to_string().contains("workflow.outbound.allow"),
        "{answer}"
    );

    // An allowed name without TLS, and a deadline above the ceiling.
    let mut clear = two_step_workflow("tokenizer.svc.cluster.local:50051");
    clear["steps"][1]["deadlineMs"] = json!(5_000);
    clear["steps"][1]["tls"] = json!(true);
    let (status, answer) = node
        .call(
            "submit-workflow",
            json!({ "workflow": clear, "input": { "text": "hi" } }),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let findings = finding_messages(&answer);
    assert!(
        findings
            .iter()
            .any(|(step, path, message)| step == "tokenize"
                && path == "$.steps[0].tls"
                && message.contains("workflow.outbound.require_tls")),
        "{findings:#?}"
    );
    assert!(
        findings.iter().any(|(step, path, message)| step == "embed"
            && path == "$.steps[1].deadlineMs"
            && message
                .contains("5000 ms is above the 1000 ms workflow.outbound.max_step_deadline_ms")),
        "{findings:#?}"
    );

    let listed = node.ok("list-jobs", json!({})).await;
    assert_eq!(
        listed["jobs"].as_array().map(Vec::len),
        Some(0),
        "nothing was written: {listed}"
    );
    let stored = node.ok("list-workflows", json!({})).await;
    assert_eq!(stored["workflows"], json!([]), "nothing was stored");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing was called");
    node.stop().await;
}

#[tokio::test]
async fn a_job_accepted_before_the_policy_forbade_its_target_fails_loud_without_connecting() {
    let db = TestDatabase::create().await;
    let (target, accepted) = counting_listener().await;
    // Accepted by a node with no policy (as before an upgrade), run by one whose policy
    // allows another port only.
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let job_id = idle
        .submit(&two_step_workflow(&target), json!({ "text": "hi" }))
        .await;
    idle.stop().await;
    let strict = JobsNode::start_with(
        test_config(&db.url, "strict", 1),
        None,
        allowing(&["127.0.0.1:1"]),
    )
    .await;
    let job = strict.wait_for_status(&job_id, "FAILED", WAIT).await;
    let error = job["error"].as_str().unwrap();
    assert!(
        error.starts_with("WORKFLOW: step 'tokenize'")
            && error.contains("the outbound policy forbids this call"),
        "{error}"
    );
    assert!(error.contains(&format!("'{target}'")), "{error}");
    assert_eq!(job["attempt"], 1, "a policy refusal is not retried");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "no connection was attempted"
    );
    strict.stop().await;
}

#[tokio::test]
async fn a_name_that_resolves_into_a_forbidden_range_is_refused_at_connect_time() {
    let db = TestDatabase::create().await;
    let (target, accepted) = counting_listener().await;
    let port = target.rsplit_once(':').unwrap().1;
    // The name is allowed; its answers (127.0.0.1, ::1) are loopback, which a name may
    // not resolve into unless an address entry lists it.
    let node = JobsNode::start_with(
        test_config(&db.url, "dns", 1),
        None,
        allowing(&[&format!("localhost:{port}")]),
    )
    .await;
    let named = two_step_workflow(&format!("localhost:{port}"));
    let job_id = node.submit(&named, json!({ "text": "hi" })).await;
    let job = node.wait_for_status(&job_id, "FAILED", WAIT).await;
    let error = job["error"].as_str().unwrap();
    assert!(
        error.starts_with("WORKFLOW: step 'tokenize'")
            && error.contains(&format!("the outbound policy refuses 'localhost:{port}'"))
            && error.contains("127.0.0.1"),
        "{error}"
    );
    assert_eq!(job["attempt"], 1, "a policy refusal is not retried");

    // The synchronous run refuses the same way.
    let answer = node
        .ok(
            "run-workflow",
            json!({ "workflow": named, "input": { "text": "hi" } }),
        )
        .await;
    assert_eq!(answer["ok"], false, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("deny_addresses"),
        "{answer}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "no connection was made");
    node.stop().await;

    // Listed by address, the same name connects (the fixture listener answers nothing
    // gRPC, so the call fails, but only after connecting).
    let node = JobsNode::start_with(
        test_config(&db.url, "dns-listed", 1),
        None,
        allowing(&[
            &format!("localhost:{port}"),
            &format!("127.0.0.0/8:{port}"),
            &format!("[::1]:{port}"),
        ]),
    )
    .await;
    let answer = node
        .ok(
            "run-workflow",
            json!({ "workflow": named, "input": { "text": "hi" } }),
        )
        .await;
    assert_eq!(answer["ok"], false, "{answer}");
    protomolt_e2e::jobs::eventually("the listener to see the connection", WAIT, || async {
        accepted.load(Ordering::SeqCst) > 0
    })
    .await;
    node.stop().await;
}

/// An IPv6 zone smuggling another host (`[fd00::1%25@<number>]:port`, which the policy
/// read as `fd00::1` and the HTTP stack as a userinfo and the host `<number>`) is no
/// target: refused by the verbs with a finding, and a job holding it (accepted before
/// this check) fails without any connection. Before, the node connected to the
/// smuggled address for `run-workflow` and for a job alike, whatever `allow` said.
#[tokio::test]
async fn a_zone_smuggling_another_host_is_refused_and_never_connects() {
    let db = TestDatabase::create().await;
    let (target, accepted) = counting_listener().await;
    let port = target.rsplit_once(':').unwrap().1;
    // 2130706433 is 127.0.0.1 as one number; nothing is denied, so only the target's
    // reading stands between the step and the listener.
    let node = JobsNode::start_with(
        test_config(&db.url, "zone", 1),
        None,
        policy(OutboundRules {
            allow: vec!["[fd00::/8]:*".into()],
            deny_addresses: Vec::new(),
            require_tls: false,
            ..OutboundRules::default()
        }),
    )
    .await;
    let smuggling = two_step_workflow(&format!("[fd00::1%25@2130706433]:{port}"));
    for (verb, body) in [
        (
            "submit-workflow",
            json!({ "workflow": smuggling, "input": { "text": "hi" } }),
        ),
        (
            "run-workflow",
            json!({ "workflow": smuggling, "input": { "text": "hi" } }),
        ),
    ] {
        let (status, answer) = node.call(verb, body).await;
        assert_eq!(status, 400, "{verb}: {answer}");
        assert!(
            finding_messages(&answer)
                .iter()
                .any(|(_, path, message)| path == "$.steps[0].target"
                    && message.contains("is not a hostname or an IP address")),
            "{verb}: {answer}"
        );
    }
    // A job holding it, written straight to the store (as by an older node).
    let job_id = uuid::Uuid::now_v7();
    node.store
        .insert_job(&jobs_role::store::NewJob {
            job_id,
            workflow_name: "embed-text".into(),
            definition: std::sync::Arc::new(smuggling),
            definition_digest: None,
            priority: jobs_role::store::DEFAULT_PRIORITY,
            run_after: Default::default(),
            input: json!({ "text": "hi" }),
            max_attempts: 1,
            trace_context: None,
            by_name: false,
            concurrency: Vec::new(),
            dedupe: None,
            schedule: None,
            metadata: None,
        })
        .await
        .unwrap();
    let job = node
        .wait_for_status(&job_id.to_string(), "FAILED", WAIT)
        .await;
    assert!(
        job["error"].as_str().unwrap().starts_with("WORKFLOW:"),
        "{job}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "no connection was made");
    node.stop().await;
}
