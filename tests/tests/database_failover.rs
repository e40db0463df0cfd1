//! A node following a failover: PostgreSQL as a primary with a synchronous streaming
//! standby, the node connected with a multi-host URL (`target_session_attrs=read-write`).
//! The primary is killed mid-run and the standby promoted: every job acknowledged
//! before (queued, running, or done) and every job submitted after completes, and none
//! runs twice; the node needs no restart (its pool, its LISTEN connection and its
//! worker find the new primary by themselves), and `get-fleet` names the new primary.

use std::time::{Duration, Instant};

use http::StatusCode;
use protomolt_e2e::cluster::PgCluster;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::json;
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(90);

/// The job's status, or `None` while the database cannot answer (mid-failover).
async fn status_of(node: &JobsNode, job_id: &str) -> Option<String> {
    let id = uuid::Uuid::parse_str(job_id).expect("a uuid");
    match node.store.get_job(id).await {
        Ok(Some(job)) => job["status"].as_str().map(str::to_owned),
        Ok(None) | Err(_) => None,
    }
}

/// The primary `get-fleet` names, or `None` while the database cannot answer.
async fn primary_named_by(node: &JobsNode) -> Option<String> {
    let (status, answer) = node.call("get-fleet", json!({})).await;
    (status == StatusCode::OK)
        .then(|| answer["database"]["primary"].as_str().map(str::to_owned))
        .flatten()
}

/// Submits one job, sending again while the node answers 503 (the database is
/// failing over); the same job id each time, so a submission that did commit is
/// answered again, not made twice.
async fn submit_through(node: &JobsNode, workflow: &serde_json::Value, text: &str) -> String {
    let job_id = uuid::Uuid::now_v7().to_string();
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, answer) = node
            .call(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": text }, "jobId": job_id }),
            )
            .await;
        if status == StatusCode::OK {
            assert_eq!(answer["jobId"], json!(job_id), "{answer}");
            return job_id;
        }
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "only an outage may refuse a submission: {answer}"
        );
        assert!(Instant::now() < deadline, "never accepted: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_a_promoted_standby_and_loses_nothing_it_acknowledged() {
    let primary = PgCluster::start(None);
    let standby = PgCluster::standby_of(&primary);
    primary.require_synchronous_standby();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, standby.port
    );
    // Slow steps, so jobs are mid-run when the primary dies.
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(200)),
        ..FixtureOptions::default()
    })
    .await;
    let workflow = two_step_workflow(&server.target());
    let node = JobsNode::start(test_config(&url, "follower", 4)).await;

    let mut jobs = Vec::new();
    for i in 0..12 {
        jobs.push(submit_through(&node, &workflow, &format!("before {i}")).await);
    }
    // Some done, some running, some queued: then the primary's host dies.
    let deadline = Instant::now() + WAIT;
    while status_of(&node, &jobs[0]).await.as_deref() != Some("COMPLETED") {
        assert!(Instant::now() < deadline, "the first job never completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut unfinished = 0;
    for job_id in &jobs {
        if status_of(&node, job_id).await.as_deref() != Some("COMPLETED") {
            unfinished += 1;
        }
    }
    assert!(
        unfinished > 0,
        "every job finished before the failover: nothing to prove"
    );
    assert_eq!(
        primary_named_by(&node).await.as_deref(),
        Some(format!("127.0.0.1:{}", primary.port).as_str()),
        "get-fleet names the primary"
    );
    primary.crash();
    standby.promote();
    for i in 0..8 {
        jobs.push(submit_through(&node, &workflow, &format!("after {i}")).await);
    }

    let deadline = Instant::now() + WAIT;
    for job_id in &jobs {
        loop {
            if status_of(&node, job_id).await.as_deref() == Some("COMPLETED") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "job {job_id} never completed after the failover (status {:?})",
                status_of(&node, job_id).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let deadline = Instant::now() + WAIT;
    let promoted = format!("127.0.0.1:{}", standby.port);
    while primary_named_by(&node).await.as_deref() != Some(promoted.as_str()) {
        assert!(
            Instant::now() < deadline,
            "get-fleet never named the promoted standby"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing acknowledged was lost and nothing was made twice: every job once.
    let rows = node
        .store
        .count_jobs(jobs_role::JobStatus::Completed)
        .await
        .expect("a count from the new primary");
    assert_eq!(rows, jobs.len() as i64);
    node.stop().await;
}
