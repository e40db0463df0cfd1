//! The node's OpenAPI document (issue 36): every verb of the mounted roles in it with
//! its scope; an independent validator (`openapi-spec-validator`) passes it; and a
//! client an independent generator (`openapi-python-client`) made from it submits a
//! job and reads it back against a real node. That last is the proof the document is
//! true.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::browser::serve;
use protomolt_e2e::jobs::{JobsNode, http_get, test_config};
use protomolt_e2e::process::{NO_ENV, clients_python, run_checked};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, leaf_workflow};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_names_every_verb_passes_a_validator_and_a_generated_client_submits_a_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "openapi", 2)).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": leaf_workflow(&server.target()) }),
    )
    .await;
    let (status, document) = http_get(&node.router, "/v1/openapi.json").await;
    assert_eq!(status, 200, "{document}");
    assert_eq!(document["openapi"], "3.1.0");

    // Every verb of the catalog is an operation, with the scope its token needs.
    let (_, catalog) = http_get(&node.router, "/v1/actions").await;
    for action in catalog["actions"].as_array().expect("actions") {
        let verb = action["name"].as_str().expect("a name");
        let operation = &document["paths"][format!("/v1/actions/{verb}")]["post"];
        assert_eq!(operation["x-protomolt-scope"], action["scope"], "{verb}");
        assert_eq!(
            operation["security"][0]["bearer"][0], action["scope"],
            "{verb}"
        );
        let request = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{verb} has a request schema"));
        let name = request.trim_start_matches("#/components/schemas/");
        assert!(
            document["components"]["schemas"][name]["properties"].is_object(),
            "{verb}: {name}"
        );
    }
    // The routes beside the verbs: a job's events, health, metrics.
    for path in [
        "/v1/jobs/{job_id}/events",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(document["paths"][path]["get"].is_object(), "{path}");
    }

    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&document).expect("json")).expect("write");
    let python = clients_python();
    let bin = python.parent().expect("the venv's bin");
    let file_text = file.to_str().expect("a UTF-8 path");
    run_checked(
        &bin.join("openapi-spec-validator"),
        &[file_text],
        dir.path(),
        NO_ENV,
    );

    // A client generated from the document alone, by someone else's generator.
    run_checked(
        &bin.join("openapi-python-client"),
        &[
            "generate",
            "--path",
            file_text,
            "--meta",
            "none",
            "--output-path",
            "generated",
        ],
        dir.path(),
        NO_ENV,
    );
    let base = serve(node.router.clone()).await;
    std::fs::write(dir.path().join("use_it.py"), USE_IT).expect("the script");
    let script_dir = dir.path().to_path_buf();
    let answer = tokio::task::spawn_blocking(move || {
        run_checked(
            &python,
            &["use_it.py"],
            &script_dir,
            [("NODE_URL", base.as_str()), ("PYTHONPATH", ".")],
        )
    })
    .await
    .expect("the script ran");
    let last = answer.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{answer}: {e}"));
    let job_id = result["jobId"].as_str().expect("the script's job id");
    node.wait_for_status(job_id, "COMPLETED", Duration::from_secs(30))
        .await;
    assert_eq!(result["status"], "QUEUED", "{result}");
    assert_eq!(result["read"]["job"]["jobId"], job_id, "{result}");
    assert_eq!(result["listed"]["jobs"][0]["jobId"], job_id, "{result}");
    assert_eq!(
        result["listed"]["jobs"][0]["metadata"]["via"], "generated",
        "{result}"
    );
}

/// Submits a job and reads it back through the generated client only.
const USE_IT: &str = r#"
import json
import os

from generated import Client
from generated.api.workflow import submit_workflow
from generated.api.jobs import get_job, list_jobs
from generated.models.protomolt_jobs_verbs_v1_submit_workflow_request import (
    ProtomoltJobsVerbsV1SubmitWorkflowRequest,
)
from generated.models.protomolt_jobs_verbs_v1_get_job_request import (
    ProtomoltJobsVerbsV1GetJobRequest,
)
from generated.models.protomolt_jobs_verbs_v1_list_jobs_request import (
    ProtomoltJobsVerbsV1ListJobsRequest,
)

client = Client(base_url=os.environ["NODE_URL"], raise_on_unexpected_status=True)
submitted = submit_workflow.sync(
    client=client,
    body=ProtomoltJobsVerbsV1SubmitWorkflowRequest.from_dict(
        {"workflowName": "leaf", "input": {"text": "generated"}, "metadata": {"via": "generated"}}
    ),
)
job_id = submitted.job_id
read = get_job.sync(
    client=client,
    body=ProtomoltJobsVerbsV1GetJobRequest.from_dict({"jobId": job_id, "waitMs": 20000}),
)
# A page of summaries (null fields and all) parses too.
listed = list_jobs.sync(
    client=client,
    body=ProtomoltJobsVerbsV1ListJobsRequest.from_dict({"metadata": {"via": "generated"}}),
)
print(json.dumps({"jobId": job_id, "status": submitted.status, "read": read.to_dict(),
                  "listed": listed.to_dict()}))
"#;
