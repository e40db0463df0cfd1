//! The optional schema registry: the contract is registered under `<topic>-value` at
//! start-up and records use the Confluent wire format, against a small in-test HTTP
//! server implementing the two registry calls involved (register, fetch by id). Like a
//! real registry, the stub refuses a schema whose imports it cannot resolve: anything
//! but the `google/protobuf` well-known types must come as a reference.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use jobs_proto::WireMessage;
use jobs_proto::v1::{WorkflowRunEvent, WorkflowRunRequest};
use prost::Message as _;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use protomolt_e2e::kafka::{produce, producer, read_until, with_lanes};
use registry_stub::config::RegistryConfig;
use registry_stub::{Node, RegistryRole};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, two_step_workflow};

const SCHEMA_ID: u32 = 7;

#[derive(Clone, Default)]
struct StubRegistry {
    subjects: Arc<Mutex<HashMap<String, String>>>,
    broken: bool,
}

async fn register(
    State(stub): State<StubRegistry>,
    Path(subject): Path<String>,
    body: axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    if stub.broken {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({ "error_code": 50001, "message": "store down" })),
        );
    }
    assert_eq!(body["schemaType"], "PROTOBUF");
    let schema = body["schema"].as_str().unwrap_or_default().to_owned();
    let references: Vec<&str> = body["references"]
        .as_array()
        .map(|refs| refs.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    for line in schema.lines() {
        let Some(import) = line.trim().strip_prefix("import \"") else {
            continue;
        };
        let import = import.trim_end_matches("\";");
        if !import.starts_with("google/protobuf/") && !references.contains(&import) {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({
                    "error_code": 42201,
                    "message": format!("Invalid schema: could not resolve import {import} (no reference)"),
                })),
            );
        }
    }
    stub.subjects.lock().unwrap().insert(subject, schema);
    (StatusCode::OK, axum::Json(json!({ "id": SCHEMA_ID })))
}

async fn schema_by_id(
    State(stub): State<StubRegistry>,
    Path(id): Path<u32>,
) -> (StatusCode, axum::Json<Value>) {
    let subjects = stub.subjects.lock().unwrap();
    match (id == SCHEMA_ID)
        .then(|| subjects.values().next().cloned())
        .flatten()
    {
        Some(schema) => (
            StatusCode::OK,
            axum::Json(json!({ "schemaType": "PROTOBUF", "schema": schema })),
        ),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "error_code": 40403, "message": "Schema not found" })),
        ),
    }
}

async fn start_stub(stub: StubRegistry) -> String {
    let app = Router::new()
        .route("/subjects/{subject}/versions", post(register))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .with_state(stub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn records_use_the_confluent_wire_format_with_the_registered_schema() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let stub = StubRegistry::default();
    let registry_url = start_stub(stub.clone()).await;
    let mut config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    config.schema_registry_url = Some(registry_url.clone());
    let (events, requests) = (config.events_topic.clone(), config.requests_topic.clone());
    let node = JobsNode::start(config).await;

    let registered = stub.subjects.lock().unwrap().clone();
    let schema = registered
        .get(&format!("{events}-value"))
        .expect("registered under <topic>-value");
    assert!(schema.contains("message WorkflowRunEvent"));
    assert!(
        !schema.contains("buf/validate"),
        "no import the registry cannot resolve"
    );

    // A framed request is understood by the request consumer too.
    node.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let request = WorkflowRunRequest {
        job_id: job_id.clone(),
        workflow_name: "embed-text".into(),
        input: None,
        ..Default::default()
    };
    let framed_request = jobs_proto::wire::frame(SCHEMA_ID, &request.encode_to_vec());
    produce(&producer(), &requests, &job_id, &framed_request).await;
    node.wait_for_status(&job_id, "COMPLETED", Duration::from_secs(60))
        .await;

    let records = read_until(&events, Duration::from_secs(60), |r| r.len() >= 4).await;
    for record in &records {
        assert_eq!(
            &record.payload[..5],
            &[0, 0, 0, 0, SCHEMA_ID as u8],
            "magic byte and schema id"
        );
        let (id, payload) = jobs_proto::wire::unframe(&record.payload).expect("unframes");
        assert_eq!(id, Some(SCHEMA_ID));
        let event = WorkflowRunEvent::decode_validated(payload).expect("a valid event");
        assert_eq!(event.job_id, job_id);
    }
    // A consumer resolves the id to the schema it was written with.
    let fetched: Value = reqwest::get(format!("{registry_url}/schemas/ids/{SCHEMA_ID}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fetched["schema"].as_str(), Some(schema.as_str()));
    node.stop().await;
}

#[tokio::test]
async fn a_registry_that_refuses_the_schema_stops_the_node_from_booting() {
    let db = TestDatabase::create().await;
    let registry_url = start_stub(StubRegistry {
        broken: true,
        ..StubRegistry::default()
    })
    .await;
    let mut config = with_lanes(test_config(&db.url, "node-a", 1)).await;
    config.schema_registry_url = Some(registry_url);
    let dir = tempfile::tempdir().unwrap();
    let err = Node::new()
        .role(RegistryRole::new(RegistryConfig {
            workflows_dir: dir.path().to_owned(),
        }))
        .role(jobs_role::JobsModule::new(config))
        .mount()
        .await
        .err()
        .expect("refused");
    let line = err.to_string();
    assert!(
        line.contains("registering the event schema with jobs.schema_registry_url failed"),
        "{line}"
    );
}
