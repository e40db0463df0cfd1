//! The gate in front of every non-public route, driven in-process with `oneshot`: what
//! a web page the operator opens cannot do to a loopback node (a `text/plain` POST, a
//! foreign `Origin`, a rebound `Host`), and the tokens' budgets under many callers.

use std::time::Instant;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use registry_stub::auth::{AuthConfig, TokenConfig};
use registry_stub::config::RegistryConfig;
use registry_stub::gate::HostPolicy;
use registry_stub::{Node, RegistryRole};
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow::testkit::two_step_workflow;

const TOKEN: &str = "budget-token-0123456789";

async fn router(dir: &std::path::Path, auth: Option<AuthConfig>, hosts: HostPolicy) -> Router {
    Node::new()
        .with_auth(auth)
        .with_hosts(hosts)
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.to_owned(),
        }))
        .mount()
        .await
        .expect("the node mounts")
        .router()
}

fn loopback() -> HostPolicy {
    HostPolicy::for_bind("127.0.0.1:8080".parse().unwrap(), vec![])
}

fn budgeted(requests_per_minute: Option<u32>, max_body_bytes: Option<usize>) -> AuthConfig {
    AuthConfig {
        tokens: vec![TokenConfig {
            name: "budgeted-ci".into(),
            token: TOKEN.into(),
            token_sha256: None,
            scopes: vec!["*".into()],
            requests_per_minute,
            max_body_bytes,
        }],
    }
}

/// A `put-workflow` of a valid workflow, with the given headers.
fn put_workflow(headers: &[(&str, &str)]) -> Request<Body> {
    let body = json!({ "workflow": two_step_workflow("127.0.0.1:1") }).to_string();
    let mut request = Request::post("/v1/actions/put-workflow");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body)).unwrap()
}

async fn answer(router: &Router, request: Request<Body>) -> (StatusCode, http::HeaderMap, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
    (status, headers, json)
}

fn stored(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

#[tokio::test]
async fn a_page_the_operator_opens_cannot_write_through_a_loopback_node() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), None, loopback()).await;

    // What a page can send without the browser asking first: text/plain, a form.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let (status, _, body) = answer(
            &router,
            put_workflow(&[("host", "127.0.0.1:8080"), ("content-type", content_type)]),
        )
        .await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
        assert_eq!(body["code"], "unsupported_media_type");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("Content-Type: application/json"),
            "{body}"
        );
    }
    let (status, _, body) = answer(&router, put_workflow(&[("host", "127.0.0.1:8080")])).await;
    assert_eq!(
        status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "no Content-Type: {body}"
    );

    // A JSON request from another site, and one through a rebound DNS name.
    let (status, _, body) = answer(
        &router,
        put_workflow(&[
            ("host", "127.0.0.1:8080"),
            ("content-type", "application/json"),
            ("origin", "https://evil.example"),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "permission_denied");
    assert!(
        body["message"].as_str().unwrap().contains("evil.example"),
        "{body}"
    );
    let (status, _, body) = answer(
        &router,
        put_workflow(&[
            ("host", "rebound.evil.example:8080"),
            ("content-type", "application/json"),
            ("origin", "http://rebound.evil.example:8080"),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("node.allowed_hosts"),
        "{body}"
    );
    let (status, _, _) = answer(
        &router,
        Request::get("/v1/actions")
            .header("host", "rebound.evil.example:8080")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "reads are refused too");
    assert_eq!(stored(dir.path()), 0, "nothing was written");

    // The node's own page, and a tool that sends no Origin, are answered.
    let (status, _, body) = answer(
        &router,
        put_workflow(&[
            ("host", "localhost:8080"),
            ("content-type", "application/json; charset=utf-8"),
            ("origin", "http://localhost:8080"),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored(dir.path()), 1);

    // Health checks stay public: a load balancer's own Host is not checked.
    let (status, _, _) = answer(
        &router,
        Request::get("/healthz")
            .header("host", "10.0.0.7:8080")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_listed_host_is_answered_and_the_same_checks_apply_with_auth_on() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = HostPolicy::for_bind(
        "127.0.0.1:8080".parse().unwrap(),
        vec!["jobs.internal:8443".into()],
    );
    let router = router(dir.path(), Some(budgeted(None, None)), hosts).await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = answer(
        &router,
        put_workflow(&[
            ("host", "jobs.internal:8443"),
            ("origin", "https://jobs.internal:8443"),
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (headers, expected) in [
        (
            vec![
                ("host", "jobs.internal:8443"),
                ("content-type", "text/plain"),
            ],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            vec![
                ("host", "jobs.internal:9999"),
                ("content-type", "application/json"),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            vec![
                ("host", "jobs.internal:8443"),
                ("content-type", "application/json"),
                ("origin", "null"),
            ],
            StatusCode::FORBIDDEN,
        ),
    ] {
        let mut with_token = headers.clone();
        with_token.push(("authorization", &bearer));
        let (status, _, body) = answer(&router, put_workflow(&with_token)).await;
        assert_eq!(status, expected, "{headers:?}: {body}");
    }
}

#[tokio::test]
async fn a_request_budget_holds_under_fifty_concurrent_callers() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), Some(budgeted(Some(5), None)), loopback()).await;
    let started = Instant::now();
    let calls = (0..50).map(|_| {
        let router = router.clone();
        tokio::spawn(async move {
            let request = Request::post("/v1/actions/list-workflows")
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::from("{}"))
                .unwrap();
            answer(&router, request).await
        })
    });
    let answers: Vec<_> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.expect("the call does not panic"))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = answers
        .iter()
        .filter(|(s, _, _)| *s == StatusCode::OK)
        .count();
    // A bucket of 5 refills one request every 12 s: however slow this machine, no more
    // than that got through.
    let ceiling = 5 + (elapsed / 12.0).ceil() as usize;
    assert!(
        (5..=ceiling).contains(&admitted),
        "{admitted} admitted in {elapsed:.1} s"
    );
    for (status, headers, body) in answers.iter().filter(|(s, _, _)| *s != StatusCode::OK) {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["code"], "resource_exhausted");
        assert!(
            body["message"].as_str().unwrap().contains("'budgeted-ci'"),
            "{body}"
        );
        let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=12).contains(&retry_after), "Retry-After {retry_after}");
    }
}

#[tokio::test]
async fn a_body_over_the_token_s_budget_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let router = router(dir.path(), Some(budgeted(None, Some(256))), loopback()).await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, headers, body) = answer(
        &router,
        put_workflow(&[
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "resource_exhausted");
    assert!(
        body["message"].as_str().unwrap().contains("max_body_bytes"),
        "{body}"
    );
    assert!(
        !headers.contains_key("retry-after"),
        "a smaller body, not time, helps"
    );

    // A streamed body (no Content-Length) is cut off at the budget as well.
    let chunks = [vec![b' '; 200], vec![b' '; 200], b"{}".to_vec()];
    let chunks = futures_util::stream::iter(chunks.map(Ok::<_, std::io::Error>));
    let request = Request::post("/v1/actions/list-workflows")
        .header("content-type", "application/json")
        .header("authorization", &bearer)
        .body(Body::from_stream(chunks))
        .unwrap();
    let (status, _, body) = answer(&router, request).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(stored(dir.path()), 0, "nothing was written");

    let small = Request::post("/v1/actions/list-workflows")
        .header("content-type", "application/json")
        .header("authorization", &bearer)
        .body(Body::from("{}"))
        .unwrap();
    let (status, _, body) = answer(&router, small).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
