//! `list-rejects {limit?, offset?}` → `{ok: true, rejects: [...]}`: the request
//! records the consumer dead-lettered (see the reject table in `docs/kafka.md`), newest first.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};

use super::{JobsState, store_error};

/// Rows answered when the caller gives no limit.
const DEFAULT_LIMIT: i64 = 50;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let limit = request
        .get("limit")
        .and_then(Value::as_i64)
        .filter(|limit| *limit > 0)
        .unwrap_or(DEFAULT_LIMIT);
    let offset = request.get("offset").and_then(Value::as_i64).unwrap_or(0);
    let rejects = state
        .store
        .list_rejects(limit, offset)
        .await
        .map_err(store_error)?;
    Ok(json!({ "ok": true, "rejects": rejects }))
}
