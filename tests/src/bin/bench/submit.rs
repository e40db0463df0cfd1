//! `submit`: submissions over real HTTP from 32 concurrent clients, one job per call
//! (`submit-workflow`, with the envelope inline and by a stored workflow's name) and
//! 1,000 per call (`submit-workflows`). Every job row stores the whole snapshot either
//! way; by name, the call itself is small.

use std::sync::Arc;
use std::time::Instant;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::JobsNode;
use serde_json::{Value, json};
use workflow::testkit::FixtureServer;

use crate::Size;
use crate::report::{Report, Target, figure};
use crate::setup::{node_config, tokenize_chain};

const CLIENTS: usize = 32;

pub async fn run(size: Size) -> Report {
    let (singles, batches, batch) = match size {
        Size::Tiny => (64, 2, 50),
        Size::Full => (6_400, 20, 1_000),
    };
    let server = FixtureServer::start().await;
    let workflow = tokenize_chain(&server.target(), 1);
    let single_rate = submit_rate(&workflow, singles, 1, Naming::Inline).await;
    let by_name_rate = submit_rate(&workflow, singles, 1, Naming::Stored).await;
    let batched_rate = submit_rate(&workflow, batches * batch, batch, Naming::Inline).await;
    Report {
        scenario: "submit",
        params: json!({ "clients": CLIENTS, "single_submissions": singles, "batches": batches, "batch_size": batch }),
        figures: vec![
            figure("submit-workflow, 32 clients", single_rate, "jobs/s")
                .target(Target::AtLeast(3_000.0)),
            figure(
                "submit-workflow by stored name, 32 clients",
                by_name_rate,
                "jobs/s",
            ),
            figure(
                format!("submit-workflows, {batch} per call"),
                batched_rate,
                "jobs/s",
            )
            .target(Target::AtLeast(15_000.0)),
        ],
    }
}

/// How a call names its workflow.
#[derive(Clone, Copy, PartialEq)]
enum Naming {
    /// The whole envelope in the call.
    Inline,
    /// Its name, the envelope stored with `put-workflow` first.
    Stored,
}

/// `jobs` submissions of `workflow` by 32 clients over HTTP, `per_call` per request
/// (1: `submit-workflow`; more: `submit-workflows`): jobs/s.
async fn submit_rate(workflow: &Value, jobs: usize, per_call: usize, naming: Naming) -> f64 {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(node_config(&db, "submit", 0)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("the address");
    let serving = tokio::spawn(axum::serve(listener, node.router.clone()).into_future());
    let http = reqwest::Client::new();
    // Compile the workflow once before the clock starts, as a warm node would have.
    let warm = json!({ "workflow": workflow, "input": { "text": "warm-up" } });
    send(&http, address, "submit-workflow", warm.to_string()).await;

    let calls = jobs / per_call;
    // The envelope is serialised once: a real client runs on another machine, and
    // this one's CPU is the node's and PostgreSQL's.
    let envelope = Arc::new(match naming {
        Naming::Inline => format!(r#""workflow":{workflow}"#),
        Naming::Stored => {
            let body = json!({ "workflow": workflow });
            send(&http, address, "put-workflow", body.to_string()).await;
            format!(r#""workflowName":{}"#, workflow["name"])
        }
    });
    let started = Instant::now();
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (http, envelope) = (http.clone(), envelope.clone());
        clients.push(tokio::spawn(async move {
            for call in (client..calls).step_by(CLIENTS) {
                let input = |i: usize| json!({ "text": format!("job {call}/{i}") });
                if per_call == 1 {
                    let body = format!(r#"{{{envelope},"input":{}}}"#, input(0));
                    send(&http, address, "submit-workflow", body).await;
                } else {
                    // The batch names its workflow once; each item is its input.
                    let items: Vec<Value> = (0..per_call)
                        .map(|i| json!({ "input": input(i) }))
                        .collect();
                    let body = format!(r#"{{{envelope},"submissions":{}}}"#, Value::Array(items));
                    send(&http, address, "submit-workflows", body).await;
                }
            }
        }));
    }
    for client in clients {
        client.await.expect("a client");
    }
    let rate = (calls * per_call) as f64 / started.elapsed().as_secs_f64();
    serving.abort();
    node.stop().await;
    rate
}

async fn send(http: &reqwest::Client, address: std::net::SocketAddr, verb: &str, body: String) {
    let response = http
        .post(format!("http://{address}/v1/actions/{verb}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{verb}: {e}"));
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or_default();
    assert!(status.is_success(), "{verb} answered {status}: {answer}");
}
