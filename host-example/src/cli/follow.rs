//! Watching a job to its end: its events as they land (`watch`, `submit --follow`),
//! or its row until it finishes or parks (`submit --wait`).

use serde_json::{Value, json};

use crate::client::{CliError, Client, JobEvent, ok};
use crate::exit::exit_for;
use crate::output::{self, Output};

/// Follows a job's events, printing each as it lands (a spinner while a step runs);
/// the exit code of how it ended.
pub(crate) async fn follow(client: &Client, out: Output, job_id: &str) -> Result<u8, CliError> {
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

/// A step form's type name and a skeleton answer: each field under its JSON name with
/// a value of its kind (`""`, `0`, `false`, `[]`, `{}`, an enum's first meaningful
/// name, a zero time), for the reader to fill in. `None` when a name is not a plain
/// identifier: the skeleton goes into a shell command between single quotes, and a
/// workflow's schema is not to be trusted with the reader's shell.
fn answer_skeleton(form: &Value) -> Option<(String, String)> {
    let plain = |text: &str| {
        !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
    let type_name = form["messageType"].as_str().filter(|name| plain(name))?;
    let mut skeleton = serde_json::Map::new();
    for field in form["fields"].as_array()? {
        let name = field["jsonName"].as_str().filter(|name| plain(name))?;
        let value = if field["repeated"] == true {
            json!([])
        } else if field["map"] == true {
            json!({})
        } else {
            match field["kind"].as_str().unwrap_or_default() {
                "bool" => json!(false),
                "string" | "bytes" => json!(""),
                // The first value that means something (not `..._UNSPECIFIED`).
                "enum" => field["enumValues"]
                    .as_array()
                    .and_then(|values| {
                        let names = values.iter().filter_map(|v| v["name"].as_str());
                        let mut meaningful = names.clone().filter(|n| !n.ends_with("_UNSPECIFIED"));
                        meaningful.next().or_else(|| names.clone().next())
                    })
                    .filter(|name| plain(name))
                    .map_or(json!(""), |name| json!(name)),
                "message" | "group" => json!({}),
                "timestamp" => json!("1970-01-01T00:00:00Z"),
                "duration" => json!("0s"),
                "json" => Value::Null,
                _ => json!(0),
            }
        };
        skeleton.insert(name.to_owned(), value);
    }
    Some((type_name.to_owned(), Value::Object(skeleton).to_string()))
}

/// The exit code for a job in `status`.
/// `submit --wait`: waits (a minute at a time) until the job finishes or parks on a
/// step, then prints its result, its error, or what the step asks and how to answer.
pub(crate) async fn wait_for_result(
    client: &Client,
    out: Output,
    job_id: &str,
) -> Result<u8, CliError> {
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
            // The answer's shape from the step's form: its type and a skeleton of
            // its fields (the node's own description, so never stale).
            let form = client
                .call("get-form", &json!({ "jobId": job_id, "stepName": step }))
                .await
                .ok()
                .filter(|form| form["ok"] == true);
            match form.as_ref().and_then(answer_skeleton) {
                Some((type_name, skeleton)) => say!(
                    "answer it with a {type_name}: protomolt complete {job_id} {step} --response '{skeleton}'"
                ),
                None => say!(
                    "answer it: protomolt complete {job_id} {step} --response '<JSON of the step's output type>'"
                ),
            }
        }
        _ => out.job(&job),
    }
    Ok(exit_for(&status))
}
