//! `cancel-job`: QUEUED and WAITING jobs are cancelled at once, a RUNNING one is
//! abandoned by its worker (or settled by the sweeper when the worker is gone), and a
//! CANCELLED job is never claimed again. Real PostgreSQL, real fixture servers.

use std::time::Duration;

use jobs_proto::WireMessage;
use jobs_proto::v1::WorkflowRunEvent;
use jobs_role::JobStatus;
use jobs_role::store::{ClaimWrite, Settlement, StepCheckpoint, StoreError};
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, one_queued_job, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, three_step_workflow, two_step_workflow};

const WAIT: Duration = Duration::from_secs(30);

async fn cancel(node: &JobsNode, job_id: &str, reason: &str) -> Value {
    node.ok("cancel-job", json!({ "jobId": job_id, "reason": reason }))
        .await
}

/// The job's events: type names, and the last one decoded.
async fn events(node: &JobsNode, job_id: &str) -> (Vec<String>, WorkflowRunEvent) {
    let rows = node
        .store
        .job_events(uuid::Uuid::parse_str(job_id).unwrap())
        .await
        .unwrap();
    let last = WorkflowRunEvent::decode_validated(&rows.last().unwrap().payload).unwrap();
    (rows.into_iter().map(|row| row.event_type).collect(), last)
}

fn detail(event: &WorkflowRunEvent, key: &str) -> String {
    match &event.detail.as_ref().unwrap().fields[key].kind {
        Some(prost_types::value::Kind::StringValue(text)) => text.clone(),
        other => panic!("detail.{key} is {other:?}"),
    }
}

#[tokio::test]
async fn a_queued_job_is_cancelled_at_once_answered_idempotently_and_never_claimed() {
    let db = TestDatabase::create().await;
    let (server, idle, job_id) = one_queued_job(&db.url, FixtureOptions::default(), "a").await;

    let answer = cancel(&idle, &job_id, "submitted by mistake").await;
    assert_eq!(
        answer,
        json!({ "ok": true, "outcome": "CANCELLED", "status": "CANCELLED" })
    );
    let again = cancel(&idle, &job_id, "twice").await;
    assert_eq!(
        again,
        json!({ "ok": true, "outcome": "ALREADY_CANCELLED", "status": "CANCELLED" })
    );
    let job = idle.job(&job_id).await;
    assert_eq!(job["cancel_reason"], "submitted by mistake");
    assert!(job["finished_at"].is_string(), "{job}");
    let (types, last) = events(&idle, &job_id).await;
    assert_eq!(types, ["ACCEPTED", "CANCELLED"]);
    assert_eq!(detail(&last, "status"), "CANCELLED");
    assert_eq!(detail(&last, "reason"), "submitted by mistake");

    // A node that runs jobs completes the next one and never touches the cancelled one.
    let busy = JobsNode::start(test_config(&db.url, "busy", 4)).await;
    let next = idle
        .submit(&two_step_workflow(&server.target()), json!({ "text": "b" }))
        .await;
    busy.wait_for_status(&next, "COMPLETED", WAIT).await;
    assert_eq!(server.stats.tokenize_calls(), 1, "only the second job ran");
    assert_eq!(idle.job(&job_id).await["status"], "CANCELLED");

    // A finished job is left as it is.
    let finished = cancel(&idle, &next, "too late").await;
    assert_eq!(
        finished,
        json!({ "ok": false, "outcome": "ALREADY_FINISHED", "status": "COMPLETED" })
    );
    let unknown = uuid::Uuid::now_v7().to_string();
    let missing = cancel(&idle, &unknown, "nothing").await;
    assert_eq!(missing["ok"], false);
    assert_eq!(missing["error"], format!("no workflow run {unknown}"));
    busy.stop().await;
}

#[tokio::test]
async fn a_waiting_job_is_cancelled_and_complete_step_then_answers_wrong_state() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let job_id = node
        .submit(
            &three_step_workflow(&server.target()),
            json!({ "text": "a" }),
        )
        .await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;

    let answer = cancel(&node, &job_id, "the reviewer left").await;
    assert_eq!(answer["outcome"], "CANCELLED", "{answer}");
    let answered = node
        .ok(
            "complete-step",
            json!({ "jobId": job_id, "stepName": "review", "response": { "notes": "ok", "score": 2 } }),
        )
        .await;
    assert_eq!(answered["outcome"], "WRONG_STATE", "{answered}");
    assert_eq!(answered["status"], "CANCELLED", "{answered}");
    let job = node.job(&job_id).await;
    assert_eq!(job["status"], "CANCELLED");
    assert_eq!(
        job["outstanding_step"],
        Value::Null,
        "no longer parked: {job}"
    );
    let (types, _) = events(&node, &job_id).await;
    assert_eq!(types.last().unwrap(), "CANCELLED");
    assert_eq!(
        server.stats.embed_calls(),
        0,
        "the step after the review never ran"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_running_job_is_abandoned_mid_call_and_settles_cancelled_without_its_checkpoint() {
    let db = TestDatabase::create().await;
    let slow = FixtureOptions {
        tokenize_delay: Some(Duration::from_secs(60)),
        ..FixtureOptions::default()
    };
    let (server, idle, job_id) = one_queued_job(&db.url, slow, "a").await;
    // A lease renewal every 20 s: a cancel settled sooner was heard over NOTIFY.
    let mut config = test_config(&db.url, "busy", 2);
    config.lease_ms = 60_000;
    let busy = JobsNode::start(config).await;
    protomolt_e2e::jobs::eventually("the slow call to start", WAIT, || async {
        server.stats.tokenize_calls() == 1
    })
    .await;

    let answer = cancel(&idle, &job_id, "stuck on a slow target").await;
    assert_eq!(
        answer,
        json!({ "ok": true, "outcome": "CANCEL_REQUESTED", "status": "RUNNING" })
    );
    assert_eq!(
        cancel(&idle, &job_id, "again").await["outcome"],
        "ALREADY_CANCELLED"
    );
    let job = idle
        .wait_for_status(&job_id, "CANCELLED", Duration::from_secs(10))
        .await;
    assert_eq!(
        job["checkpoints"],
        json!([]),
        "the abandoned step left nothing"
    );
    assert_eq!(job["lease_owner"], Value::Null);
    assert_eq!(job["cancel_reason"], "stuck on a slow target");
    let (types, last) = events(&idle, &job_id).await;
    assert_eq!(types, ["ACCEPTED", "CANCELLED"]);
    assert_eq!(detail(&last, "reason"), "stuck on a slow target");
    busy.stop().await;
}

#[tokio::test]
async fn once_a_cancel_is_requested_no_settlement_but_cancelled_ends_the_claim() {
    let db = TestDatabase::create().await;
    let (_server, idle, job_id) = one_queued_job(&db.url, FixtureOptions::default(), "a").await;
    let claim = idle
        .store
        .claim_jobs("a-worker", Duration::from_secs(60), 1)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .claim;
    assert_eq!(
        cancel(&idle, &job_id, "stop").await["outcome"],
        "CANCEL_REQUESTED"
    );
    let refused = [
        Settlement::Retry {
            delay: Duration::ZERO,
            error: "GRPC: UNAVAILABLE".into(),
        },
        Settlement::Waiting {
            step: "review".into(),
            request: None,
            timeout: None,
            kind: workflow::runner::WaitKind::External,
            others: Vec::new(),
            waiting_on: json!([]),
            children_seen: None,
        },
        Settlement::Completed {
            result: json!({}),
            verdict: "2 steps".into(),
        },
    ];
    for settlement in refused {
        let answer = idle.store.settle(&claim, settlement.clone()).await;
        assert!(
            matches!(answer, Err(StoreError::LostClaim { .. })),
            "{settlement:?}: {answer:?}"
        );
    }
    // A final checkpoint written with a FAILED settlement (two statements) is refused
    // whole, as that one write's lost claim, never as a failed batch.
    let held = StepCheckpoint {
        step: "embed".into(),
        position: 0,
        entry: json!({ "name": "embed", "skipped": false, "response": {} }),
    };
    let failed = Settlement::Failed {
        error: "MAPPING: the output".into(),
        verdict: None,
        step: None,
    };
    let write = ClaimWrite::settle(&claim, Some(held), failed).unwrap();
    let answers = idle.store.commit_claim_writes(&[write]).await;
    assert!(
        matches!(answers[0], Err(StoreError::LostClaim { .. })),
        "{answers:?}"
    );
    let released = idle
        .store
        .release_claim(&claim, Duration::ZERO, 10, "shutdown")
        .await;
    assert!(matches!(released, Err(StoreError::LostClaim { .. })));
    idle.store.settle_cancelled(&claim).await.unwrap();
    let job = idle.job(&job_id).await;
    assert_eq!(job["status"], "CANCELLED");
    assert_eq!(
        job["checkpoints"],
        json!([]),
        "nothing of the refused writes landed"
    );
    // Sent again (its first answer lost), the cancelled settlement is answered as
    // having landed, and writes nothing twice; an older claim's is refused.
    idle.store.settle_cancelled(&claim).await.unwrap();
    let cancelled_events = idle
        .store
        .job_events(claim.job_id)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "CANCELLED")
        .count();
    assert_eq!(cancelled_events, 1);
    let older = jobs_role::store::Claim {
        token: claim.token - 1,
        ..claim.clone()
    };
    assert!(idle.store.settle_cancelled(&older).await.is_err());
}

#[tokio::test]
async fn a_stray_cancel_notification_without_a_cancel_stops_nothing() {
    let db = TestDatabase::create().await;
    let slow = FixtureOptions {
        tokenize_delay: Some(Duration::from_secs(2)),
        ..FixtureOptions::default()
    };
    let (server, idle, job_id) = one_queued_job(&db.url, slow, "a").await;
    let mut config = test_config(&db.url, "busy", 2);
    config.lease_ms = 60_000;
    let busy = JobsNode::start(config).await;
    protomolt_e2e::jobs::eventually("the slow call to start", WAIT, || async {
        server.stats.tokenize_calls() == 1
    })
    .await;
    // Any role that can connect may NOTIFY; the row has no cancel mark.
    let client = db.connect().await;
    for payload in [job_id.as_str(), "", "not-a-uuid"] {
        client
            .execute("SELECT pg_notify('protomolt_jobs_cancel', $1)", &[&payload])
            .await
            .unwrap();
    }
    idle.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        server.stats.tokenize_calls(),
        1,
        "the call was not abandoned"
    );
    busy.stop().await;
}

#[tokio::test]
async fn the_sweeper_settles_a_requested_cancel_whose_worker_is_gone() {
    let db = TestDatabase::create().await;
    let (_server, idle, job_id) = one_queued_job(&db.url, FixtureOptions::default(), "a").await;
    // Claimed by a worker that then vanished: its lease runs out.
    idle.store
        .claim_jobs("gone", Duration::from_millis(300), 1)
        .await
        .unwrap();
    assert_eq!(
        cancel(&idle, &job_id, "its node died").await["outcome"],
        "CANCEL_REQUESTED"
    );
    let job = idle.wait_for_status(&job_id, "CANCELLED", WAIT).await;
    assert_eq!(job["cancel_reason"], "its node died");
    let (types, _) = events(&idle, &job_id).await;
    assert_eq!(types, ["ACCEPTED", "CANCELLED"]);
    assert_eq!(idle.store.count_jobs(JobStatus::Queued).await.unwrap(), 0);
}

#[tokio::test]
async fn cancels_racing_a_draining_node_each_end_as_they_were_answered() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let workflow = two_step_workflow(&server.target());
    let mut ids = Vec::new();
    for i in 0..60 {
        ids.push(
            idle.submit(&workflow, json!({ "text": format!("job {i}") }))
                .await,
        );
    }
    let busy = JobsNode::start(test_config(&db.url, "busy", 8)).await;
    let answers =
        futures_util::future::join_all(ids.iter().map(|id| cancel(&idle, id, "race"))).await;
    for (id, answer) in ids.iter().zip(&answers) {
        let expected = match answer["outcome"].as_str().unwrap() {
            "CANCELLED" | "CANCEL_REQUESTED" => "CANCELLED",
            "ALREADY_FINISHED" => answer["status"].as_str().unwrap(),
            other => panic!("{id}: {other}"),
        };
        let job = idle.wait_for_status(id, expected, WAIT).await;
        let (types, _) = events(&idle, id).await;
        let last = types.last().unwrap();
        assert_eq!(
            last, expected,
            "{id}: the last event matches the row: {job}"
        );
        assert_eq!(
            types
                .iter()
                .filter(|t| *t == "CANCELLED" || *t == "COMPLETED")
                .count(),
            1,
            "{id}: exactly one ending: {types:?}"
        );
    }
    busy.stop().await;
}

#[tokio::test]
async fn a_cancel_without_a_reason_or_with_a_hostile_id_is_refused_and_changes_nothing() {
    let db = TestDatabase::create().await;
    let (_server, idle, job_id) = one_queued_job(&db.url, FixtureOptions::default(), "a").await;
    for body in [
        json!({ "jobId": job_id }),
        json!({ "jobId": job_id, "reason": "" }),
        json!({ "jobId": job_id, "reason": "r".repeat(501) }),
        json!({ "jobId": "not-a-uuid", "reason": "x" }),
        json!({ "jobId": "'; DROP TABLE workflow_run; --", "reason": "x" }),
    ] {
        let (status, answer) = idle.call("cancel-job", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    assert_eq!(idle.job(&job_id).await["status"], "QUEUED");
    // A NUL in the reason (which PostgreSQL cannot store) is kept visible, not
    // refused; written out, the longest reason is cut to what the row keeps.
    let answer = cancel(&idle, &job_id, &"\u{0}".repeat(500)).await;
    assert_eq!(answer["outcome"], "CANCELLED", "{answer}");
    let reason = idle.job(&job_id).await["cancel_reason"].clone();
    assert_eq!(reason.as_str().unwrap().chars().count(), 500);
    assert!(reason.as_str().unwrap().starts_with("\\u0000\\u0000"));
}
