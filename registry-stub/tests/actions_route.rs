//! The shared actions route, driven in-process with `oneshot` (and once over a real
//! socket): catalog, error model, validation, auth, and the registry's verbs.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use registry_stub::auth::{AuthConfig, TokenConfig};
use registry_stub::config::RegistryConfig;
use registry_stub::{Action, MountContext, MountError, Node, NodeError, RegistryRole, Role};
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow::testkit::{FixtureServer, three_step_workflow, two_step_workflow};

const RUNNER_TOKEN: &str = "runner-token-0123456789";
const READER_TOKEN: &str = "reader-token-0123456789";

async fn router(dir: &std::path::Path, auth: Option<AuthConfig>) -> Router {
    let node = Node::new()
        .with_auth(auth)
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.to_owned(),
        }))
        .mount()
        .await
        .expect("the node mounts");
    node.router()
}

fn auth() -> AuthConfig {
    AuthConfig {
        tokens: vec![
            TokenConfig {
                name: "runner".into(),
                token: RUNNER_TOKEN.into(),
                token_sha256: None,
                scopes: vec!["workflow:run".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
            TokenConfig {
                name: "reader".into(),
                token: READER_TOKEN.into(),
                token_sha256: None,
                scopes: vec!["registry:read".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
        ],
    }
}

async fn send(router: &Router, verb: &str, body: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut request =
        Request::post(format!("/v1/actions/{verb}")).header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
    (status, json)
}

/// `run-workflow` of an inline workflow.
async fn run_inline(router: &Router, workflow: Value, input: Value) -> (StatusCode, Value) {
    call(
        router,
        "run-workflow",
        json!({ "workflow": workflow, "input": input }),
    )
    .await
}

async fn call(router: &Router, verb: &str, body: Value) -> (StatusCode, Value) {
    send(router, verb, &body.to_string(), None).await
}

#[tokio::test]
async fn the_catalog_lists_every_verb_with_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;
    let response = router
        .oneshot(Request::get("/v1/actions").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let catalog: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let actions = catalog["actions"].as_array().unwrap();
    let names: Vec<&str> = actions
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "get-workflow",
            "list-workflows",
            "put-workflow",
            "run-workflow"
        ]
    );
    let run = actions
        .iter()
        .find(|a| a["name"] == "run-workflow")
        .unwrap();
    assert_eq!(run["scope"], "workflow:run");
    assert!(
        run["description"]
            .as_str()
            .unwrap()
            .contains("synchronously")
    );
    assert_eq!(
        run["request"]["properties"]["workflowName"],
        json!({ "type": "string" })
    );
    assert_eq!(
        run["request"]["properties"]["input"],
        json!({ "type": "object" })
    );
    assert_eq!(run["request"]["additionalProperties"], json!(false));
    assert_eq!(run["response"]["properties"]["steps"]["type"], "array");
    assert_eq!(
        run["response"]["properties"]["failedStep"],
        json!({ "type": "string" })
    );
}

#[tokio::test]
async fn transport_errors_have_a_code_and_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;

    let (status, body) = call(&router, "no-such-verb", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["code"], "not_found");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown verb 'no-such-verb'")
    );

    let (status, body) = send(&router, "list-workflows", "{not json", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["code"], "invalid_argument");
    assert!(
        body["message"].as_str().unwrap().contains("not valid JSON"),
        "{body}"
    );

    let (status, body) = send(&router, "get-workflow", "[1, 2]", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("must be a JSON object"),
        "{body}"
    );

    let (status, body) = call(
        &router,
        "get-workflow",
        json!({ "name": "x", "colour": "red" }),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "unknown fields are refused"
    );
    assert!(
        body["message"].as_str().unwrap().contains("colour"),
        "{body}"
    );

    let (status, body) = call(&router, "get-workflow", json!({ "name": 42 })).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "wrong JSON types are refused: {body}"
    );

    // An oversized body is refused in the same error model.
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(9 * 1024 * 1024));
    let (status, body) = send(&router, "get-workflow", &huge, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("limited to 8 MiB"),
        "{body}"
    );

    // An empty body is an empty request.
    let (status, body) = send(&router, "list-workflows", "", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "workflows": [] })));
}

#[tokio::test]
async fn rule_violations_answer_400_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;

    let (status, body) = call(&router, "get-workflow", json!({ "name": "n".repeat(201) })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"][0]["field"], "name");
    assert_eq!(body["details"][0]["rule"], "string.max_len");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid get-workflow request: name length must be at most"),
        "{body}"
    );

    let (status, body) = call(
        &router,
        "run-workflow",
        json!({ "workflowName": "w".repeat(201) }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["details"][0]["field"], "workflowName",
        "JSON names, not proto names: {body}"
    );

    // The message-level CEL rule: exactly one definition source.
    for both_or_neither in [
        json!({}),
        json!({ "workflow": { "name": "x" }, "workflowName": "x" }),
    ] {
        let (status, body) = call(&router, "run-workflow", both_or_neither).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body["details"][0]["rule"], "run_workflow.one_definition_source",
            "{body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("exactly one definition source"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn tokens_and_scopes_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), Some(auth())).await;

    let (status, body) = send(&router, "list-workflows", "{}", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["code"], "unauthenticated");

    let (status, _) = send(
        &router,
        "list-workflows",
        "{}",
        Some("wrong-token-0123456789"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, body) = send(&router, "list-workflows", "{}", Some(RUNNER_TOKEN)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["code"], "permission_denied");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("'registry:read'")
    );

    let (status, _) = send(&router, "list-workflows", "{}", Some(READER_TOKEN)).await;
    assert_eq!(status, StatusCode::OK);

    let catalog = router
        .clone()
        .oneshot(Request::get("/v1/actions").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        catalog.status(),
        StatusCode::UNAUTHORIZED,
        "the catalog needs a token too"
    );
}

#[tokio::test]
async fn run_workflow_answers_the_embedding_from_real_servers() {
    let server = FixtureServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;
    let (status, body) = run_inline(
        &router,
        two_step_workflow(&server.target()),
        json!({ "text": "hello" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["ok"], true);
    assert_eq!(
        body["output"],
        json!({ "sourceText": "hello", "vector": [0.5, 1.0] })
    );
    assert_eq!(body["steps"][0]["name"], "tokenize");
    assert_eq!(
        body["steps"][1]["response"],
        json!({ "values": [0.5, 1.0] })
    );

    // A failing step is a result, not a transport error.
    let (status, body) = run_inline(
        &router,
        two_step_workflow(&server.target()),
        json!({ "text": "x", "fail": true }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({ "ok": false, "failedStep": "embed", "error": "GRPC: step 'embed': UNAVAILABLE: model loading" })
    );

    // A bad input names the field.
    let (status, body) = run_inline(
        &router,
        two_step_workflow(&server.target()),
        json!({ "txt": "x" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().starts_with("input: "),
        "{body}"
    );
    assert!(body["message"].as_str().unwrap().contains("txt"), "{body}");
}

#[tokio::test]
async fn run_workflow_refuses_on_reaching_an_external_step_with_the_engines_sentence() {
    let server = FixtureServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;
    let (status, body) = run_inline(
        &router,
        three_step_workflow(&server.target()),
        json!({ "text": "hi" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["ok"], false);
    assert_eq!(body["error"], workflow::SYNC_REFUSAL);
    assert_eq!(
        (server.stats.tokenize_calls(), server.stats.embed_calls()),
        (1, 0),
        "refused on reaching the external step: the step before it ran"
    );
}

#[tokio::test]
async fn put_workflow_verifies_and_stored_workflows_survive_a_restart() {
    let server = FixtureServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;

    let mut broken = two_step_workflow(&server.target());
    broken["steps"][1]["rules"] = json!(["ids = typo.ids"]);
    let (status, body) = call(&router, "put-workflow", json!({ "workflow": broken })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown scope 'typo'"),
        "{body}"
    );
    assert_eq!(body["details"][0]["step"], "embed");
    assert_eq!(body["details"][0]["path"], "$.steps[1].rules[0]");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was stored"
    );

    let mut badly_named = two_step_workflow(&server.target());
    badly_named["name"] = json!("../Escape");
    let (status, body) = call(&router, "put-workflow", json!({ "workflow": badly_named })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("workflow.name: "),
        "{body}"
    );

    let good = two_step_workflow(&server.target());
    let (status, body) = call(&router, "put-workflow", json!({ "workflow": good })).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({ "ok": true, "name": "embed-text", "created": true })
        )
    );
    let (_, body) = call(&router, "put-workflow", json!({ "workflow": good })).await;
    assert_eq!(body["created"], false, "a second put replaces");

    // A new node over the same directory sees it.
    let restarted = self::router(dir.path(), None).await;
    let (status, body) = call(&restarted, "get-workflow", json!({ "name": "embed-text" })).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({ "ok": true, "workflow": good, "source": "file" })
    );
    let (_, body) = call(&restarted, "list-workflows", json!({})).await;
    assert_eq!(
        body,
        json!({ "workflows": [{ "name": "embed-text", "source": "file", "steps": 2 }] })
    );
    let (_, body) = call(&restarted, "get-workflow", json!({ "name": "nope" })).await;
    assert_eq!(
        body,
        json!({ "ok": false, "error": "no workflow named 'nope'" })
    );

    // And runs it by name.
    let (_, body) = call(
        &restarted,
        "run-workflow",
        json!({ "workflowName": "embed-text", "input": { "text": "abc" } }),
    )
    .await;
    assert_eq!(
        body["output"],
        json!({ "sourceText": "abc", "vector": [0.3, 1.0] })
    );
    let (status, body) = call(
        &restarted,
        "run-workflow",
        json!({ "workflowName": "missing" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("workflowName: no stored workflow named 'missing'")
    );
}

#[tokio::test]
async fn the_route_answers_over_a_real_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = "{}";
    let request = format!(
        "POST /v1/actions/list-workflows HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.ends_with("{\"workflows\":[]}"), "{response}");
    server.abort();
}

struct FakeRole {
    name: &'static str,
    requires: Vec<String>,
    verb: &'static str,
}

#[async_trait::async_trait]
impl Role for FakeRole {
    fn name(&self) -> &str {
        self.name
    }

    fn requires(&self) -> Vec<String> {
        self.requires.clone()
    }

    async fn mount(&self, ctx: &mut MountContext) -> Result<(), MountError> {
        let pool = workflow::schema::compile_proto_pool(
            "f.proto",
            "syntax = \"proto3\"; package f; message M {}",
        )
        .map_err(MountError)?;
        let m = pool.get_message_by_name("f.M").unwrap();
        ctx.add_action(Action::new(
            self.verb,
            "fake",
            "fake:run",
            m.clone(),
            m,
            |_| async { Ok(json!({})) },
        ));
        Ok(())
    }
}

#[tokio::test]
async fn a_node_refuses_to_boot_without_a_required_role_or_with_a_contested_verb() {
    let jobs = FakeRole {
        name: "jobs",
        requires: vec!["registry".into()],
        verb: "submit-workflow",
    };
    let err = Node::new().role(jobs).mount().await.err().expect("refused");
    assert_eq!(
        err,
        NodeError::MissingRole {
            role: "jobs".into(),
            missing: "registry".into()
        }
    );
    let line = err.to_string();
    assert_eq!(
        line,
        "role 'jobs' requires role 'registry', which is not mounted on this node: add \"registry\" to [node].roles"
    );
    assert!(!line.contains('\n'), "one line");

    let dir = tempfile::tempdir().unwrap();
    let clash = FakeRole {
        name: "parse",
        requires: vec![],
        verb: "run-workflow",
    };
    let err = Node::new()
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.path().to_owned(),
        }))
        .role(clash)
        .mount()
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        "verb 'run-workflow' is contributed by both the registry and the parse role: a verb can have only one owner"
    );

    // Roles are ordered by their requirements, whatever the listed order.
    let jobs = FakeRole {
        name: "jobs",
        requires: vec!["registry".into()],
        verb: "submit-workflow",
    };
    let node = Node::new()
        .role(jobs)
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.path().to_owned(),
        }))
        .mount()
        .await
        .expect("mounts registry first");
    assert!(
        node.get::<Arc<dyn registry_stub::WorkflowRepository>>()
            .is_some()
    );
}
