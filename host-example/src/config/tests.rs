//! Tests of the config as a user meets it: loading, its errors and warnings, the
//! printed form.

use std::path::PathBuf;

use registry_stub::config::NodeSection;

use super::env::NOT_CONFIG_VARIABLES;
use super::keys::{KeyKind, PREFIX, config_keys};
use super::masking::{mask_key_value_password, mask_url};
use super::*;

fn load(vars: &[(&str, &str)]) -> Result<HostConfig, String> {
    HostConfig::load_with(None, EnvOverrides::new(vars.iter().copied()))
}

/// Loads `toml` from a file (no environment); the error has the file's path
/// replaced by `FILE`.
fn load_file(toml: &str) -> Result<HostConfig, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    std::fs::write(&path, toml).unwrap();
    HostConfig::load_with(Some(&path), EnvOverrides::default())
        .map_err(|e| e.replace(&path.display().to_string(), "FILE"))
}

#[test]
fn a_misspelled_key_names_the_closest_valid_key() {
    let err = load_file("[jobs]\nworkers_count = 3\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown key jobs.workers_count (in FILE); did you mean jobs.worker_count?"
    );
    // No figment profile prefix, no list of every key.
    assert!(!err.contains("default."), "{err}");

    let err = load_file("[jobs.retention]\ncompleted = 1\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown key jobs.retention.completed (in FILE); did you mean jobs.retention.completed_ms?"
    );
    let err = load_file("[[registry.tls]]\ntargts = \"*:443\"\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown key registry.tls[0].targts (in FILE); did you mean registry.tls[0].targets?"
    );
}

#[test]
fn a_misspelled_section_names_the_closest_section() {
    let err = load_file("[nodes]\nbind = \"127.0.0.1:1\"\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown section [nodes] (in FILE); did you mean [node]?"
    );
    let err = load_file("[zzz]\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown section [zzz] (in FILE); the sections are node, auth, registry, parse, jobs, telemetry, workflow"
    );
}

#[test]
fn an_unknown_key_with_no_close_name_lists_the_keys_of_its_section() {
    let err = load_file("[registry]\nzzz = 1\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown key registry.zzz (in FILE); the keys of [registry] are workflows_dir, run_timeout_ms, max_concurrent_runs, max_response_bytes, tls"
    );
}

#[test]
fn an_unknown_key_from_the_environment_names_its_variable_and_the_one_meant() {
    let err = load(&[("PROTOMOLT_JOBS__WORKERS_COUNT", "2")]).unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown key jobs.workers_count (from PROTOMOLT_JOBS__WORKERS_COUNT); did you mean jobs.worker_count (PROTOMOLT_JOBS__WORKER_COUNT)?"
    );
    // A `_FILE` variable is named as set.
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("bind");
    std::fs::write(&secret, "127.0.0.1:9").unwrap();
    let err = load(&[("PROTOMOLT_NODE__BIDN_FILE", secret.to_str().unwrap())]).unwrap_err();
    assert_eq!(
        err,
        "invalid config: unknown key node.bidn (from PROTOMOLT_NODE__BIDN_FILE); did you mean node.bind (PROTOMOLT_NODE__BIND)?"
    );
}

#[test]
fn a_toml_syntax_error_is_one_line_with_its_position() {
    let err = load_file("[node\nbind = 3\n").unwrap_err();
    assert_eq!(
        err,
        "invalid config: TOML parse error at line 1, column 6: invalid table header; expected `.`, `]` (in FILE)"
    );
}

#[test]
fn a_wrong_type_names_the_key_and_the_file_without_a_profile_prefix() {
    let err = load_file("[node]\nbind = 3\n").unwrap_err();
    assert!(
        err.starts_with("invalid config: node.bind (in FILE): invalid type"),
        "{err}"
    );
}

#[test]
fn a_variable_with_one_underscore_is_warned_about_naming_the_variable_meant() {
    let env = EnvOverrides::new([
        ("PROTOMOLT_JOBS_WORKER_COUNT", "3"),
        ("PROTOMOLT_JOBS_DATABASE_URL_FILE", "/run/secrets/db"),
        ("PROTOMOLT_JOBS_RETENTION_COMPLETEDMS", "1"),
        ("PROTOMOLT_WHATEVER", "1"),
    ]);
    assert_eq!(
        env.warnings(),
        [
            "PROTOMOLT_JOBS_DATABASE_URL_FILE sets no config key and is ignored; did you mean PROTOMOLT_JOBS__DATABASE_URL_FILE (jobs.database_url)?",
            "PROTOMOLT_JOBS_RETENTION_COMPLETEDMS sets no config key and is ignored; did you mean PROTOMOLT_JOBS__RETENTION__COMPLETED_MS (jobs.retention.completed_ms)?",
            "PROTOMOLT_JOBS_WORKER_COUNT sets no config key and is ignored; did you mean PROTOMOLT_JOBS__WORKER_COUNT (jobs.worker_count)?",
            "PROTOMOLT_WHATEVER sets no config key and is ignored: config variables are PROTOMOLT_<SECTION>__<KEY> (two underscores after the section) or PROTOMOLT_KAFKA_OPTION_<NAME>",
        ]
    );
    // A warning, not an error: the config still loads.
    assert!(load(&[("PROTOMOLT_JOBS_WORKER_COUNT", "3")]).is_ok());
}

#[test]
fn config_variables_and_the_projects_own_variables_are_not_warned_about() {
    let env = EnvOverrides::new([
        ("PROTOMOLT_DEV", "/work/dev"),
        ("PROTOMOLT_TANSU_ROOT", "/opt/tansu"),
        ("PROTOMOLT_URL", "http://127.0.0.1:8080"),
        ("PROTOMOLT_TOKEN", "t"),
        ("PROTOMOLT_NODE__BIND", "127.0.0.1:1"),
        ("PROTOMOLT_JOBS__DATABASE_URL_FILE", "/run/secrets/db"),
        ("PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD", "s"),
        ("PATH", "/bin"),
    ]);
    assert_eq!(env.warnings(), Vec::<String>::new());
}

/// Every `PROTOMOLT_*` name the repository's code and `./dev` use is either config
/// or in [`NOT_CONFIG_VARIABLES`], so the node never warns about the project's own
/// variables.
#[test]
fn every_protomolt_variable_the_repository_uses_is_config_or_allowed() {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    files(&path, out);
                }
            } else if name == "dev" || name.ends_with(".rs") || name.ends_with(".sh") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut paths = Vec::new();
    files(root, &mut paths);
    assert!(paths.iter().any(|p| p.ends_with("dev")), "{paths:?}");
    let mut unknown = Vec::new();
    for path in paths {
        // These spell wrong variables on purpose, to test the warnings.
        if path.starts_with(root.join("host-example/src/config"))
            || path.ends_with("host-example/tests/binary.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (at, _) in text.match_indices(PREFIX) {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name.ends_with('_') || EnvOverrides::parse_name(&name).is_some() {
                continue;
            }
            if !NOT_CONFIG_VARIABLES.contains(&name.as_str()) {
                unknown.push(format!("{name} in {}", path.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "add these to NOT_CONFIG_VARIABLES (with why) or make them config: {unknown:?}"
    );
}

#[test]
fn the_key_list_is_read_from_the_config_types() {
    let kind = |path: &str| {
        let path: Vec<String> = path.split('.').map(str::to_owned).collect();
        config_keys()
            .iter()
            .find(|key| key.path == path)
            .map(|key| key.kind)
    };
    assert_eq!(kind("node"), Some(KeyKind::Table));
    assert_eq!(kind("node.bind"), Some(KeyKind::Value));
    assert_eq!(kind("auth"), Some(KeyKind::Table));
    assert_eq!(kind("auth.tokens"), Some(KeyKind::Tables));
    assert_eq!(kind("registry.tls"), Some(KeyKind::Tables));
    assert_eq!(kind("jobs.worker_id"), Some(KeyKind::Value));
    // The old name is still a key.
    assert_eq!(kind("jobs.worker_count"), Some(KeyKind::Value));
    assert_eq!(kind("jobs.kafka_options"), Some(KeyKind::AnyKey));
    assert_eq!(kind("jobs.retention"), Some(KeyKind::Table));
    assert_eq!(kind("jobs.retention.completed_ms"), Some(KeyKind::Value));
    assert_eq!(kind("telemetry.otlp_endpoint"), Some(KeyKind::Value));
    assert_eq!(kind("jobs.nope"), None);
}

#[test]
fn the_printed_config_is_toml_with_every_secret_masked() {
    let config = load_file(
        r#"
[node]
roles = ["registry", "jobs"]

[[auth.tokens]]
name = "ci"
token = "token-0123456789-abcdef"
scopes = ["*"]

[jobs]
database_url = "postgres://app:hunter2@db:5432/protomolt?sslmode=require&sslpassword=pem-pass"
worker_id = "node-a"
schema_registry_url = "https://registry:reg-pass@schemas:8081"

[jobs.kafka_options]
"sasl.password" = "kafka-pass"
"sasl.username" = "kafka-user"
"ssl.key.pem" = "PEM-KEY"
"sasl.oauthbearer.client.secret" = "oauth-secret"
"security.protocol" = "SASL_SSL"

[telemetry]
otlp_endpoint = "http://otel:otel-pass@collector:4317"
"#,
    )
    .unwrap();
    let printed = config.to_masked_toml().unwrap();
    for secret in [
        "hunter2",
        "pem-pass",
        "token-0123456789-abcdef",
        "reg-pass",
        "kafka-pass",
        "kafka-user",
        "PEM-KEY",
        "oauth-secret",
        "otel-pass",
    ] {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
    }
    let value: toml::Value = printed.parse().unwrap();
    assert_eq!(
        value["jobs"]["database_url"].as_str(),
        Some("postgres://app:***@db:5432/protomolt?sslmode=require&sslpassword=***")
    );
    assert_eq!(value["auth"]["tokens"][0]["token"].as_str(), Some("***"));
    assert_eq!(value["auth"]["tokens"][0]["name"].as_str(), Some("ci"));
    assert_eq!(
        value["jobs"]["kafka_options"]["security.protocol"].as_str(),
        Some("SASL_SSL")
    );
    assert_eq!(
        value["telemetry"]["otlp_endpoint"].as_str(),
        Some("http://otel:***@collector:4317")
    );
    // Defaults are filled in, in the structs' order; not a Rust debug dump.
    assert_eq!(value["jobs"]["lease_ms"].as_integer(), Some(300_000));
    assert!(
        printed.contains("\n[node]\nbind = \"127.0.0.1:8080\"\n"),
        "{printed}"
    );
    assert!(!printed.contains("HostConfig"), "{printed}");
}

#[test]
fn the_printed_config_loads_back_as_the_same_config() {
    let config = load_file(
        "[node]\nroles = [\"registry\", \"parse\"]\n[[registry.tls]]\ntargets = \"*:443\"\nca_file = \"/ca.pem\"\n[jobs.retention]\ncompleted_ms = 1000\n",
    )
    .unwrap();
    let printed = config.to_masked_toml().unwrap();
    let reloaded = load_file(&printed).unwrap();
    assert_eq!(reloaded.to_masked_toml().unwrap(), printed);
}

#[test]
fn a_database_url_in_key_value_form_loses_only_its_password() {
    assert_eq!(
        mask_key_value_password("host=db user=app password=hunter2 dbname=p"),
        "host=db user=app password=*** dbname=p"
    );
    assert_eq!(
        mask_key_value_password(r"host=db password = 'a b\' c' sslpassword=x"),
        "host=db password = *** sslpassword=***"
    );
    assert_eq!(mask_key_value_password("host=db"), "host=db");
    assert_eq!(
        mask_url("postgres://postgres@db/p"),
        "postgres://postgres@db/p"
    );
    assert_eq!(mask_url("postgres://u:p@ss@db/p"), "postgres://u:***@db/p");
    // Unencoded `/`, `?`, `#` in a password: the drivers still end it at the `@`.
    for url in [
        "postgres://app:pa/ss#word@db.internal:5432/jobs",
        "postgres://app:s3cr?et@db/jobs",
    ] {
        let masked = mask_url(url);
        assert!(
            masked.starts_with("postgres://app:***@db")
                && !masked.contains("ss#word")
                && !masked.contains("s3cr"),
            "{masked}"
        );
    }
    assert_eq!(
        mask_key_value_password(r"host=db user=app password=my\ secret dbname=p"),
        "host=db user=app password=*** dbname=p"
    );
    let config = load(&[(
        "PROTOMOLT_JOBS__DATABASE_URL",
        "host=db user=app password=hunter2",
    )])
    .unwrap();
    let printed = config.to_masked_toml().unwrap();
    assert!(
        printed.contains("database_url = \"host=db user=app password=***\""),
        "{printed}"
    );
}

#[test]
fn a_numeric_looking_value_for_a_string_key_stays_a_string() {
    let config = load(&[("PROTOMOLT_JOBS__WORKER_ID", "123")]).unwrap();
    assert_eq!(config.jobs.worker_id, "123");
    let config = load(&[("PROTOMOLT_JOBS__WORKER_ID", "true")]).unwrap();
    assert_eq!(config.jobs.worker_id, "true");
}

#[test]
fn numeric_and_list_keys_still_parse_from_the_environment() {
    let config = load(&[
        ("PROTOMOLT_JOBS__MAX_IN_FLIGHT", "2"),
        ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "45000"),
        ("PROTOMOLT_NODE__ROLES", "[registry,parse]"),
        ("PROTOMOLT_REGISTRY__MAX_CONCURRENT_RUNS", "3"),
    ])
    .unwrap();
    assert_eq!(config.jobs.max_in_flight, 2);
    assert_eq!(config.node.shutdown_grace_ms, 45_000);
    assert_eq!(config.node.roles, ["registry", "parse"]);
    assert_eq!(config.registry.max_concurrent_runs, 3);

    let err = load(&[("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "soon")]).unwrap_err();
    assert!(
        err.contains("node.shutdown_grace_ms (from PROTOMOLT_NODE__SHUTDOWN_GRACE_MS)"),
        "{err}"
    );
}

#[test]
fn a_kafka_option_comes_from_the_environment_with_dots_in_its_name() {
    let config = load(&[
        ("PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD", "s3cret"),
        ("PROTOMOLT_KAFKA_OPTION_SECURITY_PROTOCOL", "SASL_SSL"),
        ("PROTOMOLT_KAFKA_OPTION_SASL_KERBEROS_KINIT__CMD", "kinit"),
        // Verbatim: not a list, not a number.
        ("PROTOMOLT_KAFKA_OPTION_SASL_USERNAME", "[007"),
    ])
    .unwrap();
    let options = &config.jobs.kafka_options;
    assert_eq!(options["sasl.password"], "s3cret");
    assert_eq!(options["security.protocol"], "SASL_SSL");
    assert_eq!(options["sasl.kerberos.kinit_cmd"], "kinit");
    assert_eq!(options["sasl.username"], "[007");
}

#[test]
fn a_file_form_reads_the_secret_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::write(&db, "postgres://u:p@db/protomolt\n").unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "from-file").unwrap();
    let config = load(&[
        ("PROTOMOLT_JOBS__DATABASE_URL", "postgres://plain"),
        ("PROTOMOLT_JOBS__DATABASE_URL_FILE", db.to_str().unwrap()),
        (
            "PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD_FILE",
            password.to_str().unwrap(),
        ),
        ("PROTOMOLT_JOBS__WORKER_ID", "w1"),
    ])
    .unwrap();
    assert_eq!(
        config.jobs.database_url.as_deref(),
        Some("postgres://u:p@db/protomolt")
    );
    assert_eq!(config.jobs.kafka_options["sasl.password"], "from-file");

    let err = load(&[("PROTOMOLT_JOBS__DATABASE_URL_FILE", "/no/such/secret")]).unwrap_err();
    assert!(
        err.contains("PROTOMOLT_JOBS__DATABASE_URL_FILE: cannot read /no/such/secret"),
        "{err}"
    );

    // Not a secret: /dev/zero is refused after a megabyte, not read until memory
    // runs out.
    let err = load(&[("PROTOMOLT_JOBS__WORKER_ID_FILE", "/dev/zero")]).unwrap_err();
    assert!(err.contains("larger than 1048576 bytes"), "{err}");
}

#[test]
fn variables_without_a_section_are_not_config() {
    let config = load(&[("PROTOMOLT_DEV", "/somewhere"), ("PROTOMOLT_", "x")]).unwrap();
    assert_eq!(config.node, NodeSection::default());
}

#[test]
fn the_node_grace_must_exceed_the_jobs_grace_when_jobs_run() {
    let err = load(&[
        ("PROTOMOLT_NODE__ROLES", "[registry,jobs]"),
        ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "2000"),
    ])
    .unwrap_err();
    assert_eq!(
        err,
        "invalid config: [node].shutdown_grace_ms (2000) must be greater than [jobs].shutdown_grace_ms (20000): running jobs need the node to wait for their grace"
    );
    // Equal is not enough: the node must outlast the jobs' grace.
    assert!(
        load(&[
            ("PROTOMOLT_NODE__ROLES", "[registry,jobs]"),
            ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "20000"),
        ])
        .is_err()
    );
    assert!(
        load(&[
            ("PROTOMOLT_NODE__ROLES", "[registry,jobs]"),
            ("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "25000"),
        ])
        .is_ok()
    );
    // Without the jobs role there are no jobs to wait for.
    assert!(load(&[("PROTOMOLT_NODE__SHUTDOWN_GRACE_MS", "2000")]).is_ok());
}

#[test]
fn zero_run_limits_are_refused_naming_the_key() {
    let err = load(&[("PROTOMOLT_REGISTRY__MAX_CONCURRENT_RUNS", "0")]).unwrap_err();
    assert!(err.contains("registry.max_concurrent_runs"), "{err}");
    let err = load(&[("PROTOMOLT_REGISTRY__RUN_TIMEOUT_MS", "0")]).unwrap_err();
    assert!(err.contains("registry.run_timeout_ms"), "{err}");
}
