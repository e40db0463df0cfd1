//! What the CLI prints: JSON for scripts (`--json`, one object per line), or for a
//! person a few aligned lines and tables, with colours only on a terminal (and never
//! with `NO_COLOR` set).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;

/// How to print.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// JSON instead of text.
    pub json: bool,
    colour: bool,
    terminal: bool,
}

impl Output {
    /// Text on a terminal gets colours; `--json` gets JSON.
    pub fn new(json: bool) -> Output {
        let terminal = std::io::stdout().is_terminal();
        Output {
            json,
            colour: terminal && std::env::var_os("NO_COLOR").is_none(),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Prints `value` as one line of JSON (its strings are escaped by JSON itself).
    pub fn json_line(&self, value: &Value) {
        say!("{value}");
    }

    /// `status`, coloured by what it means.
    pub fn status(&self, status: &str) -> String {
        let code = match status {
            "COMPLETED" => "32",
            "FAILED" | "DEAD" => "31",
            "CANCELLED" => "33",
            "RUNNING" => "34",
            "WAITING" => "35",
            _ => return status.to_owned(),
        };
        self.paint(code, status)
    }

    /// `text` dimmed.
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\u{1b}[{code}m{text}\u{1b}[0m")
        } else {
            text.to_owned()
        }
    }

    /// A job as a person reads it: its status, where it stands, its outcome.
    pub fn job(&self, job: &Value) {
        let text = |key: &str| printable(job[key].as_str().unwrap_or_default());
        say!("job       {}", text("jobId"));
        say!("workflow  {}", text("workflowName"));
        say!("status    {}", self.status(&text("status")));
        say!(
            "attempt   {} of {}",
            job["attempt"].as_i64().unwrap_or(0),
            job["maxAttempts"].as_i64().unwrap_or(0)
        );
        for (label, key) in [
            ("waiting on", "outstandingStep"),
            ("verdict", "verdict"),
            ("error", "error"),
            // Why an operator cancelled it (or asked to: a running job stops at its
            // next step).
            ("reason", "cancelReason"),
        ] {
            if let Some(value) = job[key].as_str() {
                say!("{label:<9} {}", printable(value));
            }
        }
        if let Some(metadata) = job["metadata"].as_object().filter(|m| !m.is_empty()) {
            let pairs: Vec<String> = metadata
                .iter()
                .map(|(key, value)| {
                    printable(&format!("{key}={}", value.as_str().unwrap_or_default()))
                })
                .collect();
            say!("metadata  {}", pairs.join(", "));
        }
        if let Some(parent) = job["parentJobId"].as_str() {
            say!(
                "parent    {} (its step {})",
                printable(parent),
                printable(job["parentStep"].as_str().unwrap_or_default())
            );
        }
        if let Some(count) = job["childCount"].as_i64() {
            say!("children  {count}");
            for child in job["children"].as_array().into_iter().flatten() {
                let text = |key: &str| printable(child[key].as_str().unwrap_or_default());
                say!(
                    "  {} {} step {} #{}",
                    text("jobId"),
                    self.status(&text("status")),
                    text("step"),
                    child["item"]
                );
            }
        }
        if let Some(until) = job["sleepingUntil"].as_str() {
            say!("sleeping  until {}", printable(until));
        }
        // What each parked step waits on beyond an answer: an event's key, a sleep.
        for wait in job["waits"].as_array().into_iter().flatten() {
            let step = printable(wait["step"].as_str().unwrap_or_default());
            if let Some(key) = wait["key"].as_str().filter(|_| wait["kind"] == "event") {
                say!("event     step {step} waits on key {}", printable(key));
            }
        }
        for key in job["concurrencyKeys"].as_array().into_iter().flatten() {
            say!("key       {}", printable(key.as_str().unwrap_or_default()));
        }
        // Why a QUEUED job is not running: a key at its limit, a pause, its start.
        for held in job["heldBy"].as_array().into_iter().flatten() {
            say!(
                "held      {}",
                printable(held["detail"].as_str().unwrap_or_default())
            );
        }
        if let Some(request) = job.get("pendingRequest").filter(|r| !r.is_null()) {
            // What the parked step asks a person to approve.
            say!("request   {request}");
        }
        if let Some(result) = job.get("result").filter(|r| !r.is_null()) {
            // JSON text: its strings' control characters are escaped already.
            say!("result    {result}");
        }
    }

    /// A table: a header row and aligned columns.
    pub fn table(&self, headers: &[&str], rows: &[Vec<String>]) {
        let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
        for row in rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        say!(
            "{}",
            self.dim(line(headers.iter().map(|h| h.to_string()).collect()).trim_end())
        );
        for row in rows {
            let row = row.iter().map(|cell| printable(cell)).collect();
            say!("{}", line(row).trim_end());
        }
    }

    /// A spinner on the terminal (stderr) saying `what`, until the handle is dropped
    /// or stopped; nothing when stderr is not a terminal or JSON is asked for.
    pub fn spinner(&self, what: String) -> Spinner {
        if !self.terminal || self.json {
            return Spinner(None);
        }
        Spinner(Some(tokio::spawn(async move {
            let frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            for frame in frames.iter().cycle() {
                eprint!("\r{frame} {what}");
                let _ = std::io::stderr().flush();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })))
    }
}

/// Prints a line to stdout. A reader that went away (`protomolt list | head -1`)
/// ends the CLI quietly, as a command in a pipe is expected to.
pub fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{line}")
        && error.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// `text` without control characters (terminal escapes a job's verdict, error or
/// step output could carry): each becomes `?`, so text output cannot clear or
/// rewrite the operator's screen.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A running spinner; stopping (or dropping) it clears its line.
pub struct Spinner(Option<JoinHandle<()>>);

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
            eprint!("\r\u{1b}[2K");
            let _ = std::io::stderr().flush();
        }
    }
}

/// `protomolt fleet` for a person: live counts, the database server the node
/// reached, paused workflows and keys, the busiest concurrency keys and the
/// fleet-wide limits.
pub fn fleet(out: Output, fleet: &Value) {
    let count = |status: &str| fleet["live"][status].as_i64().unwrap_or(0);
    say!(
        "live      {} queued, {} running, {} waiting",
        count("QUEUED"),
        count("RUNNING"),
        count("WAITING")
    );
    if let Some(primary) = fleet["database"]["primary"].as_str() {
        say!("database  primary {}", printable(primary));
    }
    for paused in fleet["pausedWorkflows"].as_array().into_iter().flatten() {
        say!(
            "paused    workflow {} ({})",
            printable(paused["workflowName"].as_str().unwrap_or_default()),
            printable(paused["reason"].as_str().unwrap_or_default())
        );
    }
    for key in fleet["pausedKeys"].as_array().into_iter().flatten() {
        say!(
            "paused    key {}",
            printable(key.as_str().unwrap_or_default())
        );
    }
    let text = |v: &Value| match v {
        Value::String(s) => printable(s),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let keys: Vec<Vec<String>> = fleet["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            vec![
                text(&k["key"]),
                format!("{}/{}", text(&k["running"]), text(&k["limit"])),
                if k["paused"] == true { "paused" } else { "" }.to_owned(),
            ]
        })
        .collect();
    if !keys.is_empty() {
        out.table(&["KEY", "RUNNING/LIMIT", ""], &keys);
    }
    let limits: Vec<Vec<String>> = fleet["limits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            let tokens = l["tokens"]
                .as_f64()
                .map_or("-".to_owned(), |t| format!("{t:.1}/{}", text(&l["burst"])));
            vec![
                text(&l["name"]),
                tokens,
                format!("{}/{}", text(&l["inFlight"]), text(&l["maxConcurrent"])),
            ]
        })
        .collect();
    if !limits.is_empty() {
        out.table(&["LIMIT", "TOKENS/BURST", "IN FLIGHT/CAP"], &limits);
    }
}
