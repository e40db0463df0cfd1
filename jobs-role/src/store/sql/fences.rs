//! The conditions post-claim writes end with, as macros the statements of this
//! module and its siblings are built from: the claim's fence, the cancel guard, the
//! checkpoint's position.

/// The fence every post-claim write ends with.
macro_rules! fenced {
    ($($update:tt)*) => {
        concat!(
            $($update)*,
            "\n WHERE job_id = $1 AND status = 'RUNNING' AND lease_owner = $2 AND claims = $3"
        )
    };
}

/// The guard of every settlement and release: once an operator asked to cancel a
/// RUNNING job, nothing but CANCELLED ends its claim. The write matches nothing (as
/// for a lost claim) and the worker settles CANCELLED instead, so a cancel answered
/// `CANCEL_REQUESTED` always ends CANCELLED. Checkpoints are not guarded: one that
/// lands meanwhile is harmless history.
macro_rules! unless_cancel_requested {
    ($($fenced:tt)*) => {
        concat!($($fenced)*, "\n   AND NOT cancel_requested")
    };
}

/// The condition every checkpoint append ends with: the array holds exactly the
/// entries before this one (`$n`, the step's index). Sent twice (a COMMIT whose answer
/// was lost, then the write again), the second append matches nothing: a checkpoint
/// lands once, at its own position. (A column that is not an array, drifted, never
/// matches.)
macro_rules! at_position {
    ($($update:tt)*) => {
        concat!(
            $($update)*,
            "\n   AND CASE WHEN jsonb_typeof(checkpoints) = 'array' THEN jsonb_array_length(checkpoints) END = "
        )
    };
}
