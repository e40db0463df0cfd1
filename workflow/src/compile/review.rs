//! Reading `reviewerSees` (see [`crate::review`]) of an external step: what a reviewer (a token with the `jobs:review`
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
use crate::review::ReviewerSees;
use crate::spec::Completion;

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
