//! The `protomolt` CLI, the real binary against a real node (its router served on a
//! loopback port, real PostgreSQL, real fixture servers): submit → watch → complete →
//! get with a parked workflow, `--json` output that parses, exit codes a script can
//! branch on, cancel and retry round trips.

use std::process::{Command, Output};
use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::{Value, json};
use workflow::testkit::{FixtureServer, three_step_workflow, two_step_workflow};

/// The node's router served on a loopback port; its URL.
async fn serve(node: &JobsNode) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = node.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}")
}

/// Runs the CLI against `url` with `args`, off the async threads.
async fn cli(url: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_protomolt"));
    command
        .env("PROTOMOLT_URL", url)
        .env_remove("PROTOMOLT_TOKEN")
        .args(args);
    tokio::task::spawn_blocking(move || command.output().expect("the CLI runs"))
        .await
        .unwrap()
}

/// The lines of stdout, each parsed as JSON.
fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test]
async fn submit_watch_complete_and_get_a_parked_workflow_with_json_and_exit_codes() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let url = serve(&node).await;
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("review.json");
    std::fs::write(&workflow, three_step_workflow(&server.target()).to_string()).unwrap();

    let submitted = cli(
        &url,
        &[
            "--json",
            "submit",
            "--workflow",
            workflow.to_str().unwrap(),
            "--input",
            r#"{"text": "hello"}"#,
        ],
    )
    .await;
    assert_eq!(submitted.status.code(), Some(0), "{}", text(&submitted));
    let answer = &json_lines(&submitted)[0];
    let job_id = answer["jobId"].as_str().unwrap().to_owned();
    assert_eq!(answer["created"], true);

    // Watch in the background while the job parks and is answered.
    let watch = {
        let (url, job_id) = (url.clone(), job_id.clone());
        tokio::spawn(async move { cli(&url, &["--json", "watch", &job_id]).await })
    };
    let parked = cli(&url, &["--json", "get", &job_id, "--wait", "30"]).await;
    assert_eq!(parked.status.code(), Some(0), "{}", text(&parked));
    assert_eq!(json_lines(&parked)[0]["status"], "WAITING");
    let completed = cli(
        &url,
        &[
            "--json",
            "complete",
            &job_id,
            "review",
            "--response",
            r#"{"notes": "fine", "score": 2}"#,
        ],
    )
    .await;
    assert_eq!(completed.status.code(), Some(0), "{}", text(&completed));
    assert_eq!(json_lines(&completed)[0]["outcome"], "COMPLETED");

    let watched = tokio::time::timeout(Duration::from_secs(60), watch)
        .await
        .expect("watch ends after the terminal event")
        .unwrap();
    assert_eq!(watched.status.code(), Some(0), "{}", text(&watched));
    let types: Vec<String> = json_lines(&watched)
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("ACCEPTED"));
    assert!(types.contains(&"WAITING".to_owned()), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("COMPLETED"));

    let done = cli(&url, &["--json", "get", &job_id]).await;
    assert_eq!(done.status.code(), Some(0));
    assert_eq!(json_lines(&done)[0]["status"], "COMPLETED");
    // The same for a person: text, no colour codes off a terminal.
    let human = cli(&url, &["get", &job_id]).await;
    let shown = String::from_utf8_lossy(&human.stdout);
    assert!(shown.contains("status    COMPLETED"), "{shown}");
    assert!(
        !shown.contains('\u{1b}'),
        "no colours when stdout is not a terminal"
    );
    let listed = cli(&url, &["--json", "list", "--status", "completed"]).await;
    assert_eq!(json_lines(&listed)[0]["jobId"], job_id);

    // Text output never passes a terminal escape through (a verdict is anyone's text).
    let rejected = cli(
        &url,
        &[
            "--json",
            "submit",
            "--workflow",
            workflow.to_str().unwrap(),
            "--input",
            r#"{"text": "x"}"#,
        ],
    )
    .await;
    let rejected = json_lines(&rejected)[0]["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    cli(&url, &["get", &rejected, "--wait", "30"]).await;
    let reason = "nope\u{1b}]0;owned\u{7}\u{1b}[2J";
    let answer = cli(&url, &["reject", &rejected, "review", "--reason", reason]).await;
    assert_eq!(answer.status.code(), Some(0), "{}", text(&answer));
    let shown = cli(&url, &["get", &rejected]).await;
    assert_eq!(shown.status.code(), Some(1), "a FAILED job");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("nope?]0;owned??[2J"), "{shown}");
    assert!(!shown.contains('\u{1b}'));

    // A reader that goes away early ends the CLI quietly, not with a panic.
    let mut command = Command::new(env!("CARGO_BIN_EXE_protomolt"));
    command
        .env("PROTOMOLT_URL", &url)
        .args(["--json", "list", "--limit", "500"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let status = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().unwrap();
        drop(child.stdout.take());
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    node.stop().await;
}

#[tokio::test]
async fn cancel_and_retry_round_trip_and_exit_codes_tell_scripts_what_happened() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let url = serve(&idle).await;
    let job_id = idle
        .submit(&two_step_workflow(&server.target()), json!({ "text": "a" }))
        .await;

    let cancelled = cli(
        &url,
        &["--json", "cancel", &job_id, "--reason", "by mistake"],
    )
    .await;
    assert_eq!(cancelled.status.code(), Some(0), "{}", text(&cancelled));
    assert_eq!(json_lines(&cancelled)[0]["outcome"], "CANCELLED");
    // A CANCELLED job: exit 1.
    let got = cli(&url, &["get", &job_id]).await;
    assert_eq!(got.status.code(), Some(1), "{}", text(&got));
    let shown = String::from_utf8_lossy(&got.stdout);
    assert!(shown.contains("CANCELLED"), "{shown}");
    assert!(
        shown.contains("reason    by mistake"),
        "the reason is shown: {shown}"
    );
    // Cancelling it again changes nothing and says so (ALREADY_CANCELLED is ok).
    let again = cli(&url, &["cancel", &job_id, "--reason", "twice"]).await;
    assert_eq!(
        again.status.code(),
        Some(0),
        "ALREADY_CANCELLED is ok: {}",
        text(&again)
    );

    let snapshot = idle.job(&job_id).await["definition_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let retried = cli(&url, &["retry", &job_id, "--reason", "it was right"]).await;
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried));
    let said = text(&retried);
    assert!(said.starts_with("RETRIED (QUEUED)"), "{said}");
    assert!(
        said.contains(&format!(
            "it runs the workflow snapshot the job holds ({snapshot}); --current runs the workflow stored under its name now"
        )),
        "the CLI says which snapshot runs: {said}"
    );
    let busy = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let finished = cli(&url, &["--json", "get", &job_id, "--wait", "30"]).await;
    assert_eq!(finished.status.code(), Some(0));
    assert_eq!(json_lines(&finished)[0]["status"], "COMPLETED");
    // Retrying a COMPLETED job without a step: the node says no, exit 3.
    let refused = cli(&url, &["retry", &job_id]).await;
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));

    // On the current workflow: a job of an inline workflow never moves onto a stored
    // one, and says why (each finding listed; nothing changes, exit 3).
    let inline = ["retry", &job_id, "--current", "--from-step", "embed"];
    let refused = cli(&url, &inline).await;
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    let said = text(&refused);
    assert!(said.starts_with("INCOMPATIBLE (COMPLETED)"), "{said}");
    assert!(
        said.contains("\n  - workflow: the job was not submitted by the stored workflow's name"),
        "{said}"
    );
    // A job of the stored workflow moves onto its fixed version.
    idle.ok(
        "put-workflow",
        json!({ "workflow": two_step_workflow(&server.target()) }),
    )
    .await;
    let submitted = cli(
        &url,
        &[
            "--json",
            "submit",
            "--name",
            "embed-text",
            "--input",
            r#"{"text": "b"}"#,
            "--wait",
        ],
    )
    .await;
    let stored_job = json_lines(&submitted)[0]["jobId"]
        .as_str()
        .unwrap()
        .to_owned();
    let snapshot = idle.job(&stored_job).await["definition_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut fixed = two_step_workflow(&server.target());
    fixed["steps"][1]["target"] = json!(server.target().replace("127.0.0.1", "localhost"));
    idle.ok("put-workflow", json!({ "workflow": fixed })).await;
    let current = ["retry", &stored_job, "--current", "--from-step", "embed"];
    let moved = cli(&url, &current).await;
    assert_eq!(moved.status.code(), Some(0), "{}", text(&moved));
    let said = text(&moved);
    assert!(
        said.contains("it runs the workflow stored under its name now (snapshot sha256-compact:")
            && said.contains(&format!("; it ran {snapshot})")),
        "{said}"
    );
    let finished = cli(&url, &["--json", "get", &stored_job, "--wait", "30"]).await;
    assert_eq!(json_lines(&finished)[0]["status"], "COMPLETED");

    // Usage errors exit 2; an unknown job, a refused call or an unreachable node 3.
    assert_eq!(cli(&url, &["get"]).await.status.code(), Some(2));
    assert_eq!(
        cli(&url, &["submit", "--name", "x", "--input", "{not json"])
            .await
            .status
            .code(),
        Some(2)
    );
    let unknown = cli(&url, &["get", &uuid::Uuid::now_v7().to_string()]).await;
    assert_eq!(unknown.status.code(), Some(3), "{}", text(&unknown));
    assert!(text(&unknown).contains("no workflow run"));
    let bad_id = cli(&url, &["get", "not-a-uuid"]).await;
    assert_eq!(bad_id.status.code(), Some(3));
    assert!(text(&bad_id).contains("jobId"), "{}", text(&bad_id));
    let nowhere = cli("http://127.0.0.1:9", &["--json", "get", &job_id]).await;
    assert_eq!(nowhere.status.code(), Some(3));
    assert_eq!(
        json_lines(&nowhere)[0]["ok"],
        false,
        "scripts get JSON errors too"
    );
    assert!(text(&nowhere).contains("cannot reach the node"));

    // --wait past a minute, or credentials in the URL: usage, exit 2.
    assert_eq!(
        cli(&url, &["get", &job_id, "--wait", "61"])
            .await
            .status
            .code(),
        Some(2)
    );
    let with_password = url.replace("http://", "http://admin:hunter2@");
    let refused = cli(&with_password, &["get", &job_id]).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(!text(&refused).contains("hunter2"), "{}", text(&refused));
    // Something other than the node (a proxy's error page): told as such, exit 3.
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    tokio::spawn(async move {
        let page = axum::Router::new().fallback(|| async {
            (
                http::StatusCode::BAD_GATEWAY,
                "<html>502 Bad Gateway</html>",
            )
        });
        axum::serve(proxy, page).await
    });
    let proxied = cli(&proxy_url, &["get", &job_id]).await;
    assert_eq!(proxied.status.code(), Some(3));
    assert!(
        text(&proxied).contains("502") && text(&proxied).contains("other than JSON"),
        "{}",
        text(&proxied)
    );

    let health = cli(&url, &["--json", "health"]).await;
    assert_eq!(health.status.code(), Some(0), "{}", text(&health));
    assert_eq!(json_lines(&health)[0]["status"], "ready");
    let completions = cli(&url, &["completions", "bash"]).await;
    assert_eq!(completions.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&completions.stdout).contains("protomolt"));
    busy.stop().await;
    idle.stop().await;
}

#[tokio::test]
async fn watch_exits_not_done_when_the_stream_ends_before_the_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let idle = JobsNode::start(test_config(&db.url, "idle", 0)).await;
    let url = serve(&idle).await;
    let job_id = idle
        .submit(&two_step_workflow(&server.target()), json!({ "text": "a" }))
        .await;
    let watch = {
        let (url, job_id) = (url.clone(), job_id.clone());
        tokio::spawn(async move { cli(&url, &["watch", &job_id]).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The node shuts down: the stream ends with the job still QUEUED.
    idle.stop().await;
    let watched = tokio::time::timeout(Duration::from_secs(30), watch)
        .await
        .expect("watch ends with the stream")
        .unwrap();
    assert_eq!(watched.status.code(), Some(3), "{}", text(&watched));
    assert!(
        text(&watched).contains("ended before the job finished"),
        "{}",
        text(&watched)
    );
}

/// A newcomer's path without the node's source: export the contract's protos, build
/// an envelope from a .proto of their own and a skeleton, submit it and wait for the
/// result, answer the human step, and list dead-lettered records.
#[tokio::test]
async fn proto_export_workflow_build_submit_wait_and_rejects() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "busy", 2)).await;
    let url = serve(&node).await;
    let dir = tempfile::tempdir().unwrap();

    // proto export: the contract and buf/validate, with its licence, compile alone.
    let protos = dir.path().join("protos");
    let exported = cli(&url, &["proto", "export", protos.to_str().unwrap()]).await;
    assert_eq!(exported.status.code(), Some(0), "{}", text(&exported));
    assert!(protos.join("buf/validate/LICENSE").is_file());
    protox::compile(["protomolt/jobs/v1/jobs.proto"], [&protos])
        .expect("the exported contract compiles on its own");

    // workflows build: the user's own .proto (the fixture services' schema, with
    // buf.validate rules) and a skeleton; a human step declared by its types.
    let proto = dir.path().join("jobs_test.proto");
    std::fs::write(
        &proto,
        include_str!("../../workflow/fixtures/jobs_test.proto"),
    )
    .unwrap();
    let skeleton = dir.path().join("skeleton.json");
    let skeleton_json = json!({
        "name": "my-review",
        "steps": [
            { "name": "tokenize", "target": server.target(),
              "method": "jobs.test.Tokenizer/Tokenize", "rules": ["text = input.text"] },
            { "name": "approve", "completion": "external", "requestType": "jobs.test.Tokens",
              "rules": ["ids = tokenize.ids"], "outputType": "jobs.test.Review" },
        ],
    });
    std::fs::write(&skeleton, skeleton_json.to_string()).unwrap();
    let build_on = |node: Option<String>| {
        let mut args = vec![
            "workflow".to_owned(),
            "build".to_owned(),
            "--proto".to_owned(),
            proto.display().to_string(),
            "--skeleton".to_owned(),
            skeleton.display().to_string(),
            "--input-type".to_owned(),
            "jobs.test.Text".to_owned(),
        ];
        if let Some(node) = node {
            args.extend(["--node".to_owned(), node]);
        }
        let url = url.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&url, &args).await
        }
    };
    let build = || build_on(None);
    let built = build().await;
    assert_eq!(built.status.code(), Some(0), "{}", text(&built));
    // Checked here only, and it says so (on stderr: stdout is the envelope).
    assert!(
        String::from_utf8_lossy(&built.stderr).contains("not against a node's outbound policy"),
        "{}",
        text(&built)
    );
    // With --node, the node checks it too: one that allows its target accepts it;
    // one whose policy forbids every call refuses it, naming the step (exit 3).
    let checked = build_on(Some(url.clone())).await;
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked));
    assert!(
        String::from_utf8_lossy(&checked.stderr).contains("accepts 'my-review' too"),
        "{}",
        text(&checked)
    );
    let strict = JobsNode::start_with(
        test_config(&db.url, "strict", 0),
        None,
        workflow::outbound::OutboundPolicy::nothing(),
    )
    .await;
    let strict_url = serve(&strict).await;
    let forbidden = build_on(Some(strict_url)).await;
    assert_eq!(forbidden.status.code(), Some(3), "{}", text(&forbidden));
    assert!(
        text(&forbidden).contains("$.steps[0].target"),
        "{}",
        text(&forbidden)
    );
    // Nothing was stored by either check.
    let (_, listed) = protomolt_e2e::jobs::call(&node.router, "list-workflows", json!({})).await;
    assert!(
        listed["workflows"].as_array().is_none_or(Vec::is_empty),
        "{listed}"
    );
    let built = build().await;
    let envelope = &json_lines(&built)[0];
    assert!(envelope["schema"]["descriptorSetBase64"].is_string());
    assert_eq!(envelope["inputType"], "jobs.test.Text");
    let envelope_file = dir.path().join("envelope.json");
    std::fs::write(&envelope_file, envelope.to_string()).unwrap();

    // A skeleton with a typo: every finding, with its path, and exit 2.
    let mut broken = skeleton_json.clone();
    broken["steps"][1]["rules"] = json!(["idz = tokenize.ids"]);
    std::fs::write(&skeleton, broken.to_string()).unwrap();
    let refused = build().await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("$.steps[1].rules[0] (step 'approve')"),
        "{}",
        text(&refused)
    );
    // Stored as it is, a skeleton is refused, and the CLI says how to build it.
    let put = cli(&url, &["workflows", "put", skeleton.to_str().unwrap()]).await;
    assert_ne!(put.status.code(), Some(0), "{}", text(&put));
    assert!(
        text(&put).contains("build the envelope first: protomolt workflow build --proto"),
        "{}",
        text(&put)
    );

    // submit --wait: parks on the human step and says what it asks and how to answer.
    let submitted = cli(
        &url,
        &[
            "submit",
            "--workflow",
            envelope_file.to_str().unwrap(),
            "--input",
            r#"{"text": "ab"}"#,
            "--wait",
        ],
    )
    .await;
    assert_eq!(submitted.status.code(), Some(0), "{}", text(&submitted));
    let said = text(&submitted);
    assert!(said.contains("waits on step 'approve'"), "{said}");
    assert!(
        said.contains(r#"it asks to approve: {"ids":[97,98]}"#),
        "{said}"
    );
    // How to answer names the type and sketches its fields.
    assert!(
        said.contains(r#"answer it with a jobs.test.Review: protomolt complete"#)
            && said.contains(r#"--response '{"notes":"","score":0}'"#),
        "{said}"
    );
    let job_id = said
        .split_whitespace()
        .nth(1)
        .expect("submitted <id> ...")
        .to_owned();
    let answered = cli(
        &url,
        &[
            "complete",
            &job_id,
            "approve",
            "--response",
            r#"{"notes": "ok", "score": 3}"#,
        ],
    )
    .await;
    assert_eq!(answered.status.code(), Some(0), "{}", text(&answered));
    // One sentence, the console's: the step is done, the job resumes.
    let said = text(&answered);
    assert!(
        said.starts_with("answer accepted: the job resumes after step 'approve'")
            && !said.contains("COMPLETED ("),
        "{said}"
    );

    // submit --wait on a job that completes prints its result.
    let two = dir.path().join("two.json");
    std::fs::write(&two, two_step_workflow(&server.target()).to_string()).unwrap();
    let done = cli(
        &url,
        &[
            "submit",
            "--workflow",
            two.to_str().unwrap(),
            "--input",
            r#"{"text": "hi"}"#,
            "--wait",
        ],
    )
    .await;
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    assert!(
        text(&done).contains("\"sourceText\": \"hi\""),
        "{}",
        text(&done)
    );

    // rejects: none yet, then one the consumer would have written.
    let none = cli(&url, &["rejects"]).await;
    assert_eq!(none.status.code(), Some(0), "{}", text(&none));
    assert!(text(&none).contains("no dead-lettered request records"));
    db.connect()
        .await
        .execute(
            "INSERT INTO workflow_run_request_rejects (topic, partition, record_offset, record_key, payload, error, record_digest)
             VALUES ('requests', 0, 7, '\\x6b6579'::bytea, '\\x7b7d'::bytea, 'the record''s value is JSON', '\\x00'::bytea)",
            &[],
        )
        .await
        .unwrap();
    let listed = cli(&url, &["--json", "rejects"]).await;
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    let reject = &json_lines(&listed)[0];
    assert_eq!(reject["recordOffset"], 7);
    assert_eq!(reject["recordKey"], "key");
    assert_eq!(reject["payloadBytes"], 2);
    assert!(reject["error"].as_str().unwrap().contains("is JSON"));
    let human = cli(&url, &["rejects"]).await;
    assert!(text(&human).contains("requests/0/7"), "{}", text(&human));
    node.stop().await;
}

#[tokio::test]
async fn token_new_prints_a_token_a_node_accepts_by_its_sha256() {
    let made = cli(
        "http://127.0.0.1:1",
        &["--json", "token", "new", "--name", "ci", "--scope", "*"],
    )
    .await;
    assert_eq!(made.status.code(), Some(0), "{}", text(&made));
    let made = &json_lines(&made)[0];
    let token = made["token"].as_str().unwrap().to_owned();
    let digest = made["tokenSha256"].as_str().unwrap().to_owned();
    assert!(token.len() >= 60, "{token}");
    assert_eq!(digest, registry_stub::auth::sha256_hex(&token));
    let person = cli("http://127.0.0.1:1", &["token", "new"]).await;
    assert!(
        text(&person).contains("token_sha256 = \""),
        "{}",
        text(&person)
    );

    let db = TestDatabase::create().await;
    let auth = registry_stub::auth::AuthConfig {
        tokens: vec![registry_stub::auth::TokenConfig {
            name: "ci".into(),
            token: String::new(),
            token_sha256: Some(digest),
            scopes: vec!["*".into()],
            requests_per_minute: None,
            max_body_bytes: None,
        }],
    };
    auth.check().unwrap();
    let node = JobsNode::start_with_auth(test_config(&db.url, "idle", 0), Some(auth)).await;
    let url = serve(&node).await;
    let listed = cli(&url, &["--token", &token, "--json", "list"]).await;
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    let refused = cli(&url, &["--token", "pm_not-the-token-0123456789", "list"]).await;
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    assert!(
        text(&refused).contains("unknown bearer token"),
        "{}",
        text(&refused)
    );
    node.stop().await;
}

#[tokio::test]
async fn redrive_publishes_dead_lettered_events_again_by_job_or_all() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "quiet", 0)).await;
    let url = serve(&node).await;
    let workflow = two_step_workflow("127.0.0.1:1");
    let first = node.submit(&workflow, json!({ "text": "a" })).await;
    let second = node.submit(&workflow, json!({ "text": "b" })).await;
    db.connect()
        .await
        .execute(
            "UPDATE workflow_run_events_outbox SET status = 'FAILED', attempts = 10",
            &[],
        )
        .await
        .unwrap();

    let one = cli(&url, &["--json", "redrive", &first]).await;
    assert_eq!(one.status.code(), Some(0), "{}", text(&one));
    assert_eq!(json_lines(&one)[0]["jobIds"], json!([first]));
    let rest = cli(&url, &["--json", "redrive", "--all"]).await;
    assert_eq!(rest.status.code(), Some(0), "{}", text(&rest));
    assert_eq!(json_lines(&rest)[0]["jobIds"], json!([second]));
    let nothing = cli(&url, &["redrive", "--all", "--workflow", "embed-text"]).await;
    assert_eq!(nothing.status.code(), Some(0), "{}", text(&nothing));
    assert!(
        text(&nothing).contains("redrove 0 events of 0 jobs"),
        "{}",
        text(&nothing)
    );
    // Neither ids nor --all: refused before anything is sent.
    let neither = cli(&url, &["redrive"]).await;
    assert_ne!(neither.status.code(), Some(0));
    node.stop().await;
}

#[tokio::test]
async fn send_event_resumes_the_job_get_shows_its_key_and_a_resend_says_so() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "events", 1)).await;
    let url = serve(&node).await;
    let envelope = workflow::testkit::event_workflow(&server.target(), json!({}));
    let job_id = node.submit(&envelope, json!({ "text": "9" })).await;
    node.wait_for_status(&job_id, "WAITING", Duration::from_secs(30))
        .await;
    let shown = cli(&url, &["get", &job_id]).await;
    assert!(
        text(&shown).contains("step paid waits on key order-9"),
        "{}",
        text(&shown)
    );
    let args = [
        "send-event",
        "order-9",
        "--payload",
        r#"{"notes": "ok", "score": 2}"#,
        "--event-id",
        "e-9",
    ];
    let sent = cli(&url, &args).await;
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent));
    assert!(
        text(&sent).contains(&format!("resumed  {job_id} step paid (QUEUED)")),
        "{}",
        text(&sent)
    );
    let again = cli(&url, &args).await;
    assert!(
        text(&again).contains("sent before: nothing resumed"),
        "{}",
        text(&again)
    );
    node.wait_for_status(&job_id, "COMPLETED", Duration::from_secs(30))
        .await;
    let bad = cli(&url, &["send-event", "order-9", "--payload", "not json"]).await;
    assert_ne!(bad.status.code(), Some(0), "{}", text(&bad));
}

#[tokio::test]
async fn pause_resume_and_drain_act_on_the_fleet_and_get_says_what_holds_a_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "flow", 2)).await;
    let url = serve(&node).await;
    let mut envelope = workflow::testkit::leaf_workflow(&server.target());
    envelope["concurrency"] = json!([{ "key": "input.text", "limit": 1 }]);
    let first = node.submit(&envelope, json!({ "text": "k" })).await;
    node.wait_for_status(&first, "COMPLETED", Duration::from_secs(30))
        .await;

    let paused = cli(&url, &["pause", "--workflow", "leaf", "--reason", "a test"]).await;
    assert_eq!(paused.status.code(), Some(0), "{}", text(&paused));
    assert!(
        text(&paused).contains("workflow leaf paused"),
        "{}",
        text(&paused)
    );
    let again = cli(&url, &["pause", "--workflow", "leaf"]).await;
    assert!(text(&again).contains("already paused"), "{}", text(&again));
    let held = node.submit(&envelope, json!({ "text": "k" })).await;
    let shown = cli(&url, &["get", &held]).await;
    assert!(
        text(&shown).contains("key       leaf:input.text=k")
            && text(&shown).contains("held      its workflow is paused"),
        "{}",
        text(&shown)
    );
    let unknown = cli(&url, &["pause", "--workflow", "no-such"]).await;
    assert_eq!(unknown.status.code(), Some(3), "{}", text(&unknown));

    let drained = cli(&url, &["--json", "node", "drain"]).await;
    assert_eq!(drained.status.code(), Some(0), "{}", text(&drained));
    assert_eq!(json_lines(&drained)[0]["draining"], true);
    let resumed = cli(&url, &["resume", "--workflow", "leaf"]).await;
    assert!(
        text(&resumed).contains("workflow leaf resumed"),
        "{}",
        text(&resumed)
    );
    // Draining: resumed, but this node still claims nothing.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(node.job(&held).await["status"], "QUEUED");
    let claiming = cli(&url, &["node", "drain", "--off"]).await;
    assert!(
        text(&claiming).contains("claiming again"),
        "{}",
        text(&claiming)
    );
    node.wait_for_status(&held, "COMPLETED", Duration::from_secs(30))
        .await;
    let by_key = cli(&url, &["pause", "--key", "leaf:input.text=k"]).await;
    assert!(
        text(&by_key).contains("key leaf:input.text=k paused"),
        "{}",
        text(&by_key)
    );
    // The fleet at a glance: the paused key and its running count against its limit,
    // and the database server the node reached.
    let fleet = cli(&url, &["fleet"]).await;
    assert_eq!(fleet.status.code(), Some(0), "{}", text(&fleet));
    assert!(
        text(&fleet).contains("paused    key leaf:input.text=k") && text(&fleet).contains("0/1"),
        "{}",
        text(&fleet)
    );
    let primary = node.ok("get-fleet", json!({})).await["database"]["primary"]
        .as_str()
        .expect("a primary")
        .to_owned();
    assert!(
        text(&fleet).contains(&format!("database  primary {primary}")),
        "{}",
        text(&fleet)
    );
    node.stop().await;
}

#[tokio::test]
async fn schedules_put_list_get_pause_resume_trigger_and_delete_from_the_command_line() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let mut config = test_config(&db.url, "schedules", 2);
    config.schedule_poll_ms = 0;
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": workflow::testkit::leaf_workflow(&server.target()) }),
    )
    .await;
    let url = serve(&node).await;

    let put = cli(
        &url,
        &[
            "schedules",
            "put",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--timezone",
            "America/New_York",
            "--workflow",
            "leaf",
            "--input",
            r#"{"text":"night"}"#,
        ],
    )
    .await;
    assert_eq!(put.status.code(), Some(0), "{}", text(&put));
    assert!(
        text(&put).contains("schedule nightly made"),
        "{}",
        text(&put)
    );
    assert!(text(&put).contains("(America/New_York)"), "{}", text(&put));

    let listed = cli(&url, &["--json", "schedules", "list"]).await;
    let rows = json_lines(&listed);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["name"], "nightly");
    assert_eq!(rows[0]["nextFireTimes"].as_array().map(Vec::len), Some(5));

    let paused = cli(
        &url,
        &["schedules", "pause", "nightly", "--reason", "a test"],
    )
    .await;
    assert!(
        text(&paused).contains("schedule nightly paused"),
        "{}",
        text(&paused)
    );
    let shown = cli(&url, &["schedules", "get", "nightly"]).await;
    assert!(
        text(&shown).contains("paused    a test"),
        "{}",
        text(&shown)
    );
    let resumed = cli(&url, &["schedules", "resume", "nightly"]).await;
    assert!(
        text(&resumed).contains("schedule nightly resumed"),
        "{}",
        text(&resumed)
    );

    let triggered = cli(&url, &["--json", "schedules", "trigger", "nightly"]).await;
    assert_eq!(triggered.status.code(), Some(0), "{}", text(&triggered));
    let job_id = json_lines(&triggered)[0]["jobId"]
        .as_str()
        .expect("a job id")
        .to_owned();
    node.wait_for_status(&job_id, "COMPLETED", Duration::from_secs(30))
        .await;
    let shown = cli(&url, &["schedules", "get", "nightly"]).await;
    assert!(
        text(&shown).contains(&job_id),
        "the trigger's job is listed: {}",
        text(&shown)
    );

    // A refusal names the field and exits 3; an unknown schedule too.
    let bad = cli(
        &url,
        &[
            "schedules",
            "put",
            "bad",
            "--cron",
            "61 * * * *",
            "--workflow",
            "leaf",
        ],
    )
    .await;
    assert_eq!(bad.status.code(), Some(3), "{}", text(&bad));
    assert!(text(&bad).contains("cron"), "{}", text(&bad));
    let unknown = cli(&url, &["schedules", "trigger", "no-such"]).await;
    assert_eq!(unknown.status.code(), Some(3), "{}", text(&unknown));

    let deleted = cli(&url, &["schedules", "delete", "nightly"]).await;
    assert!(
        text(&deleted).contains("schedule nightly deleted"),
        "{}",
        text(&deleted)
    );
    let none = cli(&url, &["--json", "schedules", "list"]).await;
    assert!(json_lines(&none).is_empty());
}

#[tokio::test]
async fn openapi_prints_the_nodes_document_with_every_verb() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "openapi", 0)).await;
    let url = serve(&node).await;
    let printed = cli(&url, &["openapi"]).await;
    assert_eq!(printed.status.code(), Some(0), "{}", text(&printed));
    let document: Value = serde_json::from_slice(&printed.stdout).expect("the document is JSON");
    assert_eq!(document["openapi"], "3.1.0");
    for verb in ["submit-workflow", "get-job", "put-schedule", "put-workflow"] {
        assert!(
            document["paths"][format!("/v1/actions/{verb}")]["post"].is_object(),
            "{verb}"
        );
    }
}

#[tokio::test]
async fn submit_and_list_take_metadata_with_meta() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "meta", 0)).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": workflow::testkit::leaf_workflow(&server.target()) }),
    )
    .await;
    let url = serve(&node).await;
    let submitted = cli(
        &url,
        &[
            "--json",
            "submit",
            "--name",
            "leaf",
            "--input",
            r#"{"text":"m"}"#,
            "--meta",
            "customer=acme",
            "--meta",
            "region=eu",
        ],
    )
    .await;
    assert_eq!(submitted.status.code(), Some(0), "{}", text(&submitted));
    let job_id = json_lines(&submitted)[0]["jobId"]
        .as_str()
        .expect("an id")
        .to_owned();
    cli(
        &url,
        &[
            "submit",
            "--name",
            "leaf",
            "--input",
            r#"{"text":"n"}"#,
            "--meta",
            "customer=other",
        ],
    )
    .await;
    let listed = cli(&url, &["--json", "list", "--meta", "customer=acme"]).await;
    let rows = json_lines(&listed);
    assert_eq!(rows.len(), 1, "{}", text(&listed));
    assert_eq!(rows[0]["jobId"], job_id);
    assert_eq!(rows[0]["metadata"]["region"], "eu");
    let bad = cli(&url, &["list", "--meta", "no-equals-sign"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}
