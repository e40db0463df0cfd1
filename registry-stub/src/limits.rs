//! Limits every route shares.

/// Largest request body accepted (envelopes carry descriptor sets).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
