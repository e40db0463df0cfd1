//! Node hardening, through the real router: concurrent puts of one workflow.

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use registry_stub::config::RegistryConfig;
use registry_stub::{Node, RegistryRole};
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow::testkit::two_step_workflow;

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
