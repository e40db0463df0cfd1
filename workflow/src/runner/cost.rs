//! What one step call costs under its step's `rateLimit` (the runner computes it,
//! the sink's admission takes it).

/// What one call costs under its step's `rateLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCost {
    /// The bucket's key value (`None`: the step's one bucket).
    pub key: Option<String>,
    /// The units the call takes.
    pub units: u64,
}
