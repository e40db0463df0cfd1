//! The `protomolt-node` binary: config errors are one clear line and a non-zero exit;
//! the demo runs the example workflow.

use std::process::{Command, Output};

fn node(args: &[&str], config: Option<&str>, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_protomolt-node"));
    command
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BOOTSTRAP");
    for (key, value) in env {
        command.env(key, value);
    }
    if let Some(config) = config {
        let path = dir.path().join("node.toml");
        std::fs::write(&path, config).unwrap();
        command.arg("--config").arg(&path);
    }
    command.args(args).output().expect("the binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn binding_beyond_loopback_without_auth_is_refused() {
    let output = node(&["run"], Some("[node]\nbind = \"0.0.0.0:18080\"\n"), &[]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("refusing to bind 0.0.0.0:18080 without [auth]"),
        "{err}"
    );

    // The same through the environment.
    let output = node(&["run"], None, &[("PROTOMOLT_NODE__BIND", "0.0.0.0:18081")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("refusing to bind 0.0.0.0:18081"));
}

#[test]
fn invalid_configs_fail_with_one_line() {
    let output = node(
        &["check-config"],
        Some("[node]\nbnid = \"127.0.0.1:1\"\n"),
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.starts_with("protomolt-node: invalid config:"), "{err}");
    assert!(err.contains("bnid"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    let output = node(
        &["check-config"],
        Some("[node]\nroles = [\"registry\", \"nope\"]\n"),
        &[],
    );
    assert!(stderr(&output).contains("unknown role 'nope'"));

    let output = node(
        &["check-config"],
        None,
        &[("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "soon")],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output)
            .to_lowercase()
            .contains("node.shutdown_grace_ms"),
        "{}",
        stderr(&output)
    );

    let output = node(
        &["--config", "/no/such/node.toml", "check-config"],
        None,
        &[],
    );
    assert!(stderr(&output).contains("does not exist"));
}

#[test]
fn a_role_without_its_requirement_refuses_to_boot() {
    let output = node(
        &["run"],
        Some("[node]\nroles = [\"parse\"]\nbind = \"127.0.0.1:0\"\n"),
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("role 'parse' requires role 'registry', which is not mounted on this node"),
        "{err}"
    );
}

#[test]
fn the_demo_runs_the_example_workflow() {
    // Variables without a section (like the set-up script's PROTOMOLT_DEV) are not config.
    let output = node(
        &["demo", "--once"],
        None,
        &[("PROTOMOLT_DEV", "/somewhere/dev")],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", stderr(&output));
    assert!(
        stdout.contains("stored workflow \"embed-text\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"sourceText\": \"hello world\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"vector\": ["), "{stdout}");
    assert!(
        stdout.contains("no database"),
        "without a database the jobs part is skipped: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_runs_a_job_that_parks_and_completes() {
    let db = protomolt_e2e::TestDatabase::create().await;
    let url = db.url.clone();
    let output = tokio::task::spawn_blocking(move || {
        node(&["demo", "--once"], None, &[("DATABASE_URL", &url)])
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", stderr(&output));
    assert!(
        stdout.contains("the job parked on step 'review'"),
        "{stdout}"
    );
    assert!(stdout.contains("\"outcome\":\"COMPLETED\""), "{stdout}");
    assert!(
        stdout.contains("\"verdict\": \"3 steps, output jobs.test.Embedding\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"notes\": \"looks right\""), "{stdout}");
    assert!(
        stdout.contains("base64 characters of descriptors"),
        "{stdout}"
    );
}

#[test]
fn environment_values_for_string_keys_stay_strings() {
    let output = node(
        &["check-config"],
        None,
        &[
            ("PROTOMOLT_JOBS__WORKER_ID", "123"),
            ("PROTOMOLT_JOBS__WORKER_COUNT", "2"),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout.contains("worker_id: \"123\""), "{stdout}");
    assert!(stdout.contains("worker_count: 2"), "{stdout}");
}
