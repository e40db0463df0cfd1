//! The exit codes a script can branch on (the table is in the crate documentation).

/// Exit code: the job is FAILED, DEAD or CANCELLED.
const JOB_DID_NOT_SUCCEED: u8 = 1;
/// Exit code: the command line is wrong.
pub(crate) const USAGE: u8 = 2;
/// Exit code: the node is unreachable or refused the call.
pub(crate) const UNREACHABLE_OR_REFUSED: u8 = 3;

/// The exit code for a job in `status`.
pub(crate) fn exit_for(status: &str) -> u8 {
    match status {
        "FAILED" | "DEAD" | "CANCELLED" => JOB_DID_NOT_SUCCEED,
        _ => 0,
    }
}
