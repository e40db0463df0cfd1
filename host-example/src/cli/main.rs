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

mod client;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use serde_json::{Value, json};

use client::{CliError, Client, JobEvent};
use output::Output;

/// Exit code: the job is FAILED, DEAD or CANCELLED.
const JOB_DID_NOT_SUCCEED: u8 = 1;
/// Exit code: the command line is wrong.
const USAGE: u8 = 2;
/// Exit code: the node is unreachable or refused the call.
const UNREACHABLE_OR_REFUSED: u8 = 3;

/// Submit, follow and operate workflow jobs on a ProtoMolt node.
#[derive(Debug, Parser)]
#[command(name = "protomolt", version, about)]
struct Cli {
    /// The node's URL.
    #[arg(
        long,
        global = true,
        env = "PROTOMOLT_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// A bearer token (when the node has `[auth]`).
    #[arg(long, global = true, env = "PROTOMOLT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print JSON (one object per line) instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit a workflow as a job (a stored name, or a workflow file).
    Submit {
        /// A stored workflow's name.
        #[arg(
            long,
            conflicts_with = "workflow",
            required_unless_present = "workflow"
        )]
        name: Option<String>,
        /// A workflow envelope file (JSON).
        #[arg(long)]
        workflow: Option<PathBuf>,
        /// The input: JSON, or @file.
        #[arg(long, default_value = "{}")]
        input: String,
        /// Your own job id (also the idempotency key).
        #[arg(long)]
        job_id: Option<String>,
        /// Claim order, 0 to 9 (higher first).
        #[arg(long)]
        priority: Option<u8>,
        /// Not before this instant (RFC 3339).
        #[arg(long)]
        run_at: Option<String>,
        /// Attempts allowed.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Wait until the job finishes (or parks on a step) and print its result, or
        /// what the step asks.
        #[arg(long, conflicts_with = "watch")]
        wait: bool,
        /// Follow the job's events until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// Show a job.
    Get {
        /// The job's id.
        job_id: String,
        /// Wait up to this many seconds (at most 60) for it to finish or park on a
        /// step.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=60))]
        wait: u32,
    },
    /// List jobs, newest first.
    List {
        /// Only this status.
        #[arg(long)]
        status: Option<String>,
        /// Only this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// At most this many (up to 500).
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Follow a job's events as they land, until it ends.
    Watch {
        /// The job's id.
        job_id: String,
    },
    /// Answer a job's parked step.
    Complete {
        /// The job's id.
        job_id: String,
        /// The parked step.
        step: String,
        /// The response: JSON, or @file.
        #[arg(long)]
        response: String,
    },
    /// Fail a job's parked step, as a verdict.
    Reject {
        /// The job's id.
        job_id: String,
        /// The parked step.
        step: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Cancel a job.
    Cancel {
        /// The job's id.
        job_id: String,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Re-queue a DEAD, FAILED or CANCELLED job (a COMPLETED one from a step).
    Retry {
        /// The job's id.
        job_id: String,
        /// Run again from this step.
        #[arg(long)]
        from_step: Option<String>,
        /// A new retry budget.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Stored workflows.
    #[command(subcommand, visible_alias = "workflow")]
    Workflows(Workflows),
    /// Publish again jobs' dead-lettered (FAILED) events, and those held behind them.
    Redrive {
        /// The jobs' ids.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        job_ids: Vec<String>,
        /// Every job with a dead-lettered event (up to --limit).
        #[arg(long)]
        all: bool,
        /// With --all: only this workflow's jobs.
        #[arg(long, requires = "all")]
        workflow: Option<String>,
        /// With --all: at most this many jobs (up to 10,000).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// The request records the Kafka consumer dead-lettered, newest first.
    Rejects {
        /// At most this many (up to 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// The contract's .proto files.
    #[command(subcommand)]
    Proto(Proto),
    /// Bearer tokens for a node's [auth].
    #[command(subcommand)]
    Token(Token),
    /// Whether the node is ready (its database, its broker).
    Health,
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum Workflows {
    /// List the stored workflows.
    List,
    /// Show one.
    Get {
        /// Its name.
        name: String,
    },
    /// Store one from a file (JSON).
    Put {
        /// The workflow envelope file.
        file: PathBuf,
    },
    /// Build an envelope on this machine: compile your .proto files, embed their
    /// descriptor set in a JSON skeleton (the envelope without `schema`), check it as
    /// the node would, and print it.
    Build {
        /// A .proto file of your service (repeat for several); its imports resolve
        /// against its own directory, the --include directories, the Google
        /// well-known types and buf/validate/validate.proto.
        #[arg(long = "proto", required = true)]
        protos: Vec<PathBuf>,
        /// Another directory imports resolve against.
        #[arg(long = "include")]
        includes: Vec<PathBuf>,
        /// The envelope without `schema` (JSON): name, inputType, steps, output.
        #[arg(long)]
        skeleton: PathBuf,
        /// Set (or replace) the skeleton's inputType.
        #[arg(long)]
        input_type: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum Token {
    /// Print a new random token (give it to its holder) and the [[auth.tokens]]
    /// entry that accepts it by its SHA-256, so the node's config never holds it.
    New {
        /// Who holds it (for the node's logs).
        #[arg(long, default_value = "client")]
        name: String,
        /// The scopes it grants (repeat; `*` grants every verb).
        #[arg(long = "scope", default_values_t = ["jobs:read".to_owned()])]
        scopes: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum Proto {
    /// Write the contract's .proto files (protomolt/jobs/v1/jobs.proto and
    /// buf/validate/validate.proto, with its licence) under DIR, to compile the
    /// events and requests in another language.
    Export {
        /// Where to write them (created if missing).
        dir: PathBuf,
    },
}

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
        } => {
            let mut body = json!({ "limit": limit });
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
        } => {
            let mut body = json!({ "jobId": job_id });
            if let Some(step) = from_step {
                body["fromStep"] = json!(step);
            }
            if let Some(max) = max_attempts {
                body["maxAttempts"] = json!(max);
            }
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            outcome(out, ok(client.call("retry-job", &body).await?)?)
        }
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
            let answer = ok(client
                .call("put-workflow", &json!({ "workflow": workflow }))
                .await?)?;
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
        }) => {
            let envelope = build_workflow(&protos, &includes, &skeleton, input_type)?;
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

/// Follows a job's events, printing each as it lands (a spinner while a step runs);
/// the exit code of how it ended.
async fn follow(client: &Client, out: Output, job_id: &str) -> Result<u8, CliError> {
    let mut spinner = Some(out.spinner(format!("waiting for {job_id}")));
    let last = client
        .watch(job_id, |event: &JobEvent| {
            spinner = None;
            if out.json {
                out.json_line(&json!({ "id": event.id, "type": event.kind, "event": event.data }));
            } else {
                let status = event.data["detail"]["status"].as_str().unwrap_or_default();
                let step = output::printable(event.data["step"].as_str().unwrap_or_default());
                let error = output::printable(event.data["error"].as_str().unwrap_or_default());
                say!(
                    "{:<16} {:<12} {}{}",
                    output::printable(&event.kind),
                    out.status(&output::printable(status)),
                    step,
                    if error.is_empty() {
                        String::new()
                    } else {
                        format!("  {error}")
                    }
                );
            }
            let next = match (event.kind.as_str(), event.data["detail"]["status"].as_str()) {
                ("WAITING", _) => Some(format!(
                    "waiting for step '{}' to be answered",
                    event.data["step"].as_str().unwrap_or_default()
                )),
                (_, Some("COMPLETED" | "FAILED" | "DEAD" | "CANCELLED")) => None,
                _ => Some("running".to_owned()),
            };
            spinner = next.map(|what| out.spinner(what));
        })
        .await?;
    drop(spinner);
    let status = match &last {
        Some(event) => event.data["detail"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        // 204: the job had finished before; its row says how.
        None => {
            let answer = ok(client.call("get-job", &json!({ "jobId": job_id })).await?)?;
            answer["job"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    };
    if !matches!(
        status.as_str(),
        "COMPLETED" | "FAILED" | "DEAD" | "CANCELLED"
    ) {
        // The stream ended before the job did: the node shut down, or the job never
        // appeared. Not done, whatever a script hoped.
        return Err(CliError::Refused(format!(
            "the event stream of {job_id} ended before the job finished ({}); watch again",
            if status.is_empty() {
                "no such job yet"
            } else {
                status.as_str()
            }
        )));
    }
    Ok(exit_for(&status))
}

/// Prints a verb's outcome answer; exit 0 when it says ok, 3 otherwise.
fn outcome(out: Output, answer: Value) -> Result<u8, CliError> {
    if out.json {
        out.json_line(&answer);
    } else {
        let outcome = answer["outcome"].as_str().unwrap_or_default();
        let status = answer["status"].as_str().unwrap_or_default();
        say!(
            "{} ({})",
            output::printable(outcome),
            out.status(&output::printable(status))
        );
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

/// An answer whose `ok` is not false, or the refusal it says.
fn ok(answer: Value) -> Result<Value, CliError> {
    if answer["ok"] == false && answer.get("outcome").is_none() {
        let error = answer["error"].as_str().unwrap_or("refused");
        return Err(CliError::Refused(error.to_owned()));
    }
    Ok(answer)
}

/// The exit code for a job in `status`.
/// `submit --wait`: waits (a minute at a time) until the job finishes or parks on a
/// step, then prints its result, its error, or what the step asks and how to answer.
async fn wait_for_result(client: &Client, out: Output, job_id: &str) -> Result<u8, CliError> {
    let spinner = out.spinner(format!("waiting for {job_id}"));
    let job = loop {
        let answer = ok(client
            .call("get-job", &json!({ "jobId": job_id, "waitMs": 60_000 }))
            .await?)?;
        let job = answer["job"].clone();
        let status = job["status"].as_str().unwrap_or_default();
        if !matches!(status, "QUEUED" | "RUNNING") {
            break job;
        }
    };
    drop(spinner);
    let status = job["status"].as_str().unwrap_or_default().to_owned();
    if out.json {
        out.json_line(&job);
        return Ok(exit_for(&status));
    }
    match status.as_str() {
        "COMPLETED" => say!(
            "{}",
            serde_json::to_string_pretty(&job["result"]).unwrap_or_default()
        ),
        "WAITING" => {
            let step = output::printable(job["outstandingStep"].as_str().unwrap_or_default());
            say!("{job_id} waits on step '{step}' for an answer");
            if let Some(request) = job.get("pendingRequest").filter(|r| !r.is_null()) {
                say!("it asks to approve: {request}");
            }
            say!(
                "answer it: protomolt complete {job_id} {step} --response '<JSON of the step's output type>'"
            );
        }
        _ => out.job(&job),
    }
    Ok(exit_for(&status))
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

fn exit_for(status: &str) -> u8 {
    match status {
        "FAILED" | "DEAD" | "CANCELLED" => JOB_DID_NOT_SUCCEED,
        _ => 0,
    }
}

/// A JSON argument, or `@file` holding one.
fn json_arg(flag: &str, text: &str) -> Result<Value, CliError> {
    match text.strip_prefix('@') {
        Some(path) => json_file(flag, &PathBuf::from(path)),
        None => serde_json::from_str(text)
            .map_err(|e| CliError::Usage(format!("{flag}: not JSON ({e}); give JSON or @file"))),
    }
}

/// A JSON file.
fn json_file(what: &str, path: &PathBuf) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{what}: cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{what}: {} is not JSON: {e}", path.display())))
}
