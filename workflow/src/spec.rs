//! A workflow as written, before its types are known: each step's [`StepSpec`] and the
//! output's [`OutputSpec`], and how a step completes ([`Completion`]) and times out
//! ([`OnTimeout`]).

use std::time::Duration;

use prost_reflect::{MessageDescriptor, MethodDescriptor};

use crate::rules::Rule;

/// Whether the engine calls a step or waits for someone else to answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The engine calls the method on the target.
    Call,
    /// Never called: the run parks here until `complete-step` supplies the response.
    External,
    /// Never called: the run parks here until `send-event` delivers an event on the
    /// step's key (`"completion": "event"`).
    Event,
    /// Never called: the run parks here until a time (`"sleep": {...}`).
    Sleep,
    /// Never called: the run starts a child workflow (one per element with
    /// `forEach`) and parks here until it ends (`"workflow": "name"`).
    Child,
}

impl Completion {
    /// True for the kinds a job parks on (everything but a call).
    pub const fn parks(self) -> bool {
        !matches!(self, Completion::Call)
    }
}

/// How a job parked on an external step ends when nobody answers in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnTimeout {
    /// FAILED (the default).
    #[default]
    Fail,
    /// DEAD: the dead-letter state.
    Dead,
}

impl OnTimeout {
    /// The envelope's spelling: `fail` or `dead`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Fail => "fail",
            OnTimeout::Dead => "dead",
        }
    }
}

/// What a map step does when the call for one element fails for good (a failure
/// that is not retried).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnItemFailure {
    /// The step fails (the default), with the first failed element's error and the
    /// count of failed elements, once none of its calls is in flight.
    #[default]
    Fail,
    /// The failed elements are left out of the step's list; their errors are listed
    /// in its checkpoint.
    Collect,
}

impl OnItemFailure {
    /// The envelope's spelling: `fail` or `collect`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnItemFailure::Fail => "fail",
            OnItemFailure::Collect => "collect",
        }
    }
}

/// A map step's `forEach` and its bounds, as written.
pub(crate) struct MapSpec {
    /// The root of the list (`input` or an ancestor step).
    pub root: String,
    /// The fields below it down to the repeated field (empty: a map step's list).
    pub fields: Vec<String>,
    /// The JSON path of `forEach`.
    pub path: String,
    /// At most this many of its calls at once.
    pub max_parallel: usize,
    pub on_item_failure: OnItemFailure,
}

/// A sleep step's `sleep`, as written.
pub(crate) enum SleepSpec {
    /// `{"forMs": n}`: n milliseconds from when the job first reaches the step.
    For(Duration),
    /// `{"until": "input.sendAt"}`: a `google.protobuf.Timestamp` in scope.
    Until {
        root: String,
        fields: Vec<String>,
        /// The JSON path of `until`.
        path: String,
    },
}

/// An event step's key and lookback, as written.
pub(crate) struct EventSpec {
    /// The CEL string expression and its JSON path.
    pub key: (String, String),
    /// How far back an event sent before the job parks still counts.
    pub lookback: Duration,
}

/// A child step's `workflow` and the snapshot of it the node resolved, as written.
pub(crate) struct ChildSpec {
    /// The stored workflow's name.
    pub workflow: String,
    /// `workflowSnapshot`: the child's envelope, its own children resolved, filed
    /// into this envelope when it was stored or submitted.
    pub snapshot: Option<serde_json::Value>,
    /// The JSON path of `workflow`.
    pub path: String,
}

/// A step as written, before its types are known.
pub(crate) struct StepSpec {
    pub name: String,
    /// The steps it runs after, as written (`None`: the step before it).
    pub after: Option<AfterSpec>,
    /// `forEach` and its bounds, on a map step.
    pub map: Option<MapSpec>,
    pub target: Option<String>,
    pub method: Option<MethodDescriptor>,
    /// What the rules build (the method's input, or an external step's `requestType`).
    pub request_type: Option<MessageDescriptor>,
    /// What the step answers with (the method's output, or an external step's
    /// `outputType`); `None` when it did not resolve.
    pub response_type: Option<MessageDescriptor>,
    pub rules: Vec<(Rule, String)>,
    pub when: Option<(String, String)>,
    pub completion: Completion,
    pub validate: bool,
    pub deadline: Option<Duration>,
    pub tls: bool,
    pub max_response_bytes: Option<usize>,
    pub wait_timeout: Option<Duration>,
    pub on_timeout: OnTimeout,
    /// `Some` on a sleep step.
    pub sleep: Option<SleepSpec>,
    /// `Some` on an event step.
    pub event: Option<EventSpec>,
    /// `Some` on a child step.
    pub child: Option<ChildSpec>,
    /// `rateLimit`, on a called step.
    pub rate_limit: Option<crate::rate::RateLimitRule>,
    /// `reviewerSees`, on an external step.
    pub reviewer_sees: Option<crate::review::ReviewerSees>,
}

/// A step's `after` as written: the names and the JSON path of the list.
pub(crate) struct AfterSpec {
    pub names: Vec<String>,
    pub path: String,
}

/// The output mapping as written.
pub(crate) struct OutputSpec {
    pub message: Option<MessageDescriptor>,
    pub rules: Vec<(Rule, String)>,
}
