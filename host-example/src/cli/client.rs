//! The node's HTTP surface as the CLI uses it: verbs on the actions route, the
//! health check, and a job's Server-Sent Events.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

/// Why a command could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The node could not be reached (or its answer was cut off).
    #[error("cannot reach the node at {url}: {reason} (set --url or PROTOMOLT_URL)")]
    Unreachable {
        /// The node's URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The node refused the call (an error answer, or `{ok: false}`).
    #[error("{0}")]
    Refused(String),
    /// The command line asks for something that cannot be (a file that does not
    /// read, JSON that does not parse).
    #[error("{0}")]
    Usage(String),
}

/// One Server-Sent Event of a job.
#[derive(Debug, Clone)]
pub struct JobEvent {
    /// The event's id.
    pub id: String,
    /// Its type (`ACCEPTED`, `STEP_CHECKPOINT`, ...).
    pub kind: String,
    /// The `WorkflowRunEvent` in proto3 JSON.
    pub data: Value,
}

/// A node's client.
pub struct Client {
    url: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the node at `url`, sending `token` when given.
    pub fn new(url: &str, token: Option<String>) -> Result<Client, CliError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| CliError::Usage(format!("building the HTTP client: {e}")))?;
        Ok(Client {
            url: url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    fn unreachable(&self, error: impl std::fmt::Display) -> CliError {
        CliError::Unreachable {
            url: self.url.clone(),
            reason: error.to_string(),
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Calls `verb` with `body`; the answer, or why it was refused (an error answer,
    /// or `{ok: false, error}`).
    pub async fn call(&self, verb: &str, body: &Value) -> Result<Value, CliError> {
        let request = self
            .http
            .post(format!("{}/v1/actions/{verb}", self.url))
            .json(body)
            // A waiting get-job may take up to a minute.
            .timeout(Duration::from_secs(90));
        let response = self
            .authorized(request)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let answer: Value = response.json().await.map_err(|e| self.unreachable(e))?;
        if !status.is_success() {
            let message = answer["message"].as_str().unwrap_or("no message");
            return Err(CliError::Refused(format!("{verb}: {message} ({status})")));
        }
        Ok(answer)
    }

    /// `GET path` without a token: the status and the JSON answer.
    pub async fn get(&self, path: &str) -> Result<(u16, Value), CliError> {
        let response = self
            .http
            .get(format!("{}{path}", self.url))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let answer = response.json().await.map_err(|e| self.unreachable(e))?;
        Ok((status, answer))
    }

    /// Follows `job_id`'s events, calling `each` as every one lands, until the stream
    /// ends (after a terminal event).
    pub async fn watch(
        &self,
        job_id: &str,
        mut each: impl FnMut(&JobEvent),
    ) -> Result<Option<JobEvent>, CliError> {
        let request = self
            .http
            .get(format!("{}/v1/jobs/{job_id}/events", self.url))
            .header("accept", "text/event-stream");
        let response = self
            .authorized(request)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if !status.is_success() {
            let answer: Value = response.json().await.unwrap_or_default();
            let message = answer["message"].as_str().unwrap_or("no message");
            return Err(CliError::Refused(format!("watch: {message} ({status})")));
        }
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        let mut last = None;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.unreachable(e))?;
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                if let Some(event) = parse_event(&block) {
                    each(&event);
                    last = Some(event);
                }
            }
        }
        Ok(last)
    }
}

/// One SSE block as an event; `None` for a comment (keep-alive).
fn parse_event(block: &str) -> Option<JobEvent> {
    let (mut id, mut kind, mut data) = (String::new(), String::new(), String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("event:") {
            kind = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim());
        }
    }
    if kind.is_empty() {
        return None;
    }
    Some(JobEvent {
        id,
        kind,
        data: serde_json::from_str(&data).unwrap_or(Value::String(data)),
    })
}
