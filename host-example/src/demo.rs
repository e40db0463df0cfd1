//! `protomolt-node demo`: the engine's fixture gRPC services, the fixture workflows
//! stored, one run of the example workflow, then the node keeps serving (unless
//! `--once`) with a few `curl` lines to try.

use axum::body::Body;
use http::Request;
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow::testkit::{FixtureServer, three_step_workflow, two_step_workflow};

use crate::config::HostConfig;
use crate::node::{shutdown_signal, start};

async fn call(router: &axum::Router, verb: &str, body: Value) -> Result<Value, String> {
    let request = Request::post(format!("/v1/actions/{verb}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .map_err(|e| e.to_string())?;
    let response = router
        .clone()
        .oneshot(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let json: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(json)
    } else {
        Err(format!("{verb} answered {status}: {json}"))
    }
}

/// Runs the demo.
pub async fn run(mut config: HostConfig, once: bool) -> Result<(), String> {
    let fixtures = FixtureServer::start().await;
    let target = fixtures.target();
    println!("fixture gRPC services (Tokenizer, Embedder) on {target}");
    config.parse.tokenizer_target = target.clone();
    if !config.node.roles.iter().any(|r| r == "parse") {
        config.node.roles.push("parse".into());
    }
    let node = start(&config).await?;
    let router = node.router();

    for envelope in [two_step_workflow(&target), three_step_workflow(&target)] {
        let stored = call(&router, "put-workflow", json!({ "workflow": envelope })).await?;
        println!("stored workflow {}", stored["name"]);
    }
    let input = json!({ "text": "hello world" });
    println!("\nrun-workflow embed-text {input}:");
    let answer = call(
        &router,
        "run-workflow",
        json!({ "workflowName": "embed-text", "input": input }),
    )
    .await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&answer).unwrap_or_default()
    );

    if once {
        node.shutdown(config.node.shutdown_grace()).await;
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(config.node.bind)
        .await
        .map_err(|e| {
            format!(
                "cannot bind {} (set PROTOMOLT_NODE__BIND to another port): {e}",
                config.node.bind
            )
        })?;
    let url = format!("http://{}", config.node.bind);
    println!("\nthe node serves {url} (Ctrl-C stops it). Try:");
    println!("  curl -s {url}/v1/actions | head -c 600; echo");
    println!("  curl -s -XPOST {url}/v1/actions/list-workflows");
    println!(
        "  curl -s -XPOST {url}/v1/actions/run-workflow -d '{{\"workflowName\":\"embed-text\",\"input\":{{\"text\":\"hi\"}}}}'"
    );
    println!(
        "  curl -s -XPOST {url}/v1/actions/run-workflow -d '{{\"workflowName\":\"review-text\",\"input\":{{\"text\":\"hi\"}}}}'"
    );
    println!(
        "  curl -s -XPOST {url}/v1/actions/parse-text -d '{{\"text\":\"split these words\"}}'"
    );
    node.serve(listener, shutdown_signal(), config.node.shutdown_grace())
        .await
        .map_err(|e| format!("serving: {e}"))
}
