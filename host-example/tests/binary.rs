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

    for (config, expected) in [
        (
            "[workflow.outbound]\nallow = [\"api.internal\"]\n",
            "invalid config: workflow.outbound.allow[0]: 'api.internal' has no port",
        ),
        (
            "[workflow.outbound]\ndeny_addresses = [\"metadata\"]\n",
            "workflow.outbound.deny_addresses[0]: 'metadata' is not an IP address or a CIDR range",
        ),
        (
            "[node]\nallowed_hosts = [\"http://jobs.internal\"]\n",
            "node.allowed_hosts entry 'http://jobs.internal' must be a host name or host:port",
        ),
    ] {
        let output = node(&["check-config"], Some(config), &[]);
        assert_eq!(output.status.code(), Some(2), "{config}");
        let err = stderr(&output);
        assert!(err.contains(expected), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }

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
        stdout.contains(
            "the job parked on step 'review', waiting for a human to approve the request {\"text\":\"hello world\"}"
        ),
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
fn a_node_grace_shorter_than_the_jobs_grace_is_refused_in_one_line() {
    let output = node(
        &["check-config"],
        Some("[node]\nroles = [\"registry\", \"jobs\"]\nshutdown_grace_ms = 2000\n"),
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "protomolt-node: invalid config: [node].shutdown_grace_ms (2000) must be greater than [jobs].shutdown_grace_ms (20000): running jobs need the node to wait for their grace\n"
    );
}

#[test]
fn environment_values_for_string_keys_stay_strings() {
    let output = node(
        &["check-config"],
        None,
        &[
            ("PROTOMOLT_JOBS__WORKER_ID", "123"),
            ("PROTOMOLT_JOBS__MAX_IN_FLIGHT", "2"),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout.contains("worker_id = \"123\""), "{stdout}");
    assert!(stdout.contains("max_in_flight = 2"), "{stdout}");
}

#[test]
fn check_config_names_the_closest_valid_key_to_a_misspelled_one() {
    let output = node(&["check-config"], Some("[jobs]\nworkers_count = 3\n"), &[]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.starts_with("protomolt-node: invalid config: unknown key jobs.workers_count (in "),
        "{err}"
    );
    assert!(
        err.ends_with("node.toml); did you mean jobs.worker_count?\n"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let output = node(
        &["check-config"],
        None,
        &[("PROTOMOLT_JOBS__WORKERS_COUNT", "3")],
    );
    assert_eq!(
        stderr(&output),
        "protomolt-node: invalid config: unknown key jobs.workers_count (from PROTOMOLT_JOBS__WORKERS_COUNT); did you mean jobs.worker_count (PROTOMOLT_JOBS__WORKER_COUNT)?\n"
    );
}

#[test]
fn check_config_refuses_the_roles_run_refuses() {
    let config = "[node]\nroles = [\"jobs\"]\nbind = \"127.0.0.1:0\"\n";
    let refusal = "role 'jobs' requires role 'registry', which is not mounted on this node: add \"registry\" to [node].roles";
    let check = node(&["check-config"], Some(config), &[]);
    assert_eq!(check.status.code(), Some(2));
    assert_eq!(
        stderr(&check),
        format!("protomolt-node: invalid config: {refusal}\n")
    );
    assert!(
        check.stdout.is_empty(),
        "nothing printed for a refused config"
    );
    let run = node(&["run"], Some(config), &[]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains(refusal), "{}", stderr(&run));
}

#[test]
fn variables_that_set_no_config_key_are_warned_about_naming_the_one_meant() {
    let warning = "PROTOMOLT_JOBS_WORKER_COUNT sets no config key and is ignored; did you mean PROTOMOLT_JOBS__WORKER_COUNT (jobs.worker_count)?";
    let env = [
        ("PROTOMOLT_JOBS_WORKER_COUNT", "3"),
        // The project's own variables are not config, and not warned about.
        ("PROTOMOLT_DEV", "/somewhere/dev"),
        ("PROTOMOLT_URL", "http://127.0.0.1:1"),
    ];
    let check = node(&["check-config"], None, &env);
    assert!(check.status.success(), "{}", stderr(&check));
    assert_eq!(
        stderr(&check),
        format!("protomolt-node: warning: {warning}\n")
    );

    // At start-up, as a log line (this run then stops: parse needs registry).
    let run = node(
        &["run"],
        Some("[node]\nroles = [\"parse\"]\nbind = \"127.0.0.1:0\"\n"),
        &env,
    );
    let err = stderr(&run);
    let line = err
        .lines()
        .find(|line| line.contains(warning))
        .unwrap_or_else(|| panic!("no warning in {err}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(!err.contains("PROTOMOLT_DEV"), "{err}");
    assert!(!err.contains("PROTOMOLT_URL"), "{err}");
}

#[test]
fn check_config_prints_toml_with_the_secrets_masked() {
    let output = node(
        &["check-config"],
        Some(concat!(
            "[node]\nroles = [\"registry\", \"jobs\"]\n",
            "[[auth.tokens]]\nname = \"ci\"\ntoken = \"token-0123456789-abcdef\"\nscopes = [\"*\"]\n",
            "[jobs]\nworker_id = \"node-a\"\n",
        )),
        &[
            (
                "PROTOMOLT_JOBS__DATABASE_URL",
                "postgres://app:hunter2@db:5432/protomolt",
            ),
            ("PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD", "kafka-pass"),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", stderr(&output));
    for secret in ["hunter2", "token-0123456789-abcdef", "kafka-pass"] {
        assert!(!stdout.contains(secret), "{secret} printed:\n{stdout}");
    }
    let config: toml::Value = stdout.parse().expect("check-config prints TOML");
    assert_eq!(
        config["jobs"]["database_url"].as_str(),
        Some("postgres://app:***@db:5432/protomolt")
    );
    assert_eq!(
        config["jobs"]["kafka_options"]["sasl.password"].as_str(),
        Some("***")
    );
    assert_eq!(config["auth"]["tokens"][0]["token"].as_str(), Some("***"));
    assert_eq!(config["jobs"]["worker_id"].as_str(), Some("node-a"));
    assert_eq!(config["node"]["bind"].as_str(), Some("127.0.0.1:8080"));
    assert_eq!(
        config["jobs"]["shutdown_grace_ms"].as_integer(),
        Some(20_000)
    );
}

/// Kills the node if a test fails before it exits.
struct Running(std::process::Child);

/// `protomolt-node --config CONFIG run` in `dir`, its logs (at `rust_log`, colour
/// left to the node) on a pipe; the node is killed when the first value drops.
fn run_with_piped_logs(
    dir: &std::path::Path,
    config: &std::path::Path,
    rust_log: &str,
) -> (Running, std::process::ChildStderr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_protomolt-node"))
        .current_dir(dir)
        .env("RUST_LOG", rust_log)
        .env_remove("NO_COLOR")
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BOOTSTRAP")
        .arg("--config")
        .arg(config)
        .arg("run")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let logs = child.stderr.take().unwrap();
    (Running(child), logs)
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sigterm_stops_the_node_within_its_grace_despite_an_in_flight_run() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::time::{Duration, Instant};

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let slow = runtime.block_on(workflow::testkit::FixtureServer::start_with(
        workflow::testkit::FixtureOptions {
            embed_delay: Some(Duration::from_secs(30)),
            ..Default::default()
        },
    ));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        "[node]\nbind = \"127.0.0.1:0\"\nshutdown_grace_ms = 1000\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_protomolt-node"))
        .current_dir(dir.path())
        .env("RUST_LOG", "info")
        .env_remove("DATABASE_URL")
        .env_remove("KAFKA_BOOTSTRAP")
        .args(["--log-format", "json", "--config"])
        .arg(&config)
        .arg("run")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let logs = child.stderr.take().unwrap();
    let mut node = Running(child);
    let (lines, log) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(logs).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });

    // The node logs the address it bound once it serves.
    let addr = loop {
        let line = log
            .recv_timeout(Duration::from_secs(30))
            .expect("the node logs that it serves");
        let entry: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(addr) = entry["fields"]["addr"].as_str() {
            break addr.to_owned();
        }
    };

    let body = serde_json::json!({
        "workflow": workflow::testkit::two_step_workflow(&slow.target()),
        "input": { "text": "hi" },
    })
    .to_string();
    let caller = std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        let request = format!(
            "POST /v1/actions/run-workflow HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        // Ends when the node closes the connection.
        let _ = stream.read_to_string(&mut response);
        response
    });
    let in_flight = Instant::now() + Duration::from_secs(30);
    while slow.stats.embed_calls() == 0 {
        assert!(Instant::now() < in_flight, "the run reaches its slow step");
        std::thread::sleep(Duration::from_millis(10));
    }

    let signalled = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &node.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let exited = loop {
        if let Some(status) = node.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(6),
            "the node is still running 6 s after SIGTERM with a 1 s grace"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = signalled.elapsed();
    assert!(exited.success(), "{exited:?}");
    assert!(
        took >= Duration::from_millis(900),
        "it waited for the grace: {took:?}"
    );
    let response = caller.join().unwrap();
    assert!(
        !response.contains("200 OK"),
        "the run did not finish: {response}"
    );
    let rest: Vec<String> = log.iter().collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("requests still in flight after the shutdown grace")),
        "{rest:?}"
    );
}

#[test]
fn logs_written_to_a_pipe_carry_no_colour_codes() {
    use std::io::{BufRead, BufReader};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(&config, "[node]\nbind = \"127.0.0.1:0\"\n").unwrap();
    let (_node, logs) = run_with_piped_logs(dir.path(), &config, "info");
    let (lines, log) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(logs).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    // Up to the line saying where it serves: plain text, no escape sequences.
    loop {
        let line = log
            .recv_timeout(Duration::from_secs(30))
            .expect("the node logs that it serves");
        assert!(
            !line.contains('\u{1b}'),
            "a colour code in a piped log: {line:?}"
        );
        if line.contains("addr") {
            break;
        }
    }
}

#[tokio::test]
async fn a_missing_events_topic_is_named_with_how_to_create_it_not_called_an_outage() {
    use std::io::{BufRead, BufReader};
    use std::time::Duration;

    let db = protomolt_e2e::TestDatabase::create().await;
    let bootstrap = protomolt_e2e::kafka_bootstrap();
    // A typo a newcomer makes; the requests topic exists.
    let typo = format!("ux-evnets-{}", uuid::Uuid::new_v4().simple());
    let requests = protomolt_e2e::unique_topic("requests");
    protomolt_e2e::create_topic(&requests, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nroles = [\"registry\", \"jobs\"]\nbind = \"127.0.0.1:0\"\n\
             [jobs]\ndatabase_url = \"{}\"\nworker_id = \"typo\"\nkafka_bootstrap = \"{bootstrap}\"\n\
             events_topic = \"{typo}\"\nrequests_topic = \"{requests}\"\n",
            db.url
        ),
    )
    .unwrap();
    let (_node, logs) = run_with_piped_logs(dir.path(), &config, "warn");
    let expected = format!(
        "topic '{typo}' does not exist on {bootstrap}: create it (`tansu topic create {typo}"
    );
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(logs).lines().map_while(Result::ok) {
            let found = line.contains(&expected);
            seen.push(line);
            if found {
                return Ok(seen);
            }
        }
        Err(seen)
    });
    let seen = tokio::time::timeout(Duration::from_secs(60), seen)
        .await
        .expect("the node names the missing topic within a minute")
        .unwrap()
        .unwrap_or_else(|lines| panic!("never named the topic: {lines:#?}"));
    assert!(
        !seen
            .iter()
            .any(|line| line.contains("the broker does not answer")),
        "a missing topic is not an outage: {seen:#?}"
    );
}

/// One HTTP/1.1 request over a fresh connection: the status line's code and the whole
/// answer.
fn http_call(addr: &str, verb: &str, headers: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST /v1/actions/{verb} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[test]
fn a_token_given_by_its_digest_works_and_no_secret_reaches_the_log() {
    use std::io::{BufRead, BufReader};
    use std::time::Duration;

    let token = "pm_clear-token-never-logged-0123456789";
    let wrong = "pm_wrong-token-never-logged-0123456789";
    let digest = registry_stub::auth::sha256_hex(token);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nbind = \"127.0.0.1:0\"\n\
             [auth]\n[[auth.tokens]]\nname = \"digest-reader\"\ntoken_sha256 = \"{digest}\"\n\
             scopes = [\"registry:read\"]\nrequests_per_minute = 2\n"
        ),
    )
    .unwrap();
    // Every level, every crate: whatever logs a header would show it.
    let (node, logs) = run_with_piped_logs(dir.path(), &config, "trace");
    let (lines, log) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(logs).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    let addr = loop {
        let line = log
            .recv_timeout(Duration::from_secs(30))
            .expect("the node logs that it serves");
        seen.push(line.clone());
        if line.contains("serving POST")
            && let Some(addr) = line.split("addr=").nth(1)
        {
            break addr.split_whitespace().next().unwrap().to_owned();
        }
    };

    let bearer = format!("Authorization: Bearer {token}\r\n");
    let (status, answer) = http_call(&addr, "list-workflows", &bearer, "{}");
    assert_eq!(status, 200, "the digest accepts the token: {answer}");
    let (status, answer) = http_call(
        &addr,
        "list-workflows",
        &format!("Authorization: Bearer {wrong}\r\n"),
        "{}",
    );
    assert_eq!(status, 401, "{answer}");
    let (status, answer) = http_call(&addr, "put-workflow", &bearer, "{}");
    assert_eq!(status, 403, "the token lacks registry:write: {answer}");
    let (status, answer) = http_call(&addr, "list-workflows", &bearer, "{}");
    assert_eq!(
        status, 429,
        "the third authenticated request in a minute: {answer}"
    );
    assert!(answer.contains("retry-after: "), "{answer}");
    drop(node);
    seen.extend(log.iter());

    let logged = seen.join("\n");
    assert!(!logged.contains(token), "the token was logged");
    assert!(!logged.contains(wrong), "a presented token was logged");
    assert!(!logged.contains(&digest), "the digest was logged");
    let refusals: Vec<&String> = seen
        .iter()
        .filter(|line| line.contains("request refused") || line.contains("budget exhausted"))
        .collect();
    assert_eq!(refusals.len(), 3, "one line per refusal: {refusals:#?}");
    assert!(
        refusals[0].contains("(none)") && refusals[0].contains("unauthenticated"),
        "an unknown token is logged without its secret: {}",
        refusals[0]
    );
    for refusal in &refusals[1..] {
        assert!(refusal.contains("digest-reader"), "{refusal}");
    }
}
