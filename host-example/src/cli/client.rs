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

/// The largest answer the CLI reads (a hostile endpoint cannot grow it without bound).
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

impl Client {
    /// A client of the node at `url`, sending `token` when given.
    pub fn new(url: &str, token: Option<String>) -> Result<Client, CliError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| CliError::Usage(format!("--url {}: {e}", redacted(url))))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(CliError::Usage(
                "--url: put credentials in --token (PROTOMOLT_TOKEN), not in the URL".into(),
            ));
        }
        if let Some(token) = &token
            && reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err()
        {
            return Err(CliError::Usage(
                "--token holds characters a header cannot carry (a trailing newline?)".into(),
            ));
        }
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

    /// The answer's body as JSON, read up to [`MAX_ANSWER_BYTES`]; something else
    /// (a proxy's HTML page) is told with its status and its first words.
    async fn json_body(&self, mut response: reqwest::Response) -> Result<Value, CliError> {
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.unreachable(e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(CliError::Refused(format!(
                    "the answer is larger than {} MiB ({status})",
                    MAX_ANSWER_BYTES / (1024 * 1024)
                )));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|_| {
            let text = String::from_utf8_lossy(&body);
            let start: String = text.chars().take(120).collect();
            CliError::Refused(format!(
                "{} answered {status} with something other than JSON: {}",
                self.url,
                crate::output::printable(start.trim())
            ))
        })
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
        // A waiting get-job may take up to a minute.
        self.post_json(
            &format!("/v1/actions/{verb}"),
            verb,
            body,
            Duration::from_secs(90),
        )
        .await
    }

    /// `POST path` with `body` and the token (an admin route): the answer, or why it
    /// was refused.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.post_json(path, path, body, Duration::from_secs(10))
            .await
    }

    /// `POST path` with `body` and the token within `timeout`: the answer, or why it
    /// was refused, naming `what`.
    async fn post_json(
        &self,
        path: &str,
        what: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, CliError> {
        let request = self
            .http
            .post(format!("{}{path}", self.url))
            .json(body)
            .timeout(timeout);
        let response = self
            .authorized(request)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let answer = self.json_body(response).await?;
        if !status.is_success() {
            let message = answer["message"].as_str().unwrap_or("no message");
            return Err(CliError::Refused(format!("{what}: {message} ({status})")));
        }
        Ok(answer)
    }

    /// `GET path` without a token: the status and the JSON answer.
    pub async fn get(&self, path: &str) -> Result<(u16, Value), CliError> {
        self.get_json(path, false).await
    }

    /// `GET path` with the token (the catalog, the OpenAPI document): the status and
    /// the JSON answer.
    pub async fn get_authorized(&self, path: &str) -> Result<(u16, Value), CliError> {
        self.get_json(path, true).await
    }

    async fn get_json(&self, path: &str, with_token: bool) -> Result<(u16, Value), CliError> {
        let request = self
            .http
            .get(format!("{}{path}", self.url))
            .timeout(Duration::from_secs(10));
        let request = if with_token {
            self.authorized(request)
        } else {
            request
        };
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let answer = self.json_body(response).await?;
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
        if status == reqwest::StatusCode::NO_CONTENT {
            // Nothing left to stream: the job finished before; its row tells how.
            return Ok(None);
        }
        if !status.is_success() {
            let answer = self.json_body(response).await?;
            let message = answer["message"].as_str().unwrap_or("no message");
            return Err(CliError::Refused(format!("watch: {message} ({status})")));
        }
        let mut body = response.bytes_stream();
        // Bytes, not text: a character split across two chunks is decoded whole.
        let mut buffer: Vec<u8> = Vec::new();
        let mut last = None;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.unreachable(e))?;
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = buffer.drain(..end + 2).collect();
                if let Some(event) = parse_event(&String::from_utf8_lossy(&block)) {
                    each(&event);
                    last = Some(event);
                }
            }
            if buffer.len() > MAX_ANSWER_BYTES {
                return Err(CliError::Refused(
                    "watch: an event larger than 64 MiB".into(),
                ));
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

/// `url` with any credentials in it hidden.
fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// An answer whose `ok` is not false, or the refusal it says.
pub fn ok(answer: Value) -> Result<Value, CliError> {
    if answer["ok"] == false && answer.get("outcome").is_none() {
        let error = answer["error"].as_str().unwrap_or("refused");
        return Err(CliError::Refused(error.to_owned()));
    }
    Ok(answer)
}
