//! What is wrong with an envelope: each problem a [`Finding`] (where, and the fix), all
//! of a compilation's together in [`Findings`].

use std::fmt;

/// One problem with an envelope: where it is and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The step it concerns, when it concerns one.
    pub step: Option<String>,
    /// JSON path into the envelope, e.g. `$.steps[1].rules[0]`.
    pub path: String,
    /// What is wrong, and the fix where there is one.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.step {
            Some(step) => write!(f, "{} (step '{step}'): {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// Every finding of a compilation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the workflow does not compile: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct Findings(pub Vec<Finding>);
