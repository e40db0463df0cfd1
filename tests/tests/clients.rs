//! The client libraries (issue 36) against a real node: PostgreSQL (through the test
//! kit's fault proxy, so a test can take the database away), the broker (the request
//! and event topics on), a gRPC target, `[auth]` with a token for everything and one
//! with a budget of 60 requests a minute. Each suite runs its own language's test
//! runner: `clients/python` installed with pip and tested with pytest,
//! `clients/typescript` compiled with its pinned `tsc` and tested with `node --test`.
//! And the clients' generated parts (models, verbs, the contract's descriptor set)
//! must equal what the node's document and contract make today:
//! `PROTOMOLT_UPDATE_CLIENTS=1` rewrites them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::post;
use prost::Message as _;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::browser::serve;
use protomolt_e2e::jobs::{JobsNode, call_as, http_get, test_config};
use protomolt_e2e::kafka::with_lanes;
use protomolt_e2e::process::{NO_ENV, clients_python, run_checked};
use protomolt_e2e::proxy::FaultProxy;
use registry_stub::auth::{AuthConfig, TokenConfig};
use serde_json::json;
use workflow::testkit::{FixtureServer, leaf_workflow, three_step_workflow};

const ADMIN: &str = "clients-admin-token-0123456789";
const LIMITED: &str = "clients-limited-token-0123456789";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

fn token(name: &str, secret: &str, requests_per_minute: Option<u32>) -> TokenConfig {
    TokenConfig {
        name: name.into(),
        token: secret.into(),
        token_sha256: None,
        scopes: vec!["*".into()],
        requests_per_minute,
        max_body_bytes: None,
    }
}

/// A node for one suite, and what its tests are told about it.
struct Stage {
    env: Vec<(String, String)>,
    node: JobsNode,
    _db: TestDatabase,
    _server: FixtureServer,
    _proxy: Arc<FaultProxy>,
}

/// `POST /outage?ms=N`: the node's database refused for N ms, from now.
async fn outage(
    State(proxy): State<Arc<FaultProxy>>,
    Query(query): Query<std::collections::HashMap<String, u64>>,
) -> &'static str {
    let length = Duration::from_millis(query.get("ms").copied().unwrap_or(2_000).min(30_000));
    proxy.refuse();
    tokio::spawn(async move {
        tokio::time::sleep(length).await;
        proxy.accept();
    });
    "refusing"
}

async fn stage(name: &str) -> Stage {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let proxy = Arc::new(FaultProxy::postgres_for(&db.url).await);
    let mut config = with_lanes(test_config(&proxy.database_url(&db.url), name, 4)).await;
    config.max_connections = 8;
    let (requests, events) = (config.requests_topic.clone(), config.events_topic.clone());
    let auth = AuthConfig {
        tokens: vec![
            token("admin", ADMIN, None),
            token("limited", LIMITED, Some(60)),
        ],
    };
    let node = JobsNode::start_with_auth(config, Some(auth)).await;
    for workflow in [
        leaf_workflow(&server.target()),
        three_step_workflow(&server.target()),
    ] {
        let (status, answer) = call_as(
            &node.router,
            Some(ADMIN),
            "put-workflow",
            json!({ "workflow": workflow }),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
    }
    let base = serve(node.router.clone()).await;
    let control = serve(
        Router::new()
            .route("/outage", post(outage))
            .with_state(proxy.clone()),
    )
    .await;
    let env = [
        ("PROTOMOLT_URL", base),
        ("PROTOMOLT_TOKEN", ADMIN.to_owned()),
        ("CLIENTS_LIMITED_TOKEN", LIMITED.to_owned()),
        ("CLIENTS_CONTROL_URL", control),
        ("CLIENTS_REQUESTS_TOPIC", requests),
        ("CLIENTS_EVENTS_TOPIC", events),
        ("KAFKA_BOOTSTRAP", protomolt_e2e::kafka_bootstrap()),
        ("PYTHONDONTWRITEBYTECODE", "1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    Stage {
        env,
        node,
        _db: db,
        _server: server,
        _proxy: proxy,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_passes_its_suite_against_a_real_node() {
    let stage = stage("clients-python").await;
    let python = clients_python();
    let mut env = stage.env.clone();
    let said = tokio::task::spawn_blocking(move || {
        let site = tempfile::tempdir().expect("a directory");
        let site_path = site.path().to_str().expect("a UTF-8 path").to_owned();
        let package = repository().join("clients/python");
        // Installed as a user installs it (pip, from the repository's path), then
        // tested as installed.
        run_checked(
            &python,
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                &site_path,
                package.to_str().expect("a UTF-8 path"),
            ],
            &repository(),
            NO_ENV,
        );
        env.push(("PYTHONPATH".into(), site_path));
        run_checked(
            &python,
            &[
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "clients/python/tests",
            ],
            &repository(),
            env,
        )
    })
    .await
    .expect("pytest ran");
    println!("{said}");
    assert!(said.contains(" passed"), "{said}");
    assert!(!said.contains("skipped"), "{said}");
    stage.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_client_passes_its_suite_against_a_real_node() {
    let stage = stage("clients-typescript").await;
    let env = stage.env.clone();
    let said = tokio::task::spawn_blocking(move || {
        let dir = repository().join("clients/typescript");
        let tsc = dir.join("node_modules/typescript/bin/tsc");
        assert!(
            tsc.exists(),
            "{} is missing: ./dev up installs the TypeScript client's pinned tools (npm ci)",
            tsc.display()
        );
        let node = PathBuf::from("node");
        run_checked(
            &node,
            &[tsc.to_str().expect("a UTF-8 path"), "-p", "."],
            &dir,
            NO_ENV,
        );
        run_checked(&node, &["--test", "test/"], &dir, env)
    })
    .await
    .expect("node ran");
    println!("{said}");
    assert!(said.contains("# fail 0"), "{said}");
    stage.node.stop().await;
}

/// The clients' generated files are what the node's document and contract make now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_generated_parts_match_the_node() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "clients-generated", 0)).await;
    let (status, document) = http_get(&node.router, "/v1/openapi.json").await;
    assert_eq!(status, 200, "{document}");
    let update = std::env::var("PROTOMOLT_UPDATE_CLIENTS").is_ok_and(|v| v == "1");

    // The contract the Kafka helper builds its messages from (no source info: the
    // comments are in proto/, and the file stays small).
    let mut contract = prost_types::FileDescriptorSet::decode(jobs_proto::FILE_DESCRIPTOR_SET)
        .expect("the contract decodes");
    for file in &mut contract.file {
        file.source_code_info = None;
    }
    let contract = contract.encode_to_vec();
    let shipped = repository().join("clients/python/protomolt_client/contract.binpb");
    if update {
        std::fs::write(&shipped, &contract).expect("writing the contract");
    }
    assert!(
        std::fs::read(&shipped).is_ok_and(|bytes| bytes == contract),
        "{} differs from the node's contract: PROTOMOLT_UPDATE_CLIENTS=1 cargo test -p protomolt-e2e --test clients generated",
        shipped.display()
    );

    let file = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(
        file.path(),
        serde_json::to_vec_pretty(&document).expect("json"),
    )
    .expect("write");
    let path = file.path().to_str().expect("a UTF-8 path").to_owned();
    let python = clients_python();
    tokio::task::spawn_blocking(move || {
        let generator = repository().join("clients/generate.py");
        let generator = generator.to_str().expect("a UTF-8 path");
        let args: Vec<&str> = if update {
            vec![generator, &path]
        } else {
            vec![generator, &path, "--check"]
        };
        run_checked(&python, &args, &repository(), NO_ENV);
    })
    .await
    .expect("the generator ran");
}
