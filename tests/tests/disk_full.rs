//! The database's disk full (issue 38): PostgreSQL's data directory on a small tmpfs
//! (its WAL on another disk, as production keeps it), filled to the last byte while
//! jobs run, then freed. Submissions answer 503 with a sentence naming the full disk
//! and write nothing; running jobs keep their claims and spend no attempt; everything
//! resumes within seconds of space coming back. Needs root (it mounts the tmpfs), as
//! the rest of the suite's clusters do.

use std::time::{Duration, Instant};

use http::StatusCode;
use protomolt_e2e::cluster::{ClusterOptions, PgCluster};
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureOptions, FixtureServer, two_step_workflow};

const WAIT: Duration = Duration::from_secs(60);

async fn job(node: &JobsNode, job_id: &str) -> Value {
    let (status, answer) = node.call("get-job", json!({ "jobId": job_id })).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["job"].clone()
}

/// A durable cluster on a 128 MiB tmpfs, and targets whose first step takes 1.5 s (so
/// jobs are mid-step when the disk fills).
async fn small_disk_and_slow_targets() -> (PgCluster, FixtureServer) {
    let cluster = PgCluster::start_with(
        None,
        ClusterOptions {
            durable: true,
            data_disk_mb: Some(128),
        },
    );
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_millis(1_500)),
        ..FixtureOptions::default()
    })
    .await;
    (cluster, server)
}

/// Waits until every job of `jobs` is COMPLETED, each on its first attempt; a job
/// DEAD or FAILED (charged for the full disk) fails at once.
async fn every_job_completed_on_its_first_attempt(node: &JobsNode, jobs: &[String]) {
    let deadline = Instant::now() + WAIT;
    for job_id in jobs {
        loop {
            let job = job(node, job_id).await;
            assert!(
                job["status"] != "DEAD" && job["status"] != "FAILED",
                "job {job_id} was charged for the full disk: {job}"
            );
            if job["status"] == "COMPLETED" {
                assert_eq!(
                    job["attempt"],
                    json!(1),
                    "job {job_id} spent an attempt on the full disk: {job}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "job {job_id} never completed after space came back: {job}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Submits six jobs of `workflow` (with `extra` fields) and waits until the first
/// runs; answers their ids.
async fn six_jobs_the_first_running(
    node: &JobsNode,
    workflow: &Value,
    extra: Value,
) -> Vec<String> {
    let mut jobs = Vec::new();
    for i in 0..6 {
        let mut body = json!({ "workflow": workflow, "input": { "text": format!("job {i}") } });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let (status, answer) = node.call("submit-workflow", body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        jobs.push(answer["jobId"].as_str().expect("jobId").to_owned());
    }
    let deadline = Instant::now() + WAIT;
    while job(node, &jobs[0]).await["status"] != "RUNNING" {
        assert!(Instant::now() < deadline, "the first job never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_submissions_with_a_sentence_and_costs_running_jobs_nothing() {
    let (cluster, server) = small_disk_and_slow_targets().await;
    let disk = cluster.disk().expect("the cluster's small disk");
    let workflow = two_step_workflow(&server.target());
    let node = JobsNode::start(test_config(&cluster.url(""), "disk", 4)).await;
    let client = protomolt_e2e::connect(&cluster.url("")).await;

    let mut jobs = six_jobs_the_first_running(&node, &workflow, json!({})).await;

    // Full: a submission that needs a new page is refused, saying why, and leaves
    // nothing behind. (Rows that fit in pages with room still go in: keep sending.)
    let filled = disk.fill();
    assert!(filled > 0, "nothing written: the disk was already full?");
    let refused_at = Instant::now();
    let (answer, refused_id) = loop {
        let job_id = uuid::Uuid::now_v7().to_string();
        let (status, answer) = node
            .call(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": "while full" }, "jobId": job_id }),
            )
            .await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break (answer, job_id);
        }
        assert_eq!(status, StatusCode::OK, "{answer}");
        jobs.push(job_id);
        assert!(
            refused_at.elapsed() < Duration::from_secs(20),
            "a full disk never refused a submission"
        );
    };
    assert!(
        answer.to_string().contains("disk is full"),
        "the answer does not say the disk is full: {answer}"
    );
    let written: i64 = client
        .query_one(
            "SELECT count(*) FROM workflow_run WHERE job_id::text = $1",
            &[&refused_id],
        )
        .await
        .expect("a count")
        .get(0);
    assert_eq!(written, 0, "a refused submission left a row");
    // Submissions at once are written in one batch: each refused one still says why.
    let at_once = (0..8).map(|i| {
        node.call(
            "submit-workflow",
            json!({ "workflow": workflow, "input": { "text": format!("at once {i}") } }),
        )
    });
    for (status, answer) in futures_util::future::join_all(at_once).await {
        if status == StatusCode::OK {
            jobs.push(answer["jobId"].as_str().expect("jobId").to_owned());
            continue;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert!(
            answer.to_string().contains("disk is full"),
            "a submission of a batch was refused without saying the disk is full: {answer}"
        );
    }

    // Full for less than a lease (5 s): the running jobs hold on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    disk.free();
    let freed = Instant::now();
    let deadline = freed + WAIT;
    loop {
        let (status, answer) = node
            .call(
                "submit-workflow",
                json!({ "workflow": workflow, "input": { "text": "after" } }),
            )
            .await;
        if status == StatusCode::OK {
            jobs.push(answer["jobId"].as_str().expect("jobId").to_owned());
            break;
        }
        assert!(Instant::now() < deadline, "never accepted again: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resumed = freed.elapsed();
    assert!(
        resumed < Duration::from_secs(10),
        "submissions resumed {resumed:?} after space came back"
    );
    every_job_completed_on_its_first_attempt(&node, &jobs).await;
    node.stop().await;
}

/// The disk full for 6 s, three times the lease, while six jobs with a single attempt
/// each are mid-step: every job completes on its first attempt. A renewal that needs a
/// new page fails, and the sweeper, refused by the full disk when it tries to requeue
/// that lease, gives its attempt back (the window a lease before its first refused
/// sweep: `worker::sweeper`'s unit tests); a renewal whose page has room passes. Which
/// of the two a run sees depends on the pages (here, so far, the renewals passed), so
/// this holds the promise, and `database_faults.rs`'s outage proves the give-back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_full_for_longer_than_the_lease_costs_running_jobs_no_attempt() {
    let (cluster, server) = small_disk_and_slow_targets().await;
    let disk = cluster.disk().expect("the cluster's small disk");
    let workflow = two_step_workflow(&server.target());
    let mut config = test_config(&cluster.url(""), "disk-long", 4);
    config.lease_ms = 2_000;
    let node = JobsNode::start(config).await;

    let jobs = six_jobs_the_first_running(&node, &workflow, json!({ "maxAttempts": 1 })).await;
    assert!(
        disk.fill() > 0,
        "nothing written: the disk was already full?"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    disk.free();
    every_job_completed_on_its_first_attempt(&node, &jobs).await;
    node.stop().await;
}
