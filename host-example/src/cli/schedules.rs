//! `protomolt schedules list|get|put|pause|resume|trigger|backfill|delete`: the
//! schedule verbs from the command line, as text for a person or JSON lines.

use serde_json::{Value, json};

use crate::args::Schedules;
use crate::client::{CliError, Client, ok};
use crate::output::{self, Output};
use crate::{json_arg, json_file};

/// Runs one schedules command.
pub(crate) async fn run(client: &Client, out: Output, command: Schedules) -> Result<u8, CliError> {
    match command {
        Schedules::List => {
            let answer = ok(client.call("list-schedules", &json!({})).await?)?;
            let schedules = answer["schedules"].as_array().cloned().unwrap_or_default();
            if out.json {
                for schedule in &schedules {
                    out.json_line(schedule);
                }
            } else {
                let rows: Vec<Vec<String>> = schedules.iter().map(row).collect();
                out.table(&["NAME", "CRON", "WORKFLOW", "NEXT", "STATE"], &rows);
            }
            Ok(0)
        }
        Schedules::Get { name } => {
            let answer = ok(client
                .call("get-schedule", &json!({ "name": name }))
                .await?)?;
            if out.json {
                out.json_line(&answer["schedule"]);
            } else {
                show(out, &answer["schedule"]);
            }
            Ok(0)
        }
        Schedules::Put {
            name,
            file,
            cron,
            timezone,
            workflow,
            input,
            overlap,
            catchup,
        } => {
            let mut body = match &file {
                Some(path) => json_file("--file", path)?,
                None => json!({}),
            };
            if !body.is_object() {
                return Err(CliError::Usage(
                    "--file: the put-schedule body is a JSON object".into(),
                ));
            }
            body["name"] = json!(name);
            for (field, value) in [
                ("cron", cron),
                ("timezone", timezone),
                ("workflowName", workflow),
                ("overlap", overlap),
                ("catchup", catchup),
            ] {
                if let Some(value) = value {
                    body[field] = json!(value);
                }
            }
            if let Some(input) = input {
                body["input"] = json_arg("--input", &input)?;
            }
            let answer = ok(client.call("put-schedule", &body).await?)?;
            if out.json {
                out.json_line(&answer);
            } else {
                let how = if answer["created"] == true {
                    "made"
                } else {
                    "replaced"
                };
                say!("schedule {} {how}", output::printable(&name));
                show(out, &answer["schedule"]);
            }
            Ok(0)
        }
        Schedules::Pause { name, reason } => {
            let mut body = json!({ "name": name });
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            let answer = ok(client.call("pause-schedule", &body).await?)?;
            changed(out, &answer, &name, "paused")
        }
        Schedules::Resume { name } => {
            let answer = ok(client
                .call("resume-schedule", &json!({ "name": name }))
                .await?)?;
            changed(out, &answer, &name, "resumed")
        }
        Schedules::Trigger { name } => {
            let answer = ok(client
                .call("trigger-schedule", &json!({ "name": name }))
                .await?)?;
            if out.json {
                out.json_line(&answer);
            } else {
                say!(
                    "job {} ({})",
                    output::printable(answer["jobId"].as_str().unwrap_or_default()),
                    out.status(&output::printable(
                        answer["status"].as_str().unwrap_or_default()
                    ))
                );
            }
            Ok(0)
        }
        Schedules::Backfill { name, from, to } => {
            let answer = ok(client
                .call(
                    "backfill-schedule",
                    &json!({ "name": name, "from": from, "to": to }),
                )
                .await?)?;
            if out.json {
                out.json_line(&answer);
            } else {
                say!(
                    "{} jobs made, {} already there",
                    answer["made"],
                    answer["already"]
                );
            }
            Ok(0)
        }
        Schedules::Delete { name } => {
            let answer = ok(client
                .call("delete-schedule", &json!({ "name": name }))
                .await?)?;
            if out.json {
                out.json_line(&answer);
            } else {
                say!("schedule {} deleted", output::printable(&name));
            }
            Ok(0)
        }
    }
}

/// A schedule as one row of `list`.
fn row(schedule: &Value) -> Vec<String> {
    let text = |key: &str| output::printable(schedule[key].as_str().unwrap_or_default());
    let state = if schedule["paused"] == true {
        "paused".to_owned()
    } else if schedule["nextFireAt"].is_null() {
        "ended".to_owned()
    } else {
        "active".to_owned()
    };
    vec![
        text("name"),
        text("cron"),
        text("workflowName"),
        text("nextFireAt"),
        state,
    ]
}

/// A schedule in full: its spec and state, next ticks and newest jobs.
fn show(out: Output, schedule: &Value) {
    let text = |key: &str| output::printable(schedule[key].as_str().unwrap_or_default());
    let zone = match text("timezone") {
        zone if zone.is_empty() => "UTC".to_owned(),
        zone => zone,
    };
    say!("name      {}", text("name"));
    say!("cron      {} ({zone})", text("cron"));
    say!("workflow  {}", text("workflowName"));
    say!(
        "overlap   {}   catchup {}",
        text("overlap"),
        text("catchup")
    );
    if schedule["paused"] == true {
        say!("paused    {}", text("pausedReason"));
    }
    if let Some(error) = schedule["lastError"].as_str() {
        say!("error     {}", output::printable(error));
    }
    for tick in schedule["nextFireTimes"].as_array().into_iter().flatten() {
        say!(
            "next      {}",
            output::printable(tick.as_str().unwrap_or_default())
        );
    }
    for job in schedule["jobs"].as_array().into_iter().flatten() {
        let field = |key: &str| output::printable(job[key].as_str().unwrap_or_default());
        say!(
            "job       {}  {}  {}",
            field("scheduledFor"),
            field("jobId"),
            out.status(&field("status"))
        );
    }
}

/// Prints what `pause` or `resume` did.
fn changed(out: Output, answer: &Value, name: &str, done: &str) -> Result<u8, CliError> {
    if out.json {
        out.json_line(answer);
    } else if answer["changed"] == true {
        say!("schedule {} {done}", output::printable(name));
    } else {
        say!("schedule {}: already {done}", output::printable(name));
    }
    Ok(0)
}
