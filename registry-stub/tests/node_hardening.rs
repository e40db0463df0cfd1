//! Node hardening, through the real router: concurrent puts of one workflow, the
//! auth and body-limit layers over the routes a role contributes, and the limits of
//! `run-workflow`.

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use registry_stub::auth::{AuthConfig, TokenConfig};
use registry_stub::config::{RegistryConfig, RegistrySection};
use registry_stub::{MountContext, MountError, Node, RegistryRole, Role};
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const TOKEN: &str = "hardening-token-0123456789";

async fn registry_router(dir: &std::path::Path) -> Router {
    Node::new()
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.to_owned(),
        }))
        .mount()
        .await
        .expect("the node mounts")
        .router()
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
    (status, json)
}

async fn call(router: &Router, verb: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(format!("/v1/actions/{verb}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(router, request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_of_one_name_all_succeed_and_the_served_version_is_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let router = registry_router(dir.path()).await;

    let mut puts = tokio::task::JoinSet::new();
    for i in 0..100u64 {
        let router = router.clone();
        let mut envelope = two_step_workflow("127.0.0.1:1");
        envelope["steps"][1]["deadlineMs"] = json!(1_000 + i);
        puts.spawn(
            async move { call(&router, "put-workflow", json!({ "workflow": envelope })).await },
        );
    }
    let mut created = 0;
    while let Some(answer) = puts.join_next().await {
        let (status, body) = answer.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["ok"], true, "{body}");
        created += usize::from(body["created"] == true);
    }
    assert_eq!(created, 1, "exactly one put created the workflow");

    let (_, served) = call(&router, "get-workflow", json!({ "name": "embed-text" })).await;
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("embed-text.json")).unwrap())
            .unwrap();
    assert_eq!(
        served["workflow"], on_disk,
        "the served version is the file"
    );

    // A restart loads the file, so it serves the same version.
    let restarted = registry_router(dir.path()).await;
    let (_, after_restart) =
        call(&restarted, "get-workflow", json!({ "name": "embed-text" })).await;
    assert_eq!(after_restart["workflow"], served["workflow"]);

    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["embed-text.json"], "no temporary files are left");
}

/// A role contributing one protected route (`POST /probe/echo`, answering the body's
/// length) and one public route (`GET /probe/health`).
struct ProbeRole;

#[async_trait::async_trait]
impl Role for ProbeRole {
    fn name(&self) -> &str {
        "probe"
    }

    async fn mount(&self, ctx: &mut MountContext) -> Result<(), MountError> {
        ctx.add_routes(Router::new().route(
            "/probe/echo",
            axum::routing::post(|body: Bytes| async move { body.len().to_string() }),
        ));
        ctx.add_public_routes(
            Router::new().route("/probe/health", axum::routing::get(|| async { "ok" })),
        );
        Ok(())
    }
}

async fn probe_router(auth: Option<AuthConfig>) -> Router {
    Node::new()
        .with_auth(auth)
        .role(ProbeRole)
        .mount()
        .await
        .expect("the node mounts")
        .router()
}

fn auth() -> AuthConfig {
    AuthConfig {
        tokens: vec![TokenConfig {
            name: "ops".into(),
            token: TOKEN.into(),
            token_sha256: None,
            scopes: vec!["registry:read".into()],
            requests_per_minute: None,
            max_body_bytes: None,
        }],
    }
}

fn echo(body: impl Into<Body>, token: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/probe/echo").header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request.body(body.into()).unwrap()
}

#[tokio::test]
async fn contributed_routes_need_a_token_when_auth_is_on_and_public_routes_do_not() {
    let router = probe_router(Some(auth())).await;

    let (status, body) = send(&router, echo("hello", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "unauthenticated");

    let (status, _) = send(&router, echo("hello", Some("wrong-token-0123456789"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, body) = send(&router, echo("hello", Some(TOKEN))).await;
    assert_eq!((status, body), (StatusCode::OK, json!(5)));

    let health = Request::get("/probe/health").body(Body::empty()).unwrap();
    let (status, body) = send(&router, health).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "raw": "ok" })));

    // The actions route keeps its own checks.
    let catalog = Request::get("/v1/actions").body(Body::empty()).unwrap();
    assert_eq!(send(&router, catalog).await.0, StatusCode::UNAUTHORIZED);

    // Without [auth], contributed routes answer without a token.
    let open = probe_router(None).await;
    let (status, body) = send(&open, echo("hello", None)).await;
    assert_eq!((status, body), (StatusCode::OK, json!(5)));
}

#[tokio::test]
async fn an_oversized_body_to_a_contributed_route_is_refused() {
    let router = probe_router(Some(auth())).await;
    let huge = vec![b'x'; 9 * 1024 * 1024];

    let (status, body) = send(&router, echo(huge.clone(), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_argument");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("limited to 8 MiB"),
        "{body}"
    );

    // A body without a declared length is cut off while it is read.
    let chunks = Chunks(huge.chunks(64 * 1024).map(Bytes::copy_from_slice).collect());
    let (status, _) = send(&router, echo(Body::new(chunks), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    // The token is checked before the size: no token, no body read.
    let (status, _) = send(&router, echo(vec![b'x'; 9 * 1024 * 1024], None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A body sent in chunks, with no declared length (like chunked transfer encoding).
struct Chunks(std::collections::VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.0
                .pop_front()
                .map(|chunk| Ok(http_body::Frame::data(chunk))),
        )
    }
}

async fn limited_router(
    dir: &std::path::Path,
    run_timeout_ms: u64,
    max_concurrent_runs: usize,
) -> Router {
    Node::new()
        .role(RegistryRole::from_section(&RegistrySection {
            workflows_dir: dir.to_owned(),
            run_timeout_ms,
            max_concurrent_runs,
            ..RegistrySection::default()
        }))
        .mount()
        .await
        .expect("the node mounts")
        .router()
}

fn slow_embedder() -> FixtureOptions {
    FixtureOptions {
        embed_delay: Some(Duration::from_secs(30)),
        ..FixtureOptions::default()
    }
}

#[tokio::test]
async fn run_workflow_past_its_time_limit_answers_unavailable_naming_the_setting() {
    let slow = FixtureServer::start_with(slow_embedder()).await;
    let dir = tempfile::tempdir().unwrap();
    let router = limited_router(dir.path(), 300, 64).await;
    let started = std::time::Instant::now();
    let (status, body) = call(
        &router,
        "run-workflow",
        json!({ "workflow": two_step_workflow(&slow.target()), "input": { "text": "hi" } }),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "unavailable");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("registry.run_timeout_ms = 300 ms"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped at the limit, not at the step"
    );
    assert_eq!(slow.stats.embed_calls(), 1, "the run reached the slow step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_workflow_over_the_concurrency_cap_answers_unavailable_at_once() {
    let slow = FixtureServer::start_with(slow_embedder()).await;
    let fast = FixtureServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let router = limited_router(dir.path(), 60_000, 1).await;

    let holder = {
        let router = router.clone();
        let workflow = two_step_workflow(&slow.target());
        tokio::spawn(async move {
            call(
                &router,
                "run-workflow",
                json!({ "workflow": workflow, "input": { "text": "hi" } }),
            )
            .await
        })
    };
    // The one slot is taken once the first run is in its slow step.
    while slow.stats.embed_calls() == 0 {
        tokio::task::yield_now().await;
    }

    let started = std::time::Instant::now();
    let (status, body) = call(
        &router,
        "run-workflow",
        json!({ "workflow": two_step_workflow(&fast.target()), "input": { "text": "hi" } }),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body,
        json!({
            "code": "unavailable",
            "message": "too many workflows running (registry.max_concurrent_runs = 1); retry later"
        })
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused, not queued"
    );
    assert_eq!(fast.stats.tokenize_calls(), 0);

    // The slot comes back when the running call goes away.
    holder.abort();
    assert!(holder.await.unwrap_err().is_cancelled());
    let (status, body) = call(
        &router,
        "run-workflow",
        json!({ "workflow": two_step_workflow(&fast.target()), "input": { "text": "hi" } }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["ok"], true, "{body}");
}

#[tokio::test]
async fn tls_files_that_cannot_be_read_stop_the_node_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mount = |tls: Vec<registry_stub::config::TlsSection>| {
        let section = RegistrySection {
            workflows_dir: dir.path().to_owned(),
            tls,
            ..RegistrySection::default()
        };
        async move {
            Node::new()
                .role(RegistryRole::from_section(&section))
                .mount()
                .await
                .err()
                .expect("refused")
                .to_string()
        }
    };
    let missing = mount(vec![registry_stub::config::TlsSection {
        targets: "*.internal:443".into(),
        ca_file: Some("/nonexistent/ca.pem".into()),
        cert_file: None,
        key_file: None,
    }])
    .await;
    assert!(
        missing.contains("registry.tls[0].ca_file: cannot read /nonexistent/ca.pem"),
        "{missing}"
    );
    let half = mount(vec![registry_stub::config::TlsSection {
        targets: "*".into(),
        ca_file: None,
        cert_file: Some("/x.pem".into()),
        key_file: None,
    }])
    .await;
    assert!(
        half.contains("cert_file and key_file go together"),
        "{half}"
    );
}

#[tokio::test]
async fn a_put_whose_caller_goes_away_still_serves_what_it_wrote() {
    use registry_stub::WorkflowRepository;
    use registry_stub::repository::FileWorkflowRepository;
    let server = FixtureServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let repository = FileWorkflowRepository::open(dir.path()).await.unwrap();
    let version = |i: u32| {
        let mut envelope = two_step_workflow(&server.target());
        envelope["name"] = json!("race");
        envelope["deadlineMs"] = json!(1_000 + i);
        envelope
    };
    // Callers that time out (or disconnect) mid-put: the puts still finish whole.
    for i in 0..30 {
        let _ = tokio::time::timeout(Duration::from_micros(1), repository.put(version(i))).await;
    }
    let file = dir.path().join("race.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // The abandoned puts finish on their own; wait until the served copy and the file
    // agree and stay so (every put done), then restart.
    let (mut agreeing, mut last) = (0, None);
    loop {
        let served = repository
            .resolve("race")
            .map(|s| s.envelope["deadlineMs"].clone());
        let stored: Option<Value> = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .map(|v| v["deadlineMs"].clone());
        agreeing = if served.is_some() && served == stored && served == last {
            agreeing + 1
        } else {
            0
        };
        last = served.clone();
        if agreeing >= 20 {
            let reopened = FileWorkflowRepository::open(dir.path()).await.unwrap();
            assert_eq!(
                reopened
                    .resolve("race")
                    .map(|s| s.envelope["deadlineMs"].clone()),
                served,
                "a restart serves what was served"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "served {served:?}, file {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
