//! `reviewerSees` of an external step: what a reviewer (a token with the `jobs:review`
//! scope and not `jobs:read`) is shown of a job parked on the step, besides the
//! step's request (`pendingRequest`, what its `requestType` and rules build) and the
//! form of its answer, which a reviewer always sees.
//!
//! ```json
//! { "name": "approve", "completion": "external", "reviewerSees": ["request"], ... }
//! ```
//!
//! `"input"` adds the job's input, `"responses"` the earlier steps' responses (its
//! checkpoints), `"metadata"` its metadata. A step without the key shows what the
//! node's `[jobs].reviewer_sees` says (by default everything, as before the key
//! existed). A token with `jobs:read` reads the whole job whatever the step says.

use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::spec::Completion;
use crate::suggest::did_you_mean;

/// The names `reviewerSees` takes.
pub const REVIEWER_SEES: &[&str] = &["request", "input", "responses", "metadata"];

/// What a reviewer of a parked job may see besides the step's request and form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewerSees {
    /// The job's input.
    pub input: bool,
    /// The earlier steps' responses (the job's checkpoints).
    pub responses: bool,
    /// The job's metadata.
    pub metadata: bool,
}

impl ReviewerSees {
    /// Everything: what a reviewer saw before `reviewerSees` existed.
    pub const EVERYTHING: ReviewerSees = ReviewerSees {
        input: true,
        responses: true,
        metadata: true,
    };

    /// The request and the form only.
    pub const REQUEST_ONLY: ReviewerSees = ReviewerSees {
        input: false,
        responses: false,
        metadata: false,
    };

    /// Reads a list of names (each of [`REVIEWER_SEES`]); an unknown one is named,
    /// with the closest name when one is near.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<ReviewerSees, String> {
        let mut sees = ReviewerSees::REQUEST_ONLY;
        for name in names {
            match name {
                "request" => {}
                "input" => sees.input = true,
                "responses" => sees.responses = true,
                "metadata" => sees.metadata = true,
                other => {
                    let hint = did_you_mean(other, REVIEWER_SEES.iter().copied())
                        .map(|meant| format!("did you mean '{meant}'? "))
                        .unwrap_or_default();
                    return Err(format!(
                        "'{other}' is not something a reviewer can be shown: {hint}give any of {}",
                        REVIEWER_SEES.join(", ")
                    ));
                }
            }
        }
        Ok(sees)
    }

    /// Its names, `request` first.
    pub fn names(self) -> Vec<&'static str> {
        let mut names = vec!["request"];
        for (shown, name) in [
            (self.input, "input"),
            (self.responses, "responses"),
            (self.metadata, "metadata"),
        ] {
            if shown {
                names.push(name);
            }
        }
        names
    }
}

/// Reads a step's `reviewerSees` (an external step's only), with a finding per
/// problem.
pub(super) fn read_reviewer_sees(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    completion: Completion,
    step: Option<&str>,
    path: &str,
) -> Option<ReviewerSees> {
    let value = object.get("reviewerSees")?;
    let path = format!("{path}.reviewerSees");
    if completion != Completion::External {
        draft.find(
            step,
            &path,
            "only an external step (completion \"external\") has a reviewer: drop 'reviewerSees'",
        );
        return None;
    }
    let Some(items) = value.as_array() else {
        draft.find(
            step,
            &path,
            format!(
                "'reviewerSees' must be a list like [\"request\"], not {}",
                json_kind(value)
            ),
        );
        return None;
    };
    let mut names = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(name) => names.push(name),
            None => {
                draft.find(
                    step,
                    format!("{path}[{i}]"),
                    format!(
                        "each entry is a name such as \"input\", not {}",
                        json_kind(item)
                    ),
                );
                return None;
            }
        }
    }
    match ReviewerSees::parse(names) {
        Ok(sees) => Some(sees),
        Err(why) => {
            draft.find(step, &path, why);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_unknown_ones_are_named() {
        let sees = ReviewerSees::parse(["request", "input"]).unwrap();
        assert_eq!(sees.names(), ["request", "input"]);
        assert_eq!(ReviewerSees::EVERYTHING.names(), REVIEWER_SEES);
        let error = ReviewerSees::parse(["inputs"]).unwrap_err();
        assert!(error.contains("did you mean 'input'?"), "{error}");
    }
}
