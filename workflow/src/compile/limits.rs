//! The bounds of an envelope, so a hostile one costs little.

use std::time::Duration;

/// Default bound of one segment of a run.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(30_000);
/// Most steps a workflow may declare.
pub const MAX_STEPS: usize = 200;
/// Most rules one step (or the output mapping) may declare.
pub const MAX_RULES: usize = 200;
/// Longest the runner waits for a response's `buf.validate` check (less when the
/// segment has less left).
pub const RULES_TIME_LIMIT: Duration = Duration::from_secs(1);
pub(super) const MAX_NAME_CHARS: usize = 200;
/// The largest `maxResponseBytes` a step may declare.
pub const MAX_RESPONSE_BYTES_CEILING: u64 = 256 * 1024 * 1024;
pub(super) const MAX_DEADLINE_MS: u64 = 86_400_000;
/// The longest an external step may wait for its answer: 366 days.
pub const MAX_WAIT_TIMEOUT_MS: u64 = 366 * 86_400_000;
/// The longest an event step's `eventLookbackMs` may be: 7 days (the engine keeps
/// sent events that long).
pub const MAX_EVENT_LOOKBACK_MS: u64 = 7 * 86_400_000;

/// Stack for [`CompiledWorkflow::compile`](crate::CompiledWorkflow::compile)'s thread: as much as the CEL parser's own
/// thread has ([`crate::gate`]), since the validator parses the same rules. Reserved,
/// not used, unless a workflow is that deep.
pub const COMPILE_STACK_BYTES: usize = 256 * 1024 * 1024;
