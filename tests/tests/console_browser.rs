//! The console in a real headless Chromium: the review inbox and its generated form,
//! live job pages, operator acts from the pages, auth, and the exact proto3 JSON a
//! generated form sends. Screenshots land in `target/screenshots/`.

use std::time::Duration;

use base64::Engine as _;
use fantoccini::{Client, Locator};
use jobs_role::JobsConfig;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::browser::{
    Browser, click, element, fill, screenshot, serve, wait_for_exact_text, wait_for_text,
};
use protomolt_e2e::jobs::{JobsNode, test_config};
use registry_stub::auth::{AuthConfig, TokenConfig};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

/// A claim a reviewer decides on: every scalar kind, an enum, a repeated field, a
/// nested message and a Timestamp, with rules and comments.
const CONSOLE_PROTO: &str = r#"syntax = "proto3";
package console.test;
import "buf/validate/validate.proto";
import "google/protobuf/timestamp.proto";

// What a reviewer is asked about.
message Claim {
  string text = 1;
  int64 amount_cents = 2;
}

enum Decision {
  DECISION_UNSPECIFIED = 0;
  APPROVE = 1;
  DENY = 2;
}

// A note kept with the decision.
message Note {
  // What the reviewer adds.
  string body = 1 [(buf.validate.field).string.max_len = 200];
  bool internal = 2;
}

// The reviewer's verdict on a claim.
message Verdict {
  // The decision taken.
  Decision decision = 1 [(buf.validate.field).enum = {defined_only: true, not_in: [0]}];
  // How sure the reviewer is, from 0 to 10.
  int32 score = 2 [(buf.validate.field).int32 = {gte: 0, lte: 10}];
  // Who decided (may be left empty).
  string reviewer_email = 3 [
    (buf.validate.field).string.email = true,
    (buf.validate.field).ignore = IGNORE_IF_ZERO_VALUE
  ];
  repeated string tags = 4 [(buf.validate.field).repeated.max_items = 3];
  Note note = 5;
  google.protobuf.Timestamp decided_at = 6;
  double weight = 7;
  float ratio = 8;
  int64 amount_cents = 9;
  uint32 pages = 10;
  uint64 bytes_seen = 11;
  sint32 delta = 12;
  sint64 big_delta = 13;
  fixed32 small_fixed = 14;
  fixed64 big_fixed = 15;
  sfixed32 small_signed_fixed = 16;
  sfixed64 big_signed_fixed = 17;
  bool urgent = 18;
  bytes attachment = 19;
}

// Declared, never served: its one step is answered by a human.
service Desk {
  rpc Review(Claim) returns (Verdict);
}
"#;

/// A workflow whose one step a human answers, validated.
fn review_workflow(name: &str) -> Value {
    let set =
        workflow::schema::compile_proto_source_documented("console_test.proto", CONSOLE_PROTO)
            .expect("the console fixture compiles");
    json!({
        "name": name,
        "schema": { "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(set) },
        "inputType": "console.test.Claim",
        "steps": [{
            "name": "decide",
            "target": "127.0.0.1:9",
            "method": "console.test.Desk/Review",
            "rules": ["text = input.text", "amount_cents = input.amount_cents"],
            "completion": "external",
            "validate": true,
        }],
    })
}

/// A node with the jobs role over a fresh database, served over HTTP.
struct Console {
    node: JobsNode,
    base: String,
    _db: TestDatabase,
}

impl Console {
    async fn start(auth: Option<AuthConfig>) -> Console {
        let db = TestDatabase::create().await;
        let config: JobsConfig = test_config(&db.url, "console-node", 2);
        let node = JobsNode::start_with_auth(config, auth).await;
        let base = serve(node.router.clone()).await;
        Console {
            node,
            base,
            _db: db,
        }
    }

    fn page(&self, route: &str) -> String {
        format!("{}/console{route}", self.base)
    }

    /// Submits `workflow` with `input` and waits for it to park.
    async fn waiting_job(&self, workflow: &Value, input: Value) -> String {
        let job_id = self.node.submit(workflow, input).await;
        self.node
            .wait_for_status(&job_id, "WAITING", Duration::from_secs(30))
            .await;
        job_id
    }
}

/// The parsed JSON of the review form's live preview.
async fn preview(client: &Client) -> Value {
    let text = wait_for_text(client, "pre.form-json", "a JSON object", |t| {
        t.trim_start().starts_with('{')
    })
    .await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the preview is not JSON ({e}): {text}"))
}

fn field(path: &str) -> String {
    format!("form.review-form [data-path=\"{path}\"]")
}

fn field_error(path: &str) -> String {
    format!("form.review-form .field-error[data-for=\"{path}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_answers_from_the_inbox_and_a_late_colleague_is_told_already_done() {
    let console = Console::start(None).await;
    let workflow = review_workflow("claims-review");
    let job_id = console
        .waiting_job(
            &workflow,
            json!({ "text": "refund my order", "amountCents": "1999" }),
        )
        .await;

    let browser = Browser::start().await;
    let reviewer = browser.session().await;
    let colleague = browser.session().await;

    // The inbox groups the waiting job under its workflow and step.
    reviewer.goto(&console.page("#/inbox")).await.unwrap();
    let group = "section.inbox-group[data-workflow=\"claims-review\"][data-step=\"decide\"]";
    element(&reviewer, group).await;
    click(
        &reviewer,
        &format!("{group} li[data-job-id=\"{job_id}\"] a.review-link"),
    )
    .await;
    wait_for_exact_text(&reviewer, "#job-status", "WAITING").await;
    // What the reviewer judges sits beside the form.
    wait_for_text(&reviewer, "#review-context", "the job's input", |t| {
        t.contains("refund my order")
    })
    .await;
    wait_for_text(
        &reviewer,
        "#pending-request",
        "the request to approve",
        |t| t.contains("\"text\"") && t.contains("refund my order"),
    )
    .await;

    // The colleague has the same job open.
    colleague
        .goto(&console.page(&format!("#/jobs/{job_id}")))
        .await
        .unwrap();
    element(&colleague, "form.review-form").await;

    // A value breaking a declared rule is refused on its field, before anything is sent.
    element(&reviewer, "form.review-form").await;
    reviewer
        .find(Locator::Css(&field("decision")))
        .await
        .unwrap()
        .select_by_label("APPROVE")
        .await
        .unwrap();
    fill(&reviewer, &field("score"), "11").await;
    click(&reviewer, "form.review-form button.submit-review").await;
    wait_for_exact_text(
        &reviewer,
        &field_error("score"),
        "value must be less than or equal to 10",
    )
    .await;
    reviewer
        .execute(
            "document.querySelector('#review').scrollIntoView();",
            vec![],
        )
        .await
        .unwrap();
    screenshot(&reviewer, "review-form").await;
    let row = console.node.job(&job_id).await;
    assert_eq!(row["status"], "WAITING", "nothing was sent: {row:#}");

    // A valid answer completes the step, and the page follows the job to COMPLETED
    // live (the marker proves the page was not reloaded).
    // A rule the page leaves to the node (an email address) is checked by a dry run
    // first: shown on its field, nothing written.
    fill(&reviewer, &field("score"), "7").await;
    fill(&reviewer, &field("reviewerEmail"), "not-an-email").await;
    click(&reviewer, "form.review-form button.submit-review").await;
    wait_for_exact_text(
        &reviewer,
        &field_error("reviewerEmail"),
        "value must be an email address",
    )
    .await;
    element(&reviewer, ".review-outcome[data-outcome=\"INVALID\"]").await;
    let row = console.node.job(&job_id).await;
    assert_eq!(
        row["status"], "WAITING",
        "a dry run writes nothing: {row:#}"
    );
    fill(&reviewer, &field("reviewerEmail"), "").await;

    reviewer
        .execute("window.__notReloaded = true;", vec![])
        .await
        .unwrap();
    assert_eq!(
        preview(&reviewer).await,
        json!({ "decision": "APPROVE", "score": 7 })
    );
    click(&reviewer, "form.review-form button.submit-review").await;
    let outcome = element(&reviewer, ".review-outcome[data-outcome=\"COMPLETED\"]").await;
    let said = outcome.text().await.unwrap();
    assert!(
        said.starts_with("Answer accepted: the job resumes after step"),
        "{said}"
    );
    wait_for_exact_text(&reviewer, "#job-status", "COMPLETED").await;
    let marker = reviewer
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(marker, json!(true), "the page reloaded");
    wait_for_text(
        &reviewer,
        "#timeline li[data-step=\"decide\"]",
        "the answer",
        |t| t.contains("decide"),
    )
    .await;
    reviewer
        .execute("window.scrollTo(0, 0);", vec![])
        .await
        .unwrap();
    screenshot(&reviewer, "job-page").await;

    // The colleague answers the same job a moment later: told plainly, nothing changes.
    colleague
        .find(Locator::Css(&field("decision")))
        .await
        .unwrap()
        .select_by_label("DENY")
        .await
        .unwrap();
    click(&colleague, "form.review-form button.submit-review").await;
    let late = element(&colleague, ".review-outcome[data-outcome=\"ALREADY_DONE\"]").await;
    assert!(
        late.text().await.unwrap().contains("Already done"),
        "the colleague is told plainly"
    );
    let row = console.node.job(&job_id).await;
    assert_eq!(row["checkpoints"][0]["response"]["decision"], "APPROVE");

    reviewer.close().await.unwrap();
    colleague.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_form_sends_exactly_the_proto3_json_complete_step_expects() {
    let console = Console::start(None).await;
    let workflow = review_workflow("claims-every-kind");
    let job_id = console.waiting_job(&workflow, json!({ "text": "t" })).await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page(&format!("#/jobs/{job_id}")))
        .await
        .unwrap();
    element(&page, "form.review-form").await;

    // Every kind: the descriptions from the proto comments are shown too.
    wait_for_text(&page, "form.review-form", "the field comments", |t| {
        t.contains("How sure the reviewer is, from 0 to 10.")
    })
    .await;
    page.find(Locator::Css(&field("decision")))
        .await
        .unwrap()
        .select_by_label("DENY")
        .await
        .unwrap();
    fill(&page, &field("score"), "3").await;
    fill(&page, &field("reviewerEmail"), "ana@example.com").await;
    click(
        &page,
        "form.review-form button.add-item[data-path=\"tags\"]",
    )
    .await;
    fill(&page, &field("tags[0]"), "late").await;
    click(
        &page,
        "form.review-form button.add-item[data-path=\"tags\"]",
    )
    .await;
    fill(&page, &field("tags[1]"), "duplicate").await;
    fill(&page, &field("note.body"), "seen twice").await;
    click(&page, &field("note.internal")).await;
    fill(&page, &field("decidedAt"), "2026-12-03T09:30:00Z").await;
    fill(&page, &field("weight"), "0.5").await;
    fill(&page, &field("ratio"), "0.25").await;
    fill(&page, &field("amountCents"), "12345678901").await;
    fill(&page, &field("pages"), "4").await;
    fill(&page, &field("bytesSeen"), "18446744073709551615").await;
    fill(&page, &field("delta"), "-4").await;
    fill(&page, &field("bigDelta"), "-9000000000").await;
    fill(&page, &field("smallFixed"), "7").await;
    fill(&page, &field("bigFixed"), "8").await;
    fill(&page, &field("smallSignedFixed"), "-9").await;
    fill(&page, &field("bigSignedFixed"), "-10").await;
    click(&page, &field("urgent")).await;
    fill(&page, &field("attachment"), "aGVsbG8=").await;

    let expected = json!({
        "decision": "DENY",
        "score": 3,
        "reviewerEmail": "ana@example.com",
        "tags": ["late", "duplicate"],
        "note": { "body": "seen twice", "internal": true },
        "decidedAt": "2026-12-03T09:30:00Z",
        "weight": 0.5,
        "ratio": 0.25,
        "amountCents": "12345678901",
        "pages": 4,
        "bytesSeen": "18446744073709551615",
        "delta": -4,
        "bigDelta": "-9000000000",
        "smallFixed": 7,
        "bigFixed": "8",
        "smallSignedFixed": -9,
        "bigSignedFixed": "-10",
        "urgent": true,
        "attachment": "aGVsbG8=",
    });
    assert_eq!(preview(&page).await, expected);

    // A value of the wrong shape is named on its field.
    fill(&page, &field("amountCents"), "12.5").await;
    click(&page, "form.review-form button.submit-review").await;
    wait_for_text(&page, &field_error("amountCents"), "a shape error", |t| {
        !t.trim().is_empty()
    })
    .await;
    fill(&page, &field("amountCents"), "12345678901").await;

    click(&page, "form.review-form button.submit-review").await;
    element(&page, ".review-outcome[data-outcome=\"COMPLETED\"]").await;
    // The node kept exactly that answer (its canonical proto3 JSON is the same).
    let row = console
        .node
        .wait_for_status(&job_id, "COMPLETED", Duration::from_secs(30))
        .await;
    // The node stores 64-bit integers as JSON numbers (readable at 2am); the page
    // shows them with every digit.
    let mut stored = expected.clone();
    for (key, digits) in [
        ("amountCents", "12345678901"),
        ("bytesSeen", "18446744073709551615"),
        ("bigDelta", "-9000000000"),
        ("bigFixed", "8"),
        ("bigSignedFixed", "-10"),
    ] {
        stored[key] = serde_json::from_str(digits).unwrap();
    }
    assert_eq!(row["checkpoints"][0]["response"], stored);
    wait_for_exact_text(&page, "#job-status", "COMPLETED").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let shown = page
            .execute(
                "const step = document.querySelector('#timeline li[data-step=\"decide\"]'); return step ? step.textContent : '';",
                vec![],
            )
            .await
            .unwrap();
        if shown
            .as_str()
            .unwrap_or_default()
            .contains("18446744073709551615")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the timeline never showed the exact uint64: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cancels_a_queued_job_and_retries_a_dead_one_from_their_pages() {
    let console = Console::start(None).await;
    let server = FixtureServer::start().await;
    // QUEUED for an hour; and DEAD at once (its one attempt fails).
    let later = console
        .node
        .ok(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "later" }, "delayMs": 3_600_000 }),
        )
        .await["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    let doomed = console
        .node
        .ok(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "x", "fail": true }, "maxAttempts": 1 }),
        )
        .await["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    console
        .node
        .wait_for_status(&doomed, "DEAD", Duration::from_secs(30))
        .await;

    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page("#/fleet")).await.unwrap();
    wait_for_exact_text(&page, "[data-count=\"QUEUED\"]", "1").await;
    wait_for_exact_text(&page, "[data-last-hour=\"DEAD\"]", "1").await;
    // The page names the server the node's connection reached.
    let fleet = console.node.ok("get-fleet", json!({})).await;
    let primary = fleet["database"]["primary"].as_str().expect("a primary");
    wait_for_exact_text(
        &page,
        "#database-primary",
        &format!("Database primary: {primary}"),
    )
    .await;
    wait_for_exact_text(
        &page,
        &format!("#jobs-table tr[data-job-id=\"{doomed}\"] td[data-col=\"status\"]"),
        "DEAD",
    )
    .await;
    screenshot(&page, "fleet").await;

    // Cancel the queued job from its page; the countdown shows while it waits.
    page.goto(&console.page(&format!("#/jobs/{later}")))
        .await
        .unwrap();
    wait_for_exact_text(&page, "#job-status", "QUEUED").await;
    wait_for_text(&page, "#run-after-countdown", "a countdown", |t| {
        !t.is_empty()
    })
    .await;
    fill(&page, "#cancel-reason", "not needed any more").await;
    click(&page, "#cancel-job").await;
    wait_for_text(&page, "#action-outcome", "CANCELLED", |t| {
        t.contains("CANCELLED")
    })
    .await;
    wait_for_exact_text(&page, "#job-status", "CANCELLED").await;

    // Retry the dead one from its page: it runs again (and fails again: one attempt).
    page.goto(&console.page(&format!("#/jobs/{doomed}")))
        .await
        .unwrap();
    wait_for_exact_text(&page, "#job-status", "DEAD").await;
    // The timeline marks the step that ended it, with its tries and its error.
    wait_for_text(
        &page,
        "#timeline li[data-step=\"embed\"] .step-state",
        "the failed step",
        |t| t.starts_with("failed after 1 of 1 attempts: GRPC: step 'embed'"),
    )
    .await;
    click(&page, "#retry-job").await;
    wait_for_text(&page, "#action-outcome", "RETRIED", |t| {
        t.contains("RETRIED")
    })
    .await;
    wait_for_text(&page, "#events", "the RETRIED event", |t| {
        t.contains("RETRIED")
    })
    .await;

    // The fleet page's counts follow.
    page.goto(&console.page("#/fleet")).await.unwrap();
    wait_for_exact_text(&page, "[data-count=\"QUEUED\"]", "0").await;
    wait_for_exact_text(&page, "[data-last-hour=\"CANCELLED\"]", "1").await;
    wait_for_exact_text(
        &page,
        &format!("#jobs-table tr[data-job-id=\"{later}\"] td[data-col=\"status\"]"),
        "CANCELLED",
    )
    .await;
    // It was claimed again after the retry.
    let retried = console
        .node
        .store
        .job_events(uuid::Uuid::parse_str(&doomed).unwrap())
        .await
        .unwrap();
    assert!(
        retried.iter().any(|e| e.event_type == "RETRIED"),
        "a RETRIED event"
    );

    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_the_page_asks_for_a_token_and_a_reader_cannot_complete_a_step() {
    let auth = AuthConfig {
        tokens: vec![
            TokenConfig {
                name: "reader".into(),
                token: "reader-token-0123456789".into(),
                token_sha256: None,
                scopes: vec!["jobs:read".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
            TokenConfig {
                name: "submitter".into(),
                token: "submitter-token-0123456789".into(),
                token_sha256: None,
                scopes: vec!["*".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
        ],
    };
    let console = Console::start(Some(auth)).await;
    let workflow = review_workflow("claims-guarded");
    // The node requires a token of every caller, the tests' too.
    let job_id = submit_with_token(&console.base, "submitter-token-0123456789", &workflow).await;
    console
        .node
        .wait_for_status(&job_id, "WAITING", Duration::from_secs(30))
        .await;

    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page(&format!("#/jobs/{job_id}")))
        .await
        .unwrap();
    // Asked for a token, with the reason.
    sign_in(&page, "reader-token-0123456789").await;
    wait_for_exact_text(&page, "#job-status", "WAITING").await;

    // A reader sees the form, and is told plainly that completing needs more.
    element(&page, "form.review-form").await;
    page.find(Locator::Css(&field("decision")))
        .await
        .unwrap()
        .select_by_label("APPROVE")
        .await
        .unwrap();
    click(&page, "form.review-form button.submit-review").await;
    let refused = element(&page, ".review-outcome[data-outcome=\"ERROR\"]").await;
    let text = refused.text().await.unwrap();
    assert!(
        text.contains("permission_denied") && text.contains("jobs:complete"),
        "{text}"
    );
    let row = console.node.job(&job_id).await;
    assert_eq!(row["status"], "WAITING");

    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewers_token_sees_the_request_and_the_form_and_never_the_input() {
    const SECRET: &str = "SECRET-ada@example.com";
    let token = |name: &str, token: &str, scope: &str| TokenConfig {
        name: name.into(),
        token: token.into(),
        token_sha256: None,
        scopes: vec![scope.into()],
        requests_per_minute: None,
        max_body_bytes: None,
    };
    let auth = AuthConfig {
        tokens: vec![
            token("operator", "operator-token-0123456789", "*"),
            token("reviewer", "reviewer-token-0123456789", "jobs:review"),
        ],
    };
    let console = Console::start(Some(auth)).await;
    // The reviewer is asked about the amount, never shown the claim's text.
    let mut workflow = review_workflow("claims-redacted");
    workflow["steps"][0]["rules"] = json!(["amount_cents = input.amount_cents"]);
    workflow["steps"][0]["reviewerSees"] = json!(["request"]);
    let input = json!({ "text": format!("{SECRET} wants a refund"), "amountCents": "1200" });
    let job_id = submit_input_with_token(
        &console.base,
        "operator-token-0123456789",
        &workflow,
        &input,
    )
    .await;
    console
        .node
        .wait_for_status(&job_id, "WAITING", Duration::from_secs(30))
        .await;

    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page("#/inbox")).await.unwrap();
    sign_in(&page, "reviewer-token-0123456789").await;
    // The inbox lists the job, previewing its request.
    let item = format!("li[data-job-id=\"{job_id}\"]");
    wait_for_text(
        &page,
        &format!("{item} .input-preview"),
        "the request",
        |t| t.contains("\"amountCents\"") && t.contains("1200"),
    )
    .await;
    click(&page, &format!("{item} a.review-link")).await;
    wait_for_exact_text(&page, "#job-status", "WAITING").await;
    wait_for_text(&page, "#pending-request", "the request", |t| {
        t.contains("\"amountCents\"") && t.contains("1200")
    })
    .await;
    wait_for_text(&page, "#reviewer-sees", "what a reviewer is shown", |t| {
        t.contains("Shown to a reviewer of this step: request.")
    })
    .await;
    wait_for_text(&page, "#job-input", "that the input is withheld", |t| {
        t.contains("Not shown to a reviewer")
    })
    .await;
    element(&page, "form.review-form").await;
    let body = page
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!body.contains(SECRET), "the page showed the input: {body}");
    // And the reviewer answers.
    page.find(Locator::Css(&field("decision")))
        .await
        .unwrap()
        .select_by_label("APPROVE")
        .await
        .unwrap();
    click(&page, "form.review-form button.submit-review").await;
    element(&page, ".review-outcome[data-outcome=\"COMPLETED\"]").await;
    let body = page.source().await.unwrap();
    assert!(!body.contains(SECRET), "the page held the input");
    console
        .node
        .wait_for_status(&job_id, "COMPLETED", Duration::from_secs(30))
        .await;

    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

/// Answers the console's token prompt (asked for, with the reason) with `token`.
async fn sign_in(page: &Client, token: &str) {
    element(page, "#token-form").await;
    wait_for_text(page, "#token-message", "why a token is needed", |t| {
        !t.is_empty()
    })
    .await;
    fill(page, "#token-input", token).await;
    click(page, "#token-form button[type=\"submit\"]").await;
}

/// Submits over HTTP with a bearer token; returns the job id.
async fn submit_with_token(base: &str, token: &str, workflow: &Value) -> String {
    submit_input_with_token(base, token, workflow, &json!({ "text": "t" })).await
}

/// Submits `input` over HTTP with a bearer token; returns the job id.
async fn submit_input_with_token(
    base: &str,
    token: &str,
    workflow: &Value,
    input: &Value,
) -> String {
    let answer: Value = reqwest::Client::new()
        .post(format!("{base}/v1/actions/submit-workflow"))
        .bearer_auth(token)
        .json(&json!({ "workflow": workflow, "input": input }))
        .send()
        .await
        .expect("submit")
        .json()
        .await
        .expect("JSON");
    answer["jobId"]
        .as_str()
        .unwrap_or_else(|| panic!("submitted: {answer}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_files_are_served_with_a_strict_policy() {
    let console = Console::start(None).await;
    let answer = reqwest::get(console.page("")).await.expect("GET /console");
    assert_eq!(answer.status(), 200);
    let policy = answer
        .headers()
        .get("content-security-policy")
        .expect("a CSP")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"));
    let page = answer.text().await.unwrap();
    assert!(page.contains("console.js"));
    for asset in ["/console.js", "/console.css"] {
        let answer = reqwest::get(console.page(asset)).await.unwrap();
        assert_eq!(answer.status(), 200, "{asset}");
    }
    // The script's modules are served with the page's own policy; no other name is.
    let module = reqwest::get(console.page("/js/dom.js")).await.unwrap();
    assert_eq!(module.status(), 200);
    assert_eq!(
        module.headers()["content-security-policy"]
            .to_str()
            .unwrap(),
        policy
    );
    assert!(
        module.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    for unknown in ["/js/x.js", "/js/..%2Fconsole.js", "/js/dom.js/"] {
        let answer = reqwest::get(console.page(unknown)).await.unwrap();
        assert_eq!(answer.status(), 404, "{unknown}");
    }
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_workflow_is_drawn_as_a_flow_and_submitted_from_its_generated_form() {
    let console = Console::start(None).await;
    console
        .node
        .ok(
            "put-workflow",
            json!({ "workflow": review_workflow("claims-stored") }),
        )
        .await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page("#/workflows")).await.unwrap();
    click(
        &page,
        "#workflow-list li[data-workflow=\"claims-stored\"] a",
    )
    .await;
    // The step, its target and method, and that a human answers it.
    let step = element(&page, "ol.flow li[data-step=\"decide\"]").await;
    let text = step.text().await.unwrap();
    assert!(
        text.contains("console.test.Desk/Review") && text.contains("127.0.0.1:9"),
        "{text}"
    );
    element(&page, "ol.flow li[data-step=\"decide\"] .marker.external").await;

    // The submit form is generated from the input type.
    fill(
        &page,
        "form.submit-form [data-path=\"text\"]",
        "from the console",
    )
    .await;
    fill(&page, "form.submit-form [data-path=\"amountCents\"]", "250").await;
    click(&page, "form.submit-form button.submit-workflow").await;
    let link = element(&page, ".submit-outcome a.submitted-job").await;
    let job_id = link.text().await.unwrap();
    let row = console
        .node
        .wait_for_status(job_id.trim(), "WAITING", Duration::from_secs(30))
        .await;
    // Stored canonical: 64-bit integers as JSON numbers.
    assert_eq!(
        row["input"],
        json!({ "text": "from the console", "amountCents": 250 })
    );
    link.click().await.unwrap();
    wait_for_exact_text(&page, "#job-status", "WAITING").await;

    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_a_workflow_from_its_page_and_the_fleet_page_charts_the_hour() {
    let console = Console::start(None).await;
    console
        .node
        .ok(
            "put-workflow",
            json!({ "workflow": review_workflow("claims-paused") }),
        )
        .await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page("#/workflows")).await.unwrap();
    click(
        &page,
        "#workflow-list li[data-workflow=\"claims-paused\"] button.pause-workflow",
    )
    .await;
    element(
        &page,
        "#workflow-list li[data-workflow=\"claims-paused\"][data-paused=\"true\"] .marker.paused",
    )
    .await;
    // A job of it waits, and its page says why.
    let job = console
        .node
        .ok(
            "submit-workflow",
            json!({ "workflowName": "claims-paused", "input": { "text": "held", "amountCents": 1 } }),
        )
        .await["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    page.goto(&console.page(&format!("#/jobs/{job}")))
        .await
        .unwrap();
    wait_for_text(
        &page,
        "#held-by li[data-reason=\"WORKFLOW_PAUSED\"]",
        "the pause",
        |t| t.contains("paused"),
    )
    .await;
    // The fleet page: an hour of minutes charted, and the pause listed.
    page.goto(&console.page("#/fleet")).await.unwrap();
    let chart = element(&page, "#chart-finished[data-points=\"60\"] svg").await;
    assert!(chart.html(false).await.unwrap().contains("<line"));
    element(&page, "#chart-queue svg").await;
    element(&page, "#chart-latency svg").await;
    wait_for_text(&page, "#paused-workflows", "the paused workflow", |t| {
        t.contains("claims-paused")
    })
    .await;
    screenshot(&page, "fleet-flow").await;
    // Resumed from the workflows page: the job runs to its human step.
    page.goto(&console.page("#/workflows")).await.unwrap();
    click(
        &page,
        "#workflow-list li[data-workflow=\"claims-paused\"] button.pause-workflow",
    )
    .await;
    element(
        &page,
        "#workflow-list li[data-workflow=\"claims-paused\"][data-paused=\"false\"]",
    )
    .await;
    console
        .node
        .wait_for_status(&job, "WAITING", Duration::from_secs(30))
        .await;
    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

/// Every input, select and textarea on the page has a label (or an aria-label), and
/// the page is no wider than the window.
const LABELS_AND_WIDTH: &str = "
const unlabelled = [...document.querySelectorAll('input, select, textarea')]
  .filter((e) => e.type !== 'hidden' && e.labels.length === 0 && !e.getAttribute('aria-label'))
  .map((e) => e.outerHTML.slice(0, 120));
return { unlabelled, overflow: document.documentElement.scrollWidth - window.innerWidth };";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_labels_its_inputs_and_fits_a_phone() {
    let console = Console::start(None).await;
    let workflow = review_workflow("claims-phone");
    console
        .node
        .ok("put-workflow", json!({ "workflow": workflow }))
        .await;
    let job_id = console
        .waiting_job(&workflow, json!({ "text": "on a phone" }))
        .await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.set_window_size(390, 844).await.unwrap();
    for (route, ready) in [
        ("#/fleet".to_owned(), "#jobs-table".to_owned()),
        (format!("#/jobs/{job_id}"), "form.review-form".to_owned()),
        ("#/inbox".to_owned(), "section.inbox-group".to_owned()),
        (
            "#/workflows/claims-phone".to_owned(),
            "form.submit-form".to_owned(),
        ),
    ] {
        page.goto(&console.page(&route)).await.unwrap();
        element(&page, &ready).await;
        let found = page.execute(LABELS_AND_WIDTH, vec![]).await.unwrap();
        assert_eq!(found["unlabelled"], json!([]), "{route}: unlabelled inputs");
        assert!(
            found["overflow"].as_i64().unwrap_or(1) <= 0,
            "{route}: the page is wider than a phone: {found}"
        );
    }
    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pages_the_jobs_by_keyset_and_redrives_dead_lettered_events() {
    let console = Console::start(None).await;
    // 60 jobs that wait an hour (more than one page of 50); three of them tagged for
    // a customer, one of those also for a region.
    let submissions: Vec<Value> = (0..60)
        .map(|i| {
            let metadata = match i {
                0 => json!({ "customer": "acme", "region": "eu" }),
                1 | 2 => json!({ "customer": "acme" }),
                _ => json!({}),
            };
            json!({ "input": { "text": format!("{i}") }, "delayMs": 3_600_000, "metadata": metadata })
        })
        .collect();
    let answer = console
        .node
        .ok(
            "submit-workflows",
            json!({ "workflow": two_step_workflow("127.0.0.1:1"), "submissions": submissions }),
        )
        .await;
    let ids: Vec<String> = answer["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["jobId"].as_str().unwrap().to_owned())
        .collect();

    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page("#/fleet")).await.unwrap();
    wait_for_exact_text(&page, "#page-info", "Jobs 1–50").await;
    click(&page, "#page-next").await;
    wait_for_exact_text(&page, "#page-info", "Jobs 51–60").await;
    assert!(
        page.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("after="),
        "the page's place is a keyset cursor in the URL"
    );
    click(&page, "#page-prev").await;
    wait_for_exact_text(&page, "#page-info", "Jobs 1–50").await;

    // The metadata filter: one key typed in, two keys from a link, a malformed one.
    fill(&page, "#filter-metadata", "customer=acme").await;
    click(&page, "#apply-filters").await;
    wait_for_exact_text(&page, "#page-info", "Jobs 1–3").await;
    page.goto(&console.page("#/fleet?meta=customer%3Dacme%2C%20region%3Deu"))
        .await
        .unwrap();
    wait_for_exact_text(&page, "#page-info", "Jobs 1–1").await;
    wait_for_exact_text(
        &page,
        &format!(
            "#jobs-table tr[data-job-id=\"{}\"] td[data-col=\"metadata\"]",
            ids[0]
        ),
        "customer=acme, region=eu",
    )
    .await;
    page.goto(&console.page("#/fleet?meta=acme")).await.unwrap();
    wait_for_text(
        &page,
        "#filter-message",
        "the metadata filter's hint",
        |t| t.starts_with("Metadata: write key=value pairs"),
    )
    .await;

    // Ids show 13 characters and their last 4 (UUIDv7 ids of one millisecond still
    // differ), the whole id on hover.
    page.goto(&console.page("#/fleet?meta=customer%3Dacme%2C%20region%3Deu"))
        .await
        .unwrap();
    let link = element(
        &page,
        &format!("#jobs-table tr[data-job-id=\"{}\"] a.job-link", ids[0]),
    )
    .await;
    let shown = link.text().await.unwrap();
    let id = &ids[0];
    assert_eq!(shown, format!("{}…{}", &id[..13], &id[id.len() - 4..]));
    assert_eq!(
        link.attr("title").await.unwrap().as_deref(),
        Some(id.as_str())
    );

    // Two jobs' events dead-lettered.
    let client = console._db.connect().await;
    for job in &ids[..2] {
        client
            .execute(
                "UPDATE workflow_run_events_outbox SET status = 'FAILED', attempts = 10
                  WHERE job_id = $1::text::uuid",
                &[job],
            )
            .await
            .unwrap();
    }
    // The job page redrives its own.
    page.goto(&console.page(&format!("#/jobs/{}", ids[0])))
        .await
        .unwrap();
    wait_for_text(&page, "#redrive-note", "the dead-lettered count", |t| {
        t.starts_with("1 events")
    })
    .await;
    // The job page copies its id, and its relative ages move on by themselves.
    element(&page, ".job-heading button.copy").await;
    // A time the page did not draw itself: the console's ticker brings it up to date.
    page.execute(
        "const t = document.createElement('time'); t.id = 'tick-probe';
         t.setAttribute('datetime', new Date(Date.now() - 90000).toISOString());
         t.setAttribute('data-relative', 'age'); t.textContent = 'not yet';
         document.body.append(t);",
        vec![],
    )
    .await
    .unwrap();
    wait_for_text(&page, "#tick-probe", "the ticker to age the probe", |t| {
        t == "1 min ago"
    })
    .await;
    click(&page, "#redrive-events").await;
    wait_for_text(&page, "#action-outcome", "the redrive", |t| {
        t.contains("Redrove 1 events")
    })
    .await;
    // The fleet page shows the rest and redrives them all.
    page.goto(&console.page("#/fleet")).await.unwrap();
    wait_for_exact_text(&page, "[data-outbox=\"failed\"]", "1").await;
    click(&page, "#redrive-all").await;
    wait_for_text(&page, "#redrive-outcome", "the redrive", |t| {
        t.contains("Redrove 1 events of 1 jobs")
    })
    .await;
    wait_for_exact_text(&page, "[data-outbox=\"failed\"]", "0").await;
    let failed: i64 = client
        .query_one(
            "SELECT count(*) FROM workflow_run_events_outbox WHERE status = 'FAILED'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(failed, 0);

    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_schedules_next_and_last_runs_and_pauses_triggers_and_resumes_it() {
    let console = Console::start(None).await;
    let server = FixtureServer::start().await;
    console
        .node
        .ok(
            "put-workflow",
            json!({ "workflow": workflow::testkit::leaf_workflow(&server.target()) }),
        )
        .await;
    console
        .node
        .ok(
            "put-schedule",
            json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
                "workflowName": "leaf", "input": { "text": "night" } }),
        )
        .await;
    let first = console
        .node
        .ok("trigger-schedule", json!({ "name": "nightly" }))
        .await["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    console
        .node
        .wait_for_status(&first, "COMPLETED", Duration::from_secs(30))
        .await;

    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&console.page("#/schedules")).await.unwrap();
    let row = "#schedule-list li[data-schedule=\"nightly\"]";
    element(&page, &format!("{row} .next-runs li:nth-child(3)")).await;
    element(
        &page,
        &format!("{row} .last-runs li[data-job=\"{first}\"][data-status=\"COMPLETED\"]"),
    )
    .await;
    wait_for_text(&page, row, "the schedule's cron and zone", |t| {
        t.contains("0 3 * * * (Europe/Berlin)")
    })
    .await;
    let found = page.execute(LABELS_AND_WIDTH, vec![]).await.unwrap();
    assert_eq!(
        found["unlabelled"],
        json!([]),
        "schedules: unlabelled inputs"
    );

    // Paused from the page: no next runs while paused.
    click(&page, &format!("{row} button.pause-schedule")).await;
    element(
        &page,
        "#schedule-list li[data-schedule=\"nightly\"][data-paused=\"true\"] .marker.paused",
    )
    .await;
    let shown = console
        .node
        .ok("get-schedule", json!({ "name": "nightly" }))
        .await;
    assert_eq!(shown["schedule"]["paused"], true);
    // Triggered from the page: a job now, whatever the pause.
    click(&page, &format!("{row} button.trigger-schedule")).await;
    let link = element(&page, &format!("{row} a.triggered-job")).await;
    let triggered = link.text().await.unwrap();
    console
        .node
        .wait_for_status(&triggered, "COMPLETED", Duration::from_secs(30))
        .await;
    screenshot(&page, "schedules").await;
    // Resumed: it fires again.
    click(&page, &format!("{row} button.pause-schedule")).await;
    element(
        &page,
        "#schedule-list li[data-schedule=\"nightly\"][data-paused=\"false\"]",
    )
    .await;
    // Its own page: the spec, five next runs, both jobs.
    page.goto(&console.page("#/schedules/nightly"))
        .await
        .unwrap();
    wait_for_text(&page, ".schedule-facts", "the spec", |t| {
        t.contains("Europe/Berlin") && t.contains("skip")
    })
    .await;
    element(&page, ".next-runs li:nth-child(5)").await;
    element(&page, &format!(".last-runs li[data-job=\"{triggered}\"]")).await;
    element(&page, &format!(".last-runs li[data-job=\"{first}\"]")).await;
    page.close().await.unwrap();
    browser.stop().await;
    console.node.stop().await;
}
