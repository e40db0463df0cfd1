//! The invariant checks the chaos run relies on (`protomolt_e2e::invariants`): they
//! hold over a clean run, and each names the job that breaks it.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::invariants::{CHECKPOINTS, STUCK, UNPUBLISHED, check};
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::json;
use workflow::testkit::{FixtureServer, two_step_workflow};

#[tokio::test]
async fn the_invariants_hold_over_a_clean_run_and_name_each_breach() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "node-a", 2)).await;
    let mut jobs = Vec::new();
    for text in ["one", "two", "three"] {
        let job = node
            .submit(
                &two_step_workflow(&server.target()),
                json!({ "text": text }),
            )
            .await;
        jobs.push(job);
    }
    for job in &jobs {
        node.wait_for_status(job, "COMPLETED", Duration::from_secs(30))
            .await;
    }
    node.stop().await;
    let client = db.connect().await;

    let clean = check(&client, false).await;
    assert!(clean.breaches.is_empty(), "{clean}");
    assert_eq!(clean.jobs_by_status.get("COMPLETED"), Some(&3), "{clean}");

    // No relay ran in this test: every event is still PENDING, and said so.
    let unpublished = check(&client, true).await;
    assert!(
        unpublished
            .breaches
            .iter()
            .all(|b| b.invariant == UNPUBLISHED && b.detail.contains("is PENDING")),
        "{unpublished}"
    );
    assert!(!unpublished.breaches.is_empty());

    // A job whose checkpoints are out of order, and one put back in the queue.
    client
        .execute(
            "UPDATE workflow_run SET checkpoints = jsonb_build_array(checkpoints->1, checkpoints->0) WHERE job_id = $1::text::uuid",
            &[&jobs[0]],
        )
        .await
        .unwrap();
    client
        .execute(
            "UPDATE workflow_run SET status = 'QUEUED', finished_at = NULL WHERE job_id = $1::text::uuid",
            &[&jobs[1]],
        )
        .await
        .unwrap();
    let broken = check(&client, false).await;
    let named = |invariant: &str, job: &str| {
        broken
            .breaches
            .iter()
            .any(|b| b.invariant == invariant && b.detail.contains(job))
    };
    assert!(named(CHECKPOINTS, &jobs[0]), "{broken}");
    assert!(named(STUCK, &jobs[1]), "{broken}");
    assert_eq!(broken.breaches.len(), 2, "{broken}");
    assert!(broken.to_string().contains("BROKEN"), "{broken}");
}
