//! A jobs node for tests: the registry and jobs roles over a fresh database, with
//! small timings, driven through the real actions route.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use jobs_role::store::Store;
use jobs_role::{JobStatus, JobsConfig};
use registry_stub::config::RegistryConfig;
use registry_stub::node::RunningNode;
use registry_stub::{Node, RegistryRole};
use serde_json::Value;
use tower::ServiceExt;

/// Test timings: quick leases, polls, sweeps and backoffs, a few connections.
pub fn test_config(database_url: &str, worker_id: &str, workers: usize) -> JobsConfig {
    JobsConfig {
        database_url: Some(database_url.to_owned()),
        worker_id: worker_id.to_owned(),
        max_in_flight: workers,
        lease_ms: 5_000,
        poll_interval_ms: 200,
        sweep_interval_ms: 100,
        backoff_base_ms: 100,
        shutdown_grace_ms: 2_000,
        max_connections: 6,
        ..JobsConfig::default()
    }
}

/// A running node with the registry and jobs roles.
pub struct JobsNode {
    /// The node (tasks running).
    pub node: RunningNode,
    /// The node's router.
    pub router: Router,
    /// A store over the same database, for assertions.
    pub store: Store,
    _workflows: tempfile::TempDir,
}

impl JobsNode {
    /// Mounts and starts a node with `config`.
    pub async fn start(config: JobsConfig) -> JobsNode {
        Self::start_with_auth(config, None).await
    }

    /// Mounts and starts a node with `config`, requiring the tokens of `auth`.
    pub async fn start_with_auth(
        config: JobsConfig,
        auth: Option<registry_stub::auth::AuthConfig>,
    ) -> JobsNode {
        Self::start_with(
            config,
            auth,
            workflow::outbound::OutboundPolicy::unrestricted(),
        )
        .await
    }

    /// Mounts and starts a node with `config`, the tokens of `auth`, and the outbound
    /// call policy `outbound`.
    pub async fn start_with(
        config: JobsConfig,
        auth: Option<registry_stub::auth::AuthConfig>,
        outbound: workflow::outbound::OutboundPolicy,
    ) -> JobsNode {
        let workflows = tempfile::tempdir().expect("temp dir");
        let url = config.database_url.clone().expect("a database");
        let node = Node::new()
            .with_auth(auth)
            .role(
                RegistryRole::new(RegistryConfig {
                    workflows_dir: workflows.path().to_owned(),
                })
                .with_outbound(outbound),
            )
            .role(jobs_role::JobsModule::new(config))
            .mount()
            .await
            .unwrap_or_else(|e| panic!("the node mounts: {e}"))
            .start();
        let router = node.router();
        let store = Store::connect(&url, 4).await.expect("store");
        JobsNode {
            node,
            router,
            store,
            _workflows: workflows,
        }
    }

    /// Calls a verb; returns the status and the JSON answer.
    pub async fn call(&self, verb: &str, body: Value) -> (StatusCode, Value) {
        call(&self.router, verb, body).await
    }

    /// Calls a verb that must answer 200.
    pub async fn ok(&self, verb: &str, body: Value) -> Value {
        let (status, answer) = self.call(verb, body).await;
        assert_eq!(status, StatusCode::OK, "{verb} answered {status}: {answer}");
        answer
    }

    /// The job's row (snake_case columns).
    pub async fn job(&self, job_id: &str) -> Value {
        let id = uuid::Uuid::parse_str(job_id).expect("a uuid");
        self.store
            .get_job(id)
            .await
            .expect("get_job")
            .expect("the job exists")
    }

    /// Waits until the job exists and reaches `status` (panics with the row after
    /// `timeout`).
    pub async fn wait_for_status(&self, job_id: &str, status: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let id = uuid::Uuid::parse_str(job_id).expect("a uuid");
        loop {
            // The row may not exist yet (a request still on its topic).
            let job = self
                .store
                .get_job(id)
                .await
                .expect("get_job")
                .unwrap_or_default();
            if job["status"] == status {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {job_id} never reached {status}: {job:#}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Submits `workflow` with `input` through the verb; returns the job id.
    pub async fn submit(&self, workflow: &Value, input: Value) -> String {
        let answer = self
            .ok(
                "submit-workflow",
                serde_json::json!({ "workflow": workflow, "input": input }),
            )
            .await;
        answer["jobId"].as_str().expect("a job id").to_owned()
    }

    /// Waits until `count` jobs are in `status`.
    pub async fn wait_for_count(&self, status: JobStatus, count: i64, timeout: Duration) {
        let what = format!("{count} jobs to be {status}");
        eventually(&what, timeout, || async {
            self.store.count_jobs(status).await.expect("count") == count
        })
        .await;
    }

    /// Stops the node's tasks.
    pub async fn stop(self) {
        self.node.shutdown(Duration::from_secs(10)).await;
    }
}

/// A worker of its own over `store` (no node around it), for tests that crash one by
/// aborting its task and start another beside it.
pub fn bare_worker(
    store: &Store,
    config: &JobsConfig,
) -> std::sync::Arc<jobs_role::worker::Worker> {
    jobs_role::worker::Worker::new(
        store.clone(),
        std::sync::Arc::new(workflow::Runner::new()),
        config.clone(),
        std::sync::Arc::new(tokio::sync::Notify::new()),
        std::sync::Arc::default(),
    )
}

/// Fixture servers started with `options`, a node that runs no jobs, and one two-step
/// job submitted through it (its id): the start of every crash test.
pub async fn one_queued_job(
    database_url: &str,
    options: workflow::testkit::FixtureOptions,
    text: &str,
) -> (workflow::testkit::FixtureServer, JobsNode, String) {
    let server = workflow::testkit::FixtureServer::start_with(options).await;
    let idle = JobsNode::start(test_config(database_url, "idle", 0)).await;
    let job_id = idle
        .submit(
            &workflow::testkit::two_step_workflow(&server.target()),
            serde_json::json!({ "text": text }),
        )
        .await;
    (server, idle, job_id)
}

/// Queues `count` jobs of `workflow` straight into the store (inputs `job 0`,
/// `job 1`, ...), as a backlog for a fleet to work through.
pub async fn queue_jobs(store: &Store, workflow: &Value, count: usize) {
    for i in 0..count {
        let job = jobs_role::store::NewJob {
            job_id: uuid::Uuid::now_v7(),
            workflow_name: workflow["name"].as_str().unwrap_or("workflow").to_owned(),
            definition: std::sync::Arc::new(workflow.clone()),
            definition_digest: None,
            priority: jobs_role::store::DEFAULT_PRIORITY,
            run_after: Default::default(),
            input: serde_json::json!({ "text": format!("job {i}") }),
            max_attempts: 3,
            trace_context: None,
            by_name: false,
            concurrency: Vec::new(),
            dedupe: None,
            schedule: None,
            metadata: None,
        };
        store.insert_job(&job).await.expect("insert");
    }
}

/// GETs `path` on `router` (health, readiness); the status and the JSON answer.
pub async fn http_get(router: &Router, path: &str) -> (StatusCode, Value) {
    let (status, text) = http_get_text(router, path).await;
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// GETs `path` on `router` (`/metrics`); the status and the text.
pub async fn http_get_text(router: &Router, path: &str) -> (StatusCode, String) {
    send(
        router,
        Request::get(path).body(Body::empty()).expect("request"),
    )
    .await
}

/// The detail of an operator's event (RETRIED, CANCELLED: every value a string) as a
/// JSON object.
pub fn string_detail(event: &jobs_proto::v1::WorkflowRunEvent) -> Value {
    let fields = &event.detail.as_ref().expect("a detail").fields;
    fields
        .iter()
        .map(|(key, value)| match &value.kind {
            Some(prost_types::value::Kind::StringValue(text)) => {
                (key.clone(), Value::String(text.clone()))
            }
            other => panic!("detail.{key} is {other:?}"),
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// GETs `path` on `router` with a bearer `token`; the status and the text.
pub async fn http_get_as(router: &Router, path: &str, token: &str) -> (StatusCode, String) {
    send(
        router,
        Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .expect("request"),
    )
    .await
}

/// POSTs `body` as JSON to `path` on `router` (an admin route); the status and the
/// JSON answer.
pub async fn http_post(router: &Router, path: &str, body: &Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let (status, text) = send(router, request).await;
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// Sends `request` to `router`; the status and the body as text.
async fn send(router: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("infallible router");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Calls a verb on `router`.
pub async fn call(router: &Router, verb: &str, body: Value) -> (StatusCode, Value) {
    call_as(router, None, verb, body).await
}

/// Calls a verb on `router` with a bearer `token`, if given.
pub async fn call_as(
    router: &Router,
    token: Option<&str>,
    verb: &str,
    body: Value,
) -> (StatusCode, Value) {
    let mut request =
        Request::post(format!("/v1/actions/{verb}")).header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request.body(Body::from(body.to_string())).expect("request");
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("infallible router");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, serde_json::from_slice(&bytes).expect("JSON answer"))
}

/// Polls `check` every 20 ms until it holds, or panics with `what` after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Files `definition` as a workflow snapshot (migration V21) as an operator's SQL
/// would, under the digest of its jsonb text, and answers that digest: for backlogs
/// written straight into the table, whose rows then name it.
pub async fn file_snapshot(client: &tokio_postgres::Client, definition: &Value) -> String {
    client
        .query_one(
            "WITH filed AS (
                 INSERT INTO workflow_snapshot (definition) VALUES ($1)
                 ON CONFLICT (digest) DO NOTHING)
             SELECT encode(sha256(convert_to($1::jsonb::text, 'UTF8')), 'hex')",
            &[definition],
        )
        .await
        .expect("filing the snapshot")
        .get(0)
}

/// Fixture servers whose embedder takes 5 ms and echoes the ids, a node that runs no
/// jobs, and one job submitted through it mapping over `elements` distinct ids,
/// `max_parallel` at once (its id): the start of every test that kills a worker
/// mid-map.
pub async fn queued_map_job(
    database_url: &str,
    elements: usize,
    max_parallel: u64,
) -> (workflow::testkit::FixtureServer, JobsNode, String) {
    let server = workflow::testkit::FixtureServer::start_with(workflow::testkit::FixtureOptions {
        embed_delay: Some(Duration::from_millis(5)),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let idle = JobsNode::start(test_config(database_url, "idle", 0)).await;
    let job_id = idle
        .submit(
            &workflow::testkit::map_workflow(&server.target(), max_parallel),
            serde_json::json!({ "text": workflow::testkit::distinct_text(elements) }),
        )
        .await;
    (server, idle, job_id)
}

/// How many elements of map steps the database holds, of one job or (`None`) all.
pub async fn stored_elements(client: &tokio_postgres::Client, job_id: Option<&str>) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM workflow_run_items WHERE $1::text IS NULL OR job_id = $1::text::uuid",
            &[&job_id],
        )
        .await
        .expect("the stored elements")
        .get(0)
}

/// Three nodes (`node-a`, `node-b`, `node-c`) of `workers` slots each on the
/// database at `url`, eight connections each, each config changed by `adjust`.
pub async fn three_nodes(
    url: &str,
    workers: usize,
    adjust: impl Fn(&mut JobsConfig),
) -> Vec<JobsNode> {
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b", "node-c"] {
        let mut config = test_config(url, name, workers);
        config.max_connections = 8;
        adjust(&mut config);
        nodes.push(JobsNode::start(config).await);
    }
    nodes
}

/// Submits one job of `workflow` per input text through `submit-workflows`, in calls
/// of 1,000, each accepted; answers the job ids in order.
pub async fn submit_texts(node: &JobsNode, workflow: &Value, texts: &[String]) -> Vec<String> {
    let mut ids = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(1000) {
        let submissions: Vec<Value> = chunk
            .iter()
            .map(|text| serde_json::json!({ "input": { "text": text } }))
            .collect();
        let answer = node
            .ok(
                "submit-workflows",
                serde_json::json!({ "workflow": workflow, "submissions": submissions }),
            )
            .await;
        for item in answer["answers"].as_array().expect("answers") {
            assert_eq!(item["ok"], true, "every submission is accepted: {item}");
            ids.push(item["jobId"].as_str().expect("an id").to_owned());
        }
    }
    ids
}
