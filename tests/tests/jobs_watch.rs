//! Seeing jobs without polling: a job's events as Server-Sent Events (in order, from
//! the outbox, resumable with `Last-Event-ID`, many watchers on one listener),
//! `get-job` with `waitMs`, and the health checks. Real PostgreSQL, real fixture
//! servers, the node's real router.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, eventually, http_get as get, test_config};
use registry_stub::auth::{AuthConfig, TokenConfig};
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow::testkit::{FixtureServer, three_step_workflow, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

/// One Server-Sent Event.
#[derive(Debug, Clone)]
struct SseEvent {
    id: String,
    event: String,
    data: Value,
}

/// A `GET /v1/jobs/{jobId}/events` stream, read event by event.
struct SseStream {
    body: Body,
    buffer: String,
}

impl SseStream {
    /// Opens the stream; the status, and the stream when it is 200 (the error body
    /// otherwise).
    async fn open(
        router: &Router,
        job_id: &str,
        last_event_id: Option<&str>,
        token: Option<&str>,
    ) -> Result<SseStream, (StatusCode, Value)> {
        let mut request = Request::get(format!("/v1/jobs/{job_id}/events"));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        if status != StatusCode::OK {
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            return Err((status, serde_json::from_slice(&bytes).unwrap_or_default()));
        }
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Ok(SseStream {
            body: response.into_body(),
            buffer: String::new(),
        })
    }

    /// The next event, or `None` when the stream ended.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if event.is_empty() {
                    continue; // a keep-alive comment
                }
                let data = serde_json::from_str(&data).expect("data is JSON");
                return Some(SseEvent { id, event, data });
            }
            let frame = tokio::time::timeout(WAIT, self.body.frame())
                .await
                .expect("the stream stalled")?
                .expect("a frame");
            if let Ok(bytes) = frame.into_data() {
                self.buffer.push_str(std::str::from_utf8(&bytes).unwrap());
            }
        }
    }

    /// Every event until the stream ends.
    async fn all(mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

fn types(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}

/// Submits the two-step workflow through `node` under the caller's own `job_id` (a
/// watcher may be waiting for it already).
async fn submit_as(node: &JobsNode, server: &FixtureServer, job_id: &str, text: &str) {
    node.ok(
        "submit-workflow",
        json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": text }, "jobId": job_id }),
    )
    .await;
}

/// `GET path`: the status and the JSON answer.

#[tokio::test]
async fn a_watcher_that_subscribes_before_submitting_gets_every_event_in_order_and_can_resume() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = uuid::Uuid::now_v7().to_string();

    let stream = SseStream::open(&node.router, &job_id, None, None)
        .await
        .unwrap();
    submit_as(&node, &server, &job_id, "a").await;
    let events = stream.all().await;
    assert_eq!(
        types(&events),
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );
    let stored: Vec<String> = node
        .store
        .job_events(uuid::Uuid::parse_str(&job_id).unwrap())
        .await
        .unwrap()
        .iter()
        .map(|row| row.event_id.to_string())
        .collect();
    let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        ids, stored,
        "each SSE id is its event's id, in outbox order"
    );
    for event in &events {
        assert_eq!(event.data["jobId"], job_id);
        assert_eq!(event.data["eventId"], event.id);
    }
    assert_eq!(events[3].data["detail"]["status"], "COMPLETED");

    // Resuming after the first checkpoint: only what follows, then the end.
    let resumed = SseStream::open(&node.router, &job_id, Some(&events[1].id), None)
        .await
        .unwrap()
        .all()
        .await;
    assert_eq!(types(&resumed), ["STEP_CHECKPOINT", "COMPLETED"]);
    assert_eq!(resumed[0].id, events[2].id);
    // Resuming after the terminal event: nothing follows, and 204 tells a browser's
    // EventSource to stop reconnecting.
    let (status, _) = SseStream::open(&node.router, &job_id, Some(&events[3].id), None)
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);

    // Hostile input: a malformed job id or Last-Event-ID, an event of another job.
    let (status, error) = SseStream::open(&node.router, "not-a-uuid", None, None)
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["message"].as_str().unwrap().starts_with("jobId:"),
        "{error}"
    );
    for last in ["42", "  ", "{}"] {
        let (status, error) = SseStream::open(&node.router, &job_id, Some(last), None)
            .await
            .err()
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .starts_with("Last-Event-ID:")
        );
    }
    // An id the job does not have (retention pruned it, say) resumes the job's
    // story from what is kept, after a `resumed` event saying so.
    let stranger = uuid::Uuid::now_v7().to_string();
    let resumed = SseStream::open(&node.router, &job_id, Some(&stranger), None)
        .await
        .unwrap()
        .all()
        .await;
    assert_eq!(
        types(&resumed),
        [
            "resumed",
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );
    assert_eq!(resumed[0].id, "", "the resumed event carries no id");
    assert_eq!(resumed[0].data["resumedAfter"], stranger);
    // A job that does not exist has no events to resume after.
    let nobody = uuid::Uuid::now_v7().to_string();
    let (status, error) = SseStream::open(&node.router, &nobody, Some(&stranger), None)
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{error}"
    );
    node.stop().await;
}

/// A WAITING job's delivered events pruned by retention (`published_events_ms`): a
/// watcher reconnecting with its last id gets a `resumed` event and then the rest of
/// the job's story, to its COMPLETED. Before, it was answered 400 (`has no event`),
/// which a browser's EventSource and the console take as final.
#[tokio::test]
async fn a_watcher_resuming_from_a_pruned_event_gets_the_rest_of_the_story() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = node
        .submit(
            &workflow::testkit::three_step_workflow(&server.target()),
            json!({ "text": "a" }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let mut stream = SseStream::open(&node.router, &job_id, None, None)
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(stream.next().await.unwrap());
    }
    assert_eq!(types(&seen), ["ACCEPTED", "STEP_CHECKPOINT", "WAITING"]);
    drop(stream);
    // Delivered long ago, then pruned.
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run_events_outbox SET status = 'PUBLISHED', published_at = now() - interval '2 days'",
            &[],
        )
        .await
        .unwrap();
    let pruned = node
        .store
        .prune(
            &[],
            Some(Duration::from_secs(86_400)),
            jobs_role::store::EventsOut::Published,
            100,
        )
        .await
        .unwrap();
    assert_eq!(pruned.published_events, 3);

    let mut resumed = SseStream::open(&node.router, &job_id, Some(&seen[2].id), None)
        .await
        .expect("a pruned Last-Event-ID resumes");
    let first = resumed.next().await.unwrap();
    assert_eq!(first.event, "resumed");
    assert_eq!(first.data["resumedAfter"], seen[2].id);
    node.ok(
        "complete-step",
        json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "ok" } }),
    )
    .await;
    let rest = resumed.all().await;
    assert_eq!(
        types(&rest),
        ["STEP_CHECKPOINT", "STEP_CHECKPOINT", "COMPLETED"],
        "the rest of the job's story"
    );
    node.stop().await;
}

#[tokio::test]
async fn two_hundred_watchers_share_one_database_listener() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "busy", 2);
    config.max_watchers = 200;
    let node = JobsNode::start(config).await;
    // With the Kafka lanes off nobody needs the outbox channel until someone watches:
    // no LISTEN on it (every notifying commit would signal it), once the node's other
    // listener shows its tasks are up.
    let listening = |channel: &'static str| {
        let db = &db;
        async move {
            let count: i64 = db
                .connect()
                .await
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query = $2",
                    &[&db.name(), &format!("LISTEN {channel}")],
                )
                .await
                .unwrap()
                .get(0);
            count
        }
    };
    eventually("the node's wake-up listener", WAIT, || async {
        listening("protomolt_jobs_queued").await == 1
    })
    .await;
    assert_eq!(
        listening("protomolt_jobs_outbox").await,
        0,
        "nobody watches yet"
    );
    let job_id = uuid::Uuid::now_v7().to_string();
    let mut streams = Vec::new();
    for _ in 0..200 {
        streams.push(
            SseStream::open(&node.router, &job_id, None, None)
                .await
                .unwrap(),
        );
    }
    // Past the bound: refused, not queued.
    let (status, error) = SseStream::open(&node.router, &job_id, None, None)
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{error}");
    eventually(
        "one LISTEN connection for all 200 watchers",
        WAIT,
        || async { listening("protomolt_jobs_outbox").await == 1 },
    )
    .await;

    submit_as(&node, &server, &job_id, "a").await;
    let all = futures_util::future::join_all(streams.into_iter().map(SseStream::all)).await;
    for events in all {
        assert_eq!(
            types(&events),
            [
                "ACCEPTED",
                "STEP_CHECKPOINT",
                "STEP_CHECKPOINT",
                "COMPLETED"
            ]
        );
    }
    // Every stream ended, so every watcher is gone: a new one is served.
    assert!(
        SseStream::open(&node.router, &job_id, None, None)
            .await
            .is_ok()
    );
    node.stop().await;
}

#[tokio::test]
async fn get_job_with_wait_ms_answers_when_the_job_parks_or_finishes_or_the_time_is_up() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let queued = idle
        .submit(&two_step_workflow(&server.target()), json!({ "text": "a" }))
        .await;
    let started = Instant::now();
    let answer = idle
        .ok("get-job", json!({ "jobId": queued, "waitMs": 300 }))
        .await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(answer["job"]["status"], "QUEUED", "the time was up first");

    let busy = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let parked = busy
        .submit(
            &three_step_workflow(&server.target()),
            json!({ "text": "b" }),
        )
        .await;
    let answer = busy
        .ok("get-job", json!({ "jobId": parked, "waitMs": 30_000 }))
        .await;
    assert_eq!(answer["job"]["status"], "WAITING", "{answer}");
    assert_eq!(answer["job"]["outstandingStep"], "review");
    let (pending, done) = tokio::join!(
        busy.ok("get-job", json!({ "jobId": parked, "waitMs": 30_000 })),
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            busy.ok(
                "complete-step",
                json!({ "jobId": parked, "stepName": "review", "response": { "notes": "ok", "score": 2 } }),
            )
            .await
        }
    );
    assert_eq!(done["outcome"], "COMPLETED", "{done}");
    // Already WAITING when asked: answered at once, before the answer landed.
    assert_eq!(pending["job"]["status"], "WAITING");
    let finished = busy
        .ok("get-job", json!({ "jobId": parked, "waitMs": 30_000 }))
        .await;
    assert_eq!(finished["job"]["status"], "COMPLETED", "{finished}");

    let unknown = uuid::Uuid::now_v7().to_string();
    let started = Instant::now();
    let missing = busy
        .ok("get-job", json!({ "jobId": unknown, "waitMs": 300 }))
        .await;
    assert_eq!(missing["ok"], false);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "a job that never comes is waited for until the time is up"
    );
    // A job submitted while the call waits for it is answered once it settles.
    let late = uuid::Uuid::now_v7().to_string();
    let (waited, _) = tokio::join!(
        busy.ok("get-job", json!({ "jobId": late, "waitMs": 30_000 })),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            busy.ok(
                "submit-workflow",
                json!({ "jobId": late, "workflow": three_step_workflow(&server.target()), "input": { "text": "late" } }),
            )
            .await
        }
    );
    assert_eq!(waited["job"]["status"], "WAITING", "{waited}");
    for wait in [json!(60_001), json!(-1), json!("soon")] {
        let (status, error) = busy
            .call("get-job", json!({ "jobId": parked, "waitMs": wait }))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{wait}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains("waitMs"),
            "{error}"
        );
    }
    busy.stop().await;
    idle.stop().await;
}

#[tokio::test]
async fn health_answers_without_a_token_and_readiness_follows_the_database() {
    let db = TestDatabase::create().await;
    let auth = AuthConfig {
        tokens: vec![
            TokenConfig {
                name: "reader".into(),
                token: "reader-token-0123456789".into(),
                token_sha256: None,
                scopes: vec!["jobs:read".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
            TokenConfig {
                name: "submitter".into(),
                token: "submitter-token-0123456789".into(),
                token_sha256: None,
                scopes: vec!["workflow:run".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            },
        ],
    };
    let node = JobsNode::start_with_auth(test_config(&db.url, "idle", 0), Some(auth)).await;

    assert_eq!(
        get(&node.router, "/healthz").await,
        (StatusCode::OK, json!({ "status": "ok" }))
    );
    let (status, ready) = get(&node.router, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(
        ready,
        json!({ "status": "ready", "checks": { "jobs/database": "ok" } })
    );

    // The events route asks for jobs:read, like get-job.
    let job_id = uuid::Uuid::now_v7().to_string();
    let (status, _) = SseStream::open(&node.router, &job_id, None, None)
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, error) = SseStream::open(
        &node.router,
        &job_id,
        None,
        Some("submitter-token-0123456789"),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        error["message"].as_str().unwrap().contains("jobs:read"),
        "{error}"
    );
    assert!(
        SseStream::open(&node.router, &job_id, None, Some("reader-token-0123456789"))
            .await
            .is_ok()
    );

    db.refuse_connections().await;
    // An answer is reused for a second: the next run sees the outage.
    eventually("readiness to notice the outage", WAIT, || async {
        get(&node.router, "/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let (status, not_ready) = get(&node.router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{not_ready}");
    assert_eq!(not_ready["status"], "not ready");
    let why = not_ready["checks"]["jobs/database"].as_str().unwrap();
    assert!(
        why.starts_with("the jobs database does not answer"),
        "{why}"
    );
    assert!(
        !why.contains(db.name()),
        "nothing about the database's name or host: {why}"
    );
    assert_eq!(
        get(&node.router, "/healthz").await.0,
        StatusCode::OK,
        "the process still answers"
    );
    db.allow_connections().await;
    eventually("readiness to come back", WAIT, || async {
        get(&node.router, "/readyz").await.0 == StatusCode::OK
    })
    .await;
    node.stop().await;
}

/// Adds `count` more events to a job's outbox (copies of its ACCEPTED payload), as a
/// long history.
async fn add_events(db: &TestDatabase, job_id: &str, count: i32) {
    db.connect()
        .await
        .execute(
            "INSERT INTO workflow_run_events_outbox (event_id, job_id, event_type, payload)
             SELECT gen_random_uuid(), job_id, 'STEP_CHECKPOINT', payload
               FROM workflow_run_events_outbox, generate_series(1, $2)
              WHERE job_id = $1::text::uuid AND event_type = 'ACCEPTED'",
            &[&job_id, &count],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_stalled_watcher_never_starves_the_others_and_late_watchers_get_the_whole_history() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    // A job with a long history, watched by a client that never reads.
    let long = idle
        .submit(
            &two_step_workflow(&server.target()),
            json!({ "text": "long" }),
        )
        .await;
    add_events(&db, &long, 6_000).await;
    let _stalled = SseStream::open(&idle.router, &long, None, None)
        .await
        .unwrap();
    let _stalled_too = SseStream::open(&idle.router, &long, None, None)
        .await
        .unwrap();

    // Another job's watcher gets its whole lifecycle all the same.
    let busy = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let other = uuid::Uuid::now_v7().to_string();
    let stream = SseStream::open(&idle.router, &other, None, None)
        .await
        .unwrap();
    submit_as(&idle, &server, &other, "b").await;
    assert_eq!(
        types(&stream.all().await),
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );

    // Watchers that join while others follow the job's tail each start at its first
    // event, and a reader drains the long history at once.
    let first = node_first_event(&idle, &long).await;
    let mut late = Vec::new();
    for _ in 0..20 {
        late.push(
            SseStream::open(&idle.router, &long, None, None)
                .await
                .unwrap(),
        );
    }
    add_events(&db, &long, 5).await;
    for mut stream in late {
        assert_eq!(stream.next().await.unwrap().id, first);
    }
    let mut reader = SseStream::open(&idle.router, &long, None, None)
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..6_006 {
        reader.next().await.expect("the whole history");
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a reader gets a long history as fast as it reads, not a channel a second: {:?}",
        started.elapsed()
    );
    busy.stop().await;
    idle.stop().await;
}

async fn node_first_event(node: &JobsNode, job_id: &str) -> String {
    node.store
        .job_events(uuid::Uuid::parse_str(job_id).unwrap())
        .await
        .unwrap()[0]
        .event_id
        .to_string()
}

#[tokio::test]
async fn a_retried_jobs_stream_goes_on_past_its_dead_event() {
    let db = TestDatabase::create().await;
    let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let server = FixtureServer::start_with(workflow::testkit::FixtureOptions {
        embed_unavailable: Some(down.clone()),
        ..workflow::testkit::FixtureOptions::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let answer = node
        .ok(
            "submit-workflow",
            json!({ "workflow": two_step_workflow(&server.target()), "input": { "text": "a" }, "maxAttempts": 1 }),
        )
        .await;
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    node.wait_for_status(&job_id, "DEAD", WAIT).await;
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    node.ok("retry-job", json!({ "jobId": job_id })).await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let events = SseStream::open(&node.router, &job_id, None, None)
        .await
        .unwrap()
        .all()
        .await;
    assert_eq!(
        types(&events),
        [
            "ACCEPTED",
            "STEP_CHECKPOINT",
            "DEAD",
            "RETRIED",
            "STEP_CHECKPOINT",
            "COMPLETED"
        ]
    );
    node.stop().await;
}

#[tokio::test]
async fn streams_and_waits_end_when_the_node_shuts_down_and_waits_past_a_full_hub_are_refused() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "idle", 0);
    config.max_watchers = 3;
    let node = JobsNode::start(config).await;
    let queued = node
        .submit(&two_step_workflow(&server.target()), json!({ "text": "a" }))
        .await;
    // Two slots taken by streams on jobs that do not exist, one by a waiting get-job.
    let first = SseStream::open(&node.router, &uuid::Uuid::now_v7().to_string(), None, None)
        .await
        .unwrap();
    let second = SseStream::open(&node.router, &uuid::Uuid::now_v7().to_string(), None, None)
        .await
        .unwrap();
    let (router, store) = (node.router.clone(), node.store.clone());
    let wait_in_the_last_slot = || {
        let (router, waited) = (router.clone(), queued.clone());
        tokio::spawn(async move {
            protomolt_e2e::jobs::call(
                &router,
                "get-job",
                json!({ "jobId": waited, "waitMs": 60_000 }),
            )
            .await
        })
    };
    let mut waiting = wait_in_the_last_slot();
    // The hub is full once the waiting call registered: a stream is refused (503).
    let deadline = Instant::now() + WAIT;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if waiting.is_finished() {
            // Refused while this loop's own probe held the slot: ask again.
            waiting = wait_in_the_last_slot();
            continue;
        }
        let probe =
            SseStream::open(&node.router, &uuid::Uuid::now_v7().to_string(), None, None).await;
        if matches!(probe, Err((StatusCode::SERVICE_UNAVAILABLE, _))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting get-job never held its slot"
        );
    }
    // Past the bound a waiting get-job is answered at once, never left polling the
    // row on the pool running jobs write through.
    let started = Instant::now();
    let (status, error) = protomolt_e2e::jobs::call(
        &node.router,
        "get-job",
        json!({ "jobId": queued, "waitMs": 60_000 }),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert_eq!(error["code"], "resource_exhausted");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("jobs.max_watchers")
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
    // Without waitMs it is served.
    node.ok("get-job", json!({ "jobId": queued })).await;

    node.stop().await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        (first.all().await, second.all().await)
    })
    .await
    .expect("the streams end with the node");
    assert!(ended.0.is_empty() && ended.1.is_empty());
    let (status, _) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting get-job answers when the node stops")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    drop(store);
}

/// One token cannot take every watcher slot: each holds at most
/// `max_watchers_per_token` (a quarter of `max_watchers` by default), past which its
/// streams and waiting `get-job` calls are answered 429, while another token still
/// watches.
#[tokio::test]
async fn each_token_holds_its_own_share_of_the_watchers() {
    let db = TestDatabase::create().await;
    let reader = |name: &str| TokenConfig {
        name: name.into(),
        token: format!("{name}-token-0123456789"),
        token_sha256: None,
        scopes: vec!["jobs:read".into()],
        requests_per_minute: None,
        max_body_bytes: None,
    };
    let auth = AuthConfig {
        tokens: vec![reader("greedy"), reader("polite")],
    };
    let mut config = test_config(&db.url, "idle", 0);
    config.max_watchers = 8;
    let node = JobsNode::start_with_auth(config, Some(auth)).await;
    let (greedy, polite) = ("greedy-token-0123456789", "polite-token-0123456789");
    let some_job = || uuid::Uuid::now_v7().to_string();
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            SseStream::open(&node.router, &some_job(), None, Some(greedy))
                .await
                .expect("within the share"),
        );
    }
    let (status, error) = SseStream::open(&node.router, &some_job(), None, Some(greedy))
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_watchers_per_token"),
        "{error}"
    );
    let (status, error) = protomolt_e2e::jobs::call_as(
        &node.router,
        Some(greedy),
        "get-job",
        json!({ "jobId": some_job(), "waitMs": 5_000 }),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    // Another token is not held back by the first one's streams.
    let other = SseStream::open(&node.router, &some_job(), None, Some(polite)).await;
    assert!(other.is_ok(), "the other token still watches");
    // A slot given back is the token's again.
    held.pop();
    eventually("the slot to come back", WAIT, || async {
        SseStream::open(&node.router, &some_job(), None, Some(greedy))
            .await
            .is_ok()
    })
    .await;
    node.stop().await;
}
