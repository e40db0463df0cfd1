//! `protomolt-node demo`: the engine's fixture gRPC services, the fixture workflows
//! stored, one synchronous run of the example workflow, then (with a database: the
//! `[jobs]` config or `DATABASE_URL`) the three-step workflow as a job: it parks on
//! its review step, the demo answers it with `complete-step`, and prints the finished
//! row. Then the node keeps serving (unless `--once`) with `curl` lines to try.

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

async fn wait_for_status(
    router: &axum::Router,
    job_id: &str,
    status: &str,
) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let answer = call(router, "get-job", json!({ "jobId": job_id })).await?;
        if answer["job"]["status"] == status {
            return Ok(answer);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("job {job_id} did not reach {status}: {answer}"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn run_job_demo(router: &axum::Router) -> Result<(), String> {
    let input = json!({ "text": "hello world" });
    let submitted = call(
        router,
        "submit-workflow",
        json!({ "workflowName": "review-text", "input": input }),
    )
    .await?;
    let job_id = submitted["jobId"].as_str().unwrap_or_default().to_owned();
    println!("\nsubmit-workflow review-text {input}: job {job_id}");
    let parked = wait_for_status(router, &job_id, "WAITING").await?;
    println!(
        "the job parked on step '{}', waiting for a human to approve the request {}",
        parked["job"]["outstandingStep"]
            .as_str()
            .unwrap_or_default(),
        parked["job"]["pendingRequest"]
    );
    let review = json!({ "notes": "looks right", "score": 9 });
    let completed = call(
        router,
        "complete-step",
        json!({ "jobId": job_id, "stepName": "review", "response": review }),
    )
    .await?;
    println!("complete-step review {review}: {completed}");
    wait_for_status(router, &job_id, "COMPLETED").await?;
    let finished = call(
        router,
        "get-job",
        json!({ "jobId": job_id, "include": ["definition"] }),
    )
    .await?;
    let mut row = finished["job"].clone();
    // The descriptor set is long and says nothing to a reader: show its size instead.
    if let Some(schema) = row.pointer_mut("/workflowDefinition/schema/descriptorSetBase64") {
        *schema = json!(format!(
            "<{} base64 characters of descriptors>",
            schema.as_str().map_or(0, str::len)
        ));
    }
    println!(
        "the finished row:\n{}",
        serde_json::to_string_pretty(&row).unwrap_or_default()
    );
    Ok(())
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
    if config.jobs.database_url.is_none() {
        config.jobs.database_url = std::env::var("DATABASE_URL").ok();
    }
    let jobs = config.jobs.database_url.is_some();
    if config.jobs.kafka_bootstrap.is_none() {
        config.jobs.kafka_bootstrap = std::env::var("KAFKA_BOOTSTRAP").ok();
    }
    match &config.jobs.kafka_bootstrap {
        Some(bootstrap) if jobs => println!(
            "Kafka lanes on: events go to {} on {bootstrap}",
            config.jobs.events_topic
        ),
        _ if jobs => {
            println!("Kafka lanes off (no broker): events wait in the outbox; get-job lists them")
        }
        _ => {}
    }
    if jobs {
        if config.jobs.worker_id.trim().is_empty() {
            config.jobs.worker_id = "demo-node".into();
        }
        if !config.node.roles.iter().any(|r| r == "jobs") {
            config.node.roles.push("jobs".into());
        }
    } else {
        println!(
            "no database (set DATABASE_URL or [jobs].database_url): the jobs part of the demo is skipped"
        );
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

    if jobs {
        run_job_demo(&router).await?;
    }

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
    println!("\nthe node serves {url} (Ctrl-C stops it).");
    if jobs && config.jobs.console {
        println!(
            "Open {url}/console in a browser: the fleet, each job's story, the review inbox \
             (submit review-text from Workflows, then answer its review step in a generated form)."
        );
    }
    println!("Try:");
    println!("  curl -s {url}/v1/actions | head -c 600; echo");
    println!("  curl -s {url}/v1/actions/list-workflows --json '{{}}'");
    println!(
        "  curl -s {url}/v1/actions/run-workflow --json '{{\"workflowName\":\"embed-text\",\"input\":{{\"text\":\"hi\"}}}}'"
    );
    println!(
        "  curl -s {url}/v1/actions/run-workflow --json '{{\"workflowName\":\"review-text\",\"input\":{{\"text\":\"hi\"}}}}'"
    );
    println!("  curl -s {url}/v1/actions/parse-text --json '{{\"text\":\"split these words\"}}'");
    node.serve(listener, shutdown_signal(), config.node.shutdown_grace())
        .await
        .map_err(|e| format!("serving: {e}"))
}
