//! Deduplicated submissions: a job submitted with a dedupe key may be answered by a
//! job of the same key instead of making a new one (see migration V28).
//!
//! | mode        | a submission of the key ...                                           |
//! |-------------|------------------------------------------------------------------------|
//! | `singleton` | while a job of the key is QUEUED, RUNNING or WAITING, answers that job |
//! | `debounce`  | while a job of the key is QUEUED and never claimed, replaces its input and pushes its start to the window's end; else makes a job starting then |
//! | `throttle`  | within the window after a job of the key was made, answers that job   |
//!
//! Submissions of one key are decided one after the other, under an advisory lock on
//! the key in the submission's transaction. A submission sent again with its own
//! `jobId` (a client's retry) is answered as that job, never deduplicated.

use std::time::Duration;

/// How a dedupe key deduplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupeMode {
    /// At most one live job per key.
    Singleton,
    /// The last input within the window wins; one job runs, after it.
    Debounce,
    /// The first submission per window runs; the rest answer it.
    Throttle,
}

impl DedupeMode {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            DedupeMode::Singleton => "singleton",
            DedupeMode::Debounce => "debounce",
            DedupeMode::Throttle => "throttle",
        }
    }

    /// The mode spelled `text`.
    pub fn parse(text: &str) -> Option<DedupeMode> {
        [
            DedupeMode::Singleton,
            DedupeMode::Debounce,
            DedupeMode::Throttle,
        ]
        .into_iter()
        .find(|mode| mode.as_str() == text)
    }
}

/// A submission's dedupe key and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedupe {
    /// The key, scoped to the workflow (`<workflow>:<key>`).
    pub key: String,
    /// The mode.
    pub mode: DedupeMode,
    /// `debounce`: how long after the last submission the job starts; `throttle`: the
    /// window after a job is made; unused by `singleton`.
    pub window: Duration,
}
