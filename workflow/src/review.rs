//! What a reviewer (a token with the `jobs:review` scope and not `jobs:read`) is shown
//! of a job parked on a human step, besides the step's request and the form of its
//! answer: [`ReviewerSees`], read from a step's `reviewerSees` (see
//! `compile::review`) or a node's default.

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
