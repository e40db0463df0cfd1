//! `protomolt`: the command line for a ProtoMolt node.
//!
//! Every command talks to the node at `--url` (`PROTOMOLT_URL`, default
//! `http://127.0.0.1:8080`) with the bearer token `--token` (`PROTOMOLT_TOKEN`), and
//! prints text for a person or, with `--json`, one JSON object per line for a script.
//!
//! Exit codes a script can branch on:
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | done (for a job: it is not FAILED, DEAD or CANCELLED) |
//! | 1 | the job is FAILED, DEAD or CANCELLED |
//! | 2 | usage: the command line is wrong (a missing argument, a file that does not read, JSON that does not parse) |
//! | 3 | the node is unreachable, or refused the call (an error answer, no such job, not ready) |

/// `println!` that ends the CLI quietly when its reader has gone ([`output::say`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::say(format_args!($($arg)*))
    };
}

mod args;
mod client;
mod exit;
mod follow;
mod output;
mod schedules;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use serde_json::{Value, json};

use args::{Cli, Command, Node, Proto, Token, Workflows};
use client::{CliError, Client, ok};
use exit::{UNREACHABLE_OR_REFUSED, USAGE, exit_for};
use follow::{follow, wait_for_result};
use output::Output;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version print and exit 0; usage errors exit 2.
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { USAGE } else { 0 });
        }
    };
    let out = Output::new(cli.json);
    match run(cli, out).await {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            let code = match &error {
                CliError::Usage(_) => USAGE,
                CliError::Unreachable { .. } | CliError::Refused(_) => UNREACHABLE_OR_REFUSED,
            };
            if out.json {
                out.json_line(&json!({ "ok": false, "error": error.to_string() }));
            }
            eprintln!("protomolt: {error}");
            ExitCode::from(code)
        }
    }
}

async fn run(cli: Cli, out: Output) -> Result<u8, CliError> {
    let token = cli.token.clone();
    let client = Client::new(&cli.url, cli.token)?;
    match cli.command {
        Command::Submit {
            name,
            workflow,
            input,
            job_id,
            priority,
            run_at,
            max_attempts,
            meta,
            wait,
            watch,
        } => {
            let mut body = json!({ "input": json_arg("--input", &input)? });
            match (name, workflow) {
                (Some(name), _) => body["workflowName"] = json!(name),
                (None, Some(file)) => body["workflow"] = json_file("--workflow", &file)?,
                (None, None) => return Err(CliError::Usage("give --name or --workflow".into())),
            }
            if let Some(id) = job_id {
                body["jobId"] = json!(id);
            }
            if let Some(priority) = priority {
                body["priority"] = json!(priority);
            }
            if let Some(run_at) = run_at {
                body["runAt"] = json!(run_at);
            }
            if let Some(max) = max_attempts {
                body["maxAttempts"] = json!(max);
            }
            if !meta.is_empty() {
                body["metadata"] = metadata_arg(&meta)?;
            }
            let answer = ok(client.call("submit-workflow", &body).await?)?;
            let id = answer["jobId"].as_str().unwrap_or_default().to_owned();
            if out.json {
                out.json_line(&answer);
            } else {
                let how = if answer["created"] == true {
                    "submitted"
                } else {
                    "already submitted"
                };
                say!(
                    "{how} {id} ({})",
                    out.status(answer["status"].as_str().unwrap_or_default())
                );
            }
            if watch {
                return follow(&client, out, &id).await;
            }
            if wait {
                return wait_for_result(&client, out, &id).await;
            }
            Ok(0)
        }
        Command::Get { job_id, wait } => {
            let mut body = json!({ "jobId": job_id });
            if wait > 0 {
                body["waitMs"] = json!(u64::from(wait) * 1_000);
            }
            let answer = ok(client.call("get-job", &body).await?)?;
            let job = &answer["job"];
            if out.json {
                out.json_line(job);
            } else {
                out.job(job);
            }
            Ok(exit_for(job["status"].as_str().unwrap_or_default()))
        }
        Command::List {
            status,
            workflow,
            limit,
            meta,
        } => {
            let mut body = json!({ "limit": limit });
            if !meta.is_empty() {
                body["metadata"] = metadata_arg(&meta)?;
            }
            if let Some(status) = status {
                body["status"] = json!(status.to_uppercase());
            }
            if let Some(workflow) = workflow {
                body["workflowName"] = json!(workflow);
            }
            let answer = ok(client.call("list-jobs", &body).await?)?;
            let jobs = answer["jobs"].as_array().cloned().unwrap_or_default();
            if out.json {
                for job in &jobs {
                    out.json_line(job);
                }
            } else {
                let text = |job: &Value, key: &str| job[key].as_str().unwrap_or("").to_owned();
                let rows: Vec<Vec<String>> = jobs
                    .iter()
                    .map(|job| {
                        vec![
                            text(job, "jobId"),
                            text(job, "workflowName"),
                            out.status(&text(job, "status")),
                            format!("{}/{}", job["attempt"], job["maxAttempts"]),
                            text(job, "outstandingStep"),
                            text(job, "createdAt"),
                        ]
                    })
                    .collect();
                out.table(
                    &[
                        "JOB",
                        "WORKFLOW",
                        "STATUS",
                        "ATTEMPT",
                        "WAITING ON",
                        "CREATED",
                    ],
                    &rows,
                );
            }
            Ok(0)
        }
        Command::Watch { job_id } => follow(&client, out, &job_id).await,
        Command::Complete {
            job_id,
            step,
            response,
        } => {
            let body = json!({ "jobId": job_id, "stepName": step, "response": json_arg("--response", &response)? });
            outcome(out, ok(client.call("complete-step", &body).await?)?)
        }
        Command::SendEvent {
            key,
            payload,
            event_id,
        } => {
            let mut body = json!({ "key": key, "payload": json_arg("--payload", &payload)? });
            if let Some(id) = event_id {
                body["eventId"] = json!(id);
            }
            let answer = ok(client.call("send-event", &body).await?)?;
            if out.json {
                out.json_line(&answer);
            } else {
                let duplicate = if answer["duplicate"] == true {
                    " (sent before: nothing resumed)"
                } else {
                    ""
                };
                say!(
                    "event {}{duplicate}",
                    output::printable(answer["eventId"].as_str().unwrap_or_default())
                );
                for resumed in answer["resumed"].as_array().into_iter().flatten() {
                    let field =
                        |key: &str| output::printable(resumed[key].as_str().unwrap_or_default());
                    say!(
                        "resumed  {} step {} ({})",
                        field("jobId"),
                        field("step"),
                        field("status")
                    );
                }
                for refused in answer["refused"].as_array().into_iter().flatten() {
                    let field =
                        |key: &str| output::printable(refused[key].as_str().unwrap_or_default());
                    say!(
                        "refused  {} step {}: {}",
                        field("jobId"),
                        field("step"),
                        field("reason")
                    );
                }
            }
            Ok(0)
        }
        Command::Reject {
            job_id,
            step,
            reason,
        } => {
            let body = json!({ "jobId": job_id, "stepName": step, "reason": reason });
            outcome(out, ok(client.call("reject-step", &body).await?)?)
        }
        Command::Cancel { job_id, reason } => {
            let body = json!({ "jobId": job_id, "reason": reason });
            outcome(out, ok(client.call("cancel-job", &body).await?)?)
        }
        Command::Retry {
            job_id,
            from_step,
            max_attempts,
            reason,
            current,
        } => {
            let mut body = json!({ "jobId": job_id });
            if current {
                body["workflow"] = json!("current");
            }
            if let Some(step) = from_step {
                body["fromStep"] = json!(step);
            }
            if let Some(max) = max_attempts {
                body["maxAttempts"] = json!(max);
            }
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            retried(out, ok(client.call("retry-job", &body).await?)?)
        }
        Command::Pause {
            workflow,
            key,
            reason,
        } => {
            let mut body = paused_target(workflow, key);
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            paused(
                out,
                ok(client.call("pause-workflow", &body).await?)?,
                "paused",
            )
        }
        Command::Resume { workflow, key } => {
            let body = paused_target(workflow, key);
            paused(
                out,
                ok(client.call("resume-workflow", &body).await?)?,
                "resumed",
            )
        }
        Command::Fleet => {
            let fleet = ok(client.call("get-fleet", &json!({})).await?)?;
            if out.json {
                out.json_line(&fleet);
            } else {
                output::fleet(out, &fleet);
            }
            Ok(0)
        }
        Command::Node(Node::Drain { off }) => {
            let answer = client
                .post("/admin/drain", &json!({ "drain": !off }))
                .await?;
            if out.json {
                out.json_line(&answer);
            } else if answer["draining"] == true {
                say!(
                    "draining: claims nothing new; {} jobs still running",
                    answer["running"]
                );
            } else {
                say!("claiming again");
            }
            Ok(0)
        }
        Command::Schedules(command) => schedules::run(&client, out, command).await,
        Command::Workflows(Workflows::List) => {
            let answer = client.call("list-workflows", &json!({})).await?;
            let workflows = answer["workflows"].as_array().cloned().unwrap_or_default();
            if out.json {
                for workflow in &workflows {
                    out.json_line(workflow);
                }
            } else {
                let rows: Vec<Vec<String>> = workflows
                    .iter()
                    .map(|w| {
                        vec![
                            w["name"].as_str().unwrap_or_default().to_owned(),
                            w["source"].as_str().unwrap_or_default().to_owned(),
                            w["steps"].to_string(),
                        ]
                    })
                    .collect();
                out.table(&["NAME", "SOURCE", "STEPS"], &rows);
            }
            Ok(0)
        }
        Command::Workflows(Workflows::Get { name }) => {
            let answer = ok(client
                .call("get-workflow", &json!({ "name": name }))
                .await?)?;
            out.json_line(&answer["workflow"]);
            Ok(0)
        }
        Command::Workflows(Workflows::Put { file }) => {
            let workflow = json_file("the workflow file", &file)?;
            let answer = client
                .call("put-workflow", &json!({ "workflow": workflow }))
                .await
                .and_then(ok)
                .map_err(|refused| match refused {
                    // A skeleton (steps, no compiled schema) names types the node cannot
                    // know: point at the command that makes an envelope of it.
                    CliError::Refused(why) if workflow.get("schema").is_none() => {
                        CliError::Refused(format!(
                            "{why}\n(this file has no \"schema\": if it is a skeleton, build the envelope first: protomolt workflow build --proto YOUR.proto --skeleton {} > envelope.json)",
                            file.display()
                        ))
                    }
                    other => other,
                })?;
            if out.json {
                out.json_line(&answer);
            } else {
                let how = if answer["created"] == true {
                    "stored"
                } else {
                    "replaced"
                };
                say!("{how} {}", answer["name"].as_str().unwrap_or_default());
            }
            Ok(0)
        }
        Command::Workflows(Workflows::Build {
            protos,
            includes,
            skeleton,
            input_type,
            node,
        }) => {
            let envelope = build_workflow(&protos, &includes, &skeleton, input_type)?;
            // What was checked goes to stderr: stdout is the envelope.
            match node {
                Some(url) => {
                    let node = Client::new(&url, token)?;
                    let body = json!({ "workflow": envelope, "dryRun": true });
                    let checked = ok(node.call("put-workflow", &body).await?)?;
                    if checked["checked"] != true {
                        return Err(CliError::Refused(format!(
                            "the node at {} did not say it only checked the workflow (a node older than put-workflow's dryRun?): see whether it stored it",
                            output::printable(&url)
                        )));
                    }
                    eprintln!(
                        "protomolt: the node at {} accepts '{}' too (its outbound policy, its stored child workflows); nothing was stored",
                        output::printable(&url),
                        output::printable(checked["name"].as_str().unwrap_or_default())
                    );
                }
                None => eprintln!(
                    "protomolt: checked here as a node compiles it; not against a node's outbound policy ([workflow.outbound]) or its stored child workflows: add --node URL to check there too"
                ),
            }
            out.json_line(&envelope);
            Ok(0)
        }
        Command::Proto(Proto::Export { dir }) => {
            let written = export_protos(&dir)?;
            if out.json {
                out.json_line(&json!({ "ok": true, "dir": dir, "files": written }));
            } else {
                for path in &written {
                    say!("wrote {}", dir.join(path).display());
                }
            }
            Ok(0)
        }
        Command::Token(Token::New { name, scopes }) => {
            // Two v4 UUIDs: 244 random bits from the operating system's generator.
            let token = format!(
                "pm_{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let digest = registry_stub::auth::sha256_hex(&token);
            if out.json {
                out.json_line(&json!({ "name": name, "token": token, "tokenSha256": digest, "scopes": scopes }));
            } else {
                say!("token (give it to {name}; it is shown once): {token}");
                say!("");
                say!("[[auth.tokens]]");
                say!("name = {}", json!(name));
                say!("token_sha256 = \"{digest}\"");
                say!("scopes = {}", json!(scopes));
            }
            Ok(0)
        }
        Command::Redrive {
            job_ids,
            all,
            workflow,
            limit,
        } => {
            let body = if all {
                let mut body = json!({ "all": true, "limit": limit.clamp(1, 10_000) });
                if let Some(workflow) = workflow {
                    body["workflowName"] = json!(workflow);
                }
                body
            } else {
                json!({ "jobIds": job_ids })
            };
            let answer = ok(client.call("redrive-events", &body).await?)?;
            if out.json {
                out.json_line(&answer);
            } else {
                say!(
                    "redrove {} events of {} jobs{}",
                    answer["events"],
                    answer["jobs"],
                    if answer["more"] == true {
                        " (more jobs have dead-lettered events: run it again)"
                    } else {
                        ""
                    }
                );
            }
            Ok(0)
        }
        Command::Rejects { limit } => {
            let answer = ok(client
                .call("list-rejects", &json!({ "limit": limit.min(500) }))
                .await?)?;
            let rejects = answer["rejects"].as_array().cloned().unwrap_or_default();
            if out.json {
                for reject in &rejects {
                    out.json_line(reject);
                }
            } else if rejects.is_empty() {
                say!("no dead-lettered request records");
            } else {
                let rows: Vec<Vec<String>> = rejects
                    .iter()
                    .map(|r| {
                        let key = r["recordKey"]
                            .as_str()
                            .or(r["recordKeyBase64"].as_str())
                            .unwrap_or("-");
                        vec![
                            r["receivedAt"].as_str().unwrap_or_default().to_owned(),
                            format!(
                                "{}/{}/{}",
                                r["topic"].as_str().unwrap_or_default(),
                                r["partition"],
                                r["recordOffset"]
                            ),
                            output::printable(key),
                            output::printable(r["error"].as_str().unwrap_or_default()),
                        ]
                    })
                    .collect();
                out.table(
                    &["RECEIVED", "TOPIC/PARTITION/OFFSET", "KEY", "ERROR"],
                    &rows,
                );
            }
            Ok(0)
        }
        Command::Openapi => {
            let (status, document) = client.get_authorized("/v1/openapi.json").await?;
            if status != 200 {
                return Err(CliError::Refused(format!(
                    "GET /v1/openapi.json answered {status}: {document}"
                )));
            }
            // Pretty, as a file someone reads and commits.
            match serde_json::to_string_pretty(&document) {
                Ok(text) => say!("{text}"),
                Err(e) => return Err(CliError::Refused(format!("the document: {e}"))),
            }
            Ok(0)
        }
        Command::Health => {
            let (status, answer) = client.get("/readyz").await?;
            if status != 200 {
                let checks: Vec<String> = answer["checks"]
                    .as_object()
                    .map(|checks| {
                        checks
                            .iter()
                            .filter(|(_, r)| r.as_str() != Some("ok"))
                            .map(|(name, r)| format!("{name}: {}", r.as_str().unwrap_or_default()))
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(CliError::Refused(format!(
                    "the node is not ready ({status}): {}",
                    output::printable(&checks.join("; "))
                )));
            }
            if out.json {
                out.json_line(&answer);
            } else {
                say!("{}", answer["status"].as_str().unwrap_or("unknown"));
                if let Some(checks) = answer["checks"].as_object() {
                    for (name, result) in checks {
                        say!("  {name}: {}", result.as_str().unwrap_or_default());
                    }
                }
            }
            Ok(0)
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "protomolt",
                &mut std::io::stdout(),
            );
            Ok(0)
        }
    }
}

/// Prints a verb's outcome answer; exit 0 when it says ok, 3 otherwise.
/// The body naming what `pause` or `resume` acts on.
fn paused_target(workflow: Option<String>, key: Option<String>) -> Value {
    match (workflow, key) {
        (Some(name), _) => json!({ "workflowName": name }),
        (None, key) => json!({ "concurrencyKey": key.unwrap_or_default() }),
    }
}

/// Prints what `pause` or `resume` did (`done`: the word for a change).
fn paused(out: Output, answer: Value, done: &str) -> Result<u8, CliError> {
    if out.json {
        out.json_line(&answer);
    } else {
        let what = match answer["workflowName"].as_str() {
            Some(name) if !name.is_empty() => format!("workflow {}", output::printable(name)),
            _ => format!(
                "key {}",
                output::printable(answer["concurrencyKey"].as_str().unwrap_or_default())
            ),
        };
        if answer["changed"] == true {
            say!("{what} {done}");
        } else {
            say!("{what}: already {done}");
        }
    }
    Ok(0)
}

/// A retry's answer, saying which workflow snapshot the job will run (or, refused
/// for the current workflow, each misfit).
fn retried(out: Output, answer: Value) -> Result<u8, CliError> {
    if !out.json {
        let snapshot = answer["snapshot"].as_str().map(output::printable);
        let before = answer["snapshotBefore"].as_str().map(output::printable);
        let sentence = match (snapshot, before) {
            (Some(now), Some(was)) if now == was => Some(format!(
                "the workflow stored under its name is the job's own snapshot ({now}): it runs that"
            )),
            (Some(now), Some(was)) => Some(format!(
                "it runs the workflow stored under its name now (snapshot {now}; it ran {was})"
            )),
            (Some(now), None) => Some(format!(
                "it runs the workflow snapshot the job holds ({now}); --current runs the workflow stored under its name now"
            )),
            (None, _) => None,
        };
        let findings = answer["findings"].as_array().cloned().unwrap_or_default();
        let code = outcome(out, answer)?;
        if let Some(sentence) = sentence {
            say!("{sentence}");
        }
        for finding in findings.iter().filter_map(Value::as_str) {
            say!("  - {}", output::printable(finding));
        }
        return Ok(code);
    }
    outcome(out, answer)
}

fn outcome(out: Output, answer: Value) -> Result<u8, CliError> {
    if out.json {
        out.json_line(&answer);
    } else {
        let outcome = answer["outcome"].as_str().unwrap_or_default();
        let status = answer["status"].as_str().unwrap_or_default();
        match answer["message"]
            .as_str()
            .filter(|_| outcome == "COMPLETED")
        {
            // An answered step: the node's own sentence, as the console shows it
            // (never "COMPLETED (QUEUED)": the step is done, not the job).
            Some(message) => {
                say!("{}", output::printable(message));
                return Ok(0);
            }
            None => say!(
                "{} ({})",
                output::printable(outcome),
                out.status(&output::printable(status))
            ),
        }
        for key in ["message", "error"] {
            if let Some(text) = answer[key].as_str() {
                say!("{}", output::printable(text));
            }
        }
    }
    if answer["ok"] == true {
        Ok(0)
    } else {
        Ok(UNREACHABLE_OR_REFUSED)
    }
}

/// `workflows build`: the skeleton with the compiled descriptor set embedded, checked
/// as the node checks it (every finding, with its step and JSON path).
fn build_workflow(
    protos: &[PathBuf],
    includes: &[PathBuf],
    skeleton: &PathBuf,
    input_type: Option<String>,
) -> Result<Value, CliError> {
    use base64::Engine as _;
    let mut envelope = json_file("--skeleton", skeleton)?;
    let Some(object) = envelope.as_object_mut() else {
        return Err(CliError::Usage(
            "--skeleton: the skeleton must be a JSON object (name, inputType, steps, output)"
                .into(),
        ));
    };
    let descriptors = workflow::schema::compile_proto_files(protos, includes)
        .map_err(|e| CliError::Usage(format!("--proto: {e}")))?;
    object.insert(
        "schema".into(),
        json!({ "descriptorSetBase64": base64::engine::general_purpose::STANDARD.encode(descriptors) }),
    );
    if let Some(input_type) = input_type {
        object.insert("inputType".into(), json!(input_type));
    }
    if let Err(findings) = workflow::CompiledWorkflow::compile_new(&envelope) {
        let listed: Vec<String> = findings.0.iter().map(|f| format!("  {f}")).collect();
        return Err(CliError::Usage(format!(
            "the workflow does not compile:\n{}",
            listed.join("\n")
        )));
    }
    Ok(envelope)
}

/// `proto export`: the contract's .proto files under `dir`; answers their paths.
fn export_protos(dir: &std::path::Path) -> Result<Vec<&'static str>, CliError> {
    let mut written = Vec::new();
    for (path, text) in jobs_proto::PROTO_FILES {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| CliError::Usage(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&target, text)
            .map_err(|e| CliError::Usage(format!("{}: {e}", target.display())))?;
        written.push(*path);
    }
    Ok(written)
}

/// `--meta KEY=VALUE` arguments as a metadata object (the node checks the bounds).
fn metadata_arg(entries: &[String]) -> Result<Value, CliError> {
    let mut metadata = serde_json::Map::new();
    for entry in entries {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(CliError::Usage(format!(
                "--meta: '{entry}' is not KEY=VALUE (for example --meta customer=acme)"
            )));
        };
        metadata.insert(key.to_owned(), json!(value));
    }
    Ok(Value::Object(metadata))
}

/// A JSON argument, or `@file` holding one.
pub(crate) fn json_arg(flag: &str, text: &str) -> Result<Value, CliError> {
    match text.strip_prefix('@') {
        Some(path) => json_file(flag, &PathBuf::from(path)),
        None => serde_json::from_str(text)
            .map_err(|e| CliError::Usage(format!("{flag}: not JSON ({e}); give JSON or @file"))),
    }
}

/// A JSON file.
pub(crate) fn json_file(what: &str, path: &PathBuf) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{what}: cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{what}: {} is not JSON: {e}", path.display())))
}
