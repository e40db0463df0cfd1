//! Reads for the verbs, operators, metrics and tests.

use super::*;

/// Filters of `list-jobs`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this status.
    pub status: Option<JobStatus>,
    /// Only this workflow.
    pub workflow_name: Option<String>,
    /// At most this many.
    pub limit: i64,
    /// Skip this many.
    pub offset: i64,
    /// Only jobs created before this instant (RFC 3339).
    pub created_before: Option<String>,
    /// Only jobs created after this instant (RFC 3339).
    pub created_after: Option<String>,
    /// Only jobs parked on this step.
    pub outstanding_step: Option<String>,
    /// Only jobs of this priority (0 to 9).
    pub priority: Option<i16>,
    /// Only jobs whose id lies in this range (a prefix of ids: see
    /// [`JobFilter::id_prefix_range`]).
    pub job_ids_between: Option<(Uuid, Uuid)>,
    /// Oldest first instead of newest first.
    pub oldest_first: bool,
    /// Keyset paging: the page starts after the job created at this instant (RFC
    /// 3339) with this id, in the list's order.
    pub after: Option<(String, Uuid)>,
    /// Only the children of this job.
    pub parent_job_id: Option<Uuid>,
    /// Only the jobs this schedule fired.
    pub schedule_name: Option<String>,
    /// Only the jobs whose metadata holds every entry of this object.
    pub metadata: Option<serde_json::Value>,
}

impl JobFilter {
    /// The ids that begin with `prefix` (hex digits, dashes ignored, 1 to 32 digits),
    /// as the inclusive range of the primary key they fill: a prefix search the
    /// index answers. `None` when `prefix` is not hex or too long.
    pub fn id_prefix_range(prefix: &str) -> Option<(Uuid, Uuid)> {
        let digits: String = prefix.chars().filter(|c| *c != '-').collect();
        if digits.is_empty() || digits.len() > 32 || !digits.chars().all(|c| c.is_ascii_hexdigit())
        {
            return None;
        }
        let low = format!("{digits:0<32}");
        let high = format!("{digits:f<32}");
        Some((Uuid::parse_str(&low).ok()?, Uuid::parse_str(&high).ok()?))
    }
}

impl Store {
    /// One job, every column (snake_case keys, as stored), or `None`.
    pub async fn get_job(&self, job_id: Uuid) -> Result<Option<Value>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_opt(sql::GET_JOB, &[&job_id])
            .await?
            .map(|row| row.get(0)))
    }

    /// One job as `get-job` shows it: every column, the workflow snapshot only when
    /// `with_definition`.
    pub async fn get_job_view(
        &self,
        job_id: Uuid,
        with_definition: bool,
    ) -> Result<Option<Value>, StoreError> {
        let statement = if with_definition {
            sql::GET_JOB
        } else {
            sql::GET_JOB_WITHOUT_DEFINITION
        };
        let client = self.shared().await?;
        Ok(client
            .query_opt(statement, &[&job_id])
            .await?
            .map(|row| row.get(0)))
    }

    /// Dead-lettered request records, newest first, as `list-rejects` shows them: the
    /// key as text when it is UTF-8, else in base64 (`recordKeyBase64`).
    pub async fn list_rejects(&self, limit: i64, offset: i64) -> Result<Vec<Value>, StoreError> {
        use base64::Engine as _;
        let client = self.shared().await?;
        let rows = client.query(sql::LIST_REJECTS, &[&limit, &offset]).await?;
        Ok(rows
            .iter()
            .map(|row| {
                let key: Option<Vec<u8>> = row.get("record_key");
                let mut reject = serde_json::json!({
                    "rejectId": row.get::<_, i64>("reject_id"),
                    "topic": row.get::<_, String>("topic"),
                    "partition": row.get::<_, i32>("partition"),
                    "recordOffset": row.get::<_, i64>("record_offset"),
                    "payloadBytes": row.get::<_, Option<i32>>("payload_bytes"),
                    "error": row.get::<_, String>("error"),
                    "receivedAt": row.get::<_, String>("received_at"),
                });
                match key.map(String::from_utf8) {
                    Some(Ok(text)) => reject["recordKey"] = Value::String(text),
                    Some(Err(bytes)) => {
                        reject["recordKeyBase64"] = Value::String(
                            base64::engine::general_purpose::STANDARD.encode(bytes.as_bytes()),
                        );
                    }
                    None => reject["recordKey"] = Value::Null,
                }
                reject
            })
            .collect())
    }

    /// Job summaries newest first (or oldest first).
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Value>, StoreError> {
        let client = self.shared().await?;
        let status = filter.status.map(JobStatus::as_str);
        let (low, high) = filter.job_ids_between.unzip();
        let (after_time, after_id) = filter.after.clone().unzip();
        let statement = if filter.oldest_first {
            sql::LIST_JOBS_OLDEST
        } else {
            sql::LIST_JOBS_NEWEST
        };
        // Planned for these values each call (`query` prepares an unnamed statement):
        // a cached, generic plan could not use the metadata filter's GIN index, whose
        // `$15 IS NULL OR metadata @> $15` only folds away with the value known.
        let rows = client
            .query(
                statement,
                &[
                    &status,
                    &filter.workflow_name,
                    &filter.limit,
                    &filter.offset,
                    &filter.created_before,
                    &filter.created_after,
                    &filter.outstanding_step,
                    &filter.priority,
                    &low,
                    &high,
                    &after_time,
                    &after_id,
                    &filter.parent_job_id,
                    &filter.schedule_name,
                    &filter.metadata,
                ],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Jobs that finished in the last hour, by status.
    pub async fn finished_last_hour(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query(sql::FINISHED_LAST_HOUR, &[])
            .await?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }

    /// Jobs finished in the last hour per minute: (Unix minute, completed, failed or
    /// dead).
    pub async fn finished_per_minute(&self) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query(sql::FINISHED_PER_MINUTE, &[])
            .await?
            .iter()
            .map(|row| (row.get("minute"), row.get("completed"), row.get("failed")))
            .collect())
    }

    /// A job's outbox rows, in order.
    pub async fn job_events(&self, job_id: Uuid) -> Result<Vec<OutboxRow>, StoreError> {
        let client = self.shared().await?;
        let rows = client.query(sql::JOB_EVENTS, &[&job_id]).await?;
        Ok(rows
            .iter()
            .map(|row| OutboxRow {
                event_id: row.get("event_id"),
                event_type: row.get("event_type"),
                payload: row.get("payload"),
                status: row.get("status"),
            })
            .collect())
    }

    /// How many jobs are in `status`.
    pub async fn count_jobs(&self, status: JobStatus) -> Result<i64, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_one(sql::COUNT_JOBS_IN_STATUS, &[&status.as_str()])
            .await?
            .get(0))
    }

    /// The lanes' backlog.
    pub async fn lane_counts(&self) -> Result<LaneCounts, StoreError> {
        let client = self.shared().await?;
        let row = client.query_one(sql::LANE_COUNTS, &[]).await?;
        Ok(LaneCounts {
            pending_events: row.get("pending"),
            failed_events: row.get("failed"),
            held_events: row.get("held"),
            rejected_requests: row.get("rejected"),
        })
    }

    /// An outbox row's status, attempts and last error.
    pub async fn outbox_row(
        &self,
        event_id: Uuid,
    ) -> Result<Option<(String, i32, Option<String>)>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query_opt(sql::OUTBOX_ROW, &[&event_id])
            .await?
            .map(|row| {
                (
                    row.get("status"),
                    row.get("attempts"),
                    row.get("last_error"),
                )
            }))
    }
}

/// The fleet's backlog for the metrics gauges ([`crate::metrics`]).
#[derive(Debug, Clone, Default)]
pub struct FleetState {
    /// PENDING outbox rows.
    pub outbox_pending: i64,
    /// HELD outbox rows.
    pub outbox_held: i64,
    /// FAILED (dead-lettered) outbox rows.
    pub outbox_failed: i64,
    /// Age of the oldest QUEUED job claimable now (0 without one).
    pub oldest_claimable_seconds: f64,
    /// Age of the oldest PENDING outbox row (0 without one).
    pub oldest_pending_seconds: f64,
}

/// The pool's connections now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections open.
    pub size: usize,
    /// Of those, idle.
    pub available: usize,
    /// Callers waiting for one.
    pub waiting: usize,
}

impl Store {
    /// The fleet's backlog for the metrics (oldest ages, outbox depth): what alerts
    /// read, each from an index (never the whole history).
    pub async fn fleet_backlog(&self) -> Result<FleetState, StoreError> {
        let client = self.shared().await?;
        let oldest_claimable_seconds = client.query_one(sql::OLDEST_CLAIMABLE, &[]).await?.get(0);
        let outbox = client.query_one(sql::OUTBOX_DEPTH, &[]).await?;
        Ok(FleetState {
            outbox_pending: outbox.get("pending"),
            outbox_held: outbox.get("held"),
            outbox_failed: outbox.get("failed"),
            oldest_claimable_seconds,
            oldest_pending_seconds: outbox.get("oldest_pending"),
        })
    }

    /// Live jobs by status and workflow, and WAITING jobs by step (from the partial
    /// indexes of live rows, migration V15).
    #[allow(clippy::type_complexity)]
    pub async fn fleet_live(
        &self,
    ) -> Result<(Vec<(String, String, i64)>, Vec<(String, String, i64)>), StoreError> {
        let client = self.shared().await?;
        let live_jobs = client
            .query(sql::LIVE_JOBS, &[])
            .await?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        let waiting = client
            .query(sql::WAITING_BY_STEP, &[])
            .await?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        Ok((live_jobs, waiting))
    }

    /// The database server the node's connections reach now, as it names itself
    /// (`address:port`): with a multi-host URL, the primary of the moment.
    pub async fn database_server(&self) -> Result<String, StoreError> {
        let client = self.shared().await?;
        Ok(client.query_one(sql::DATABASE_SERVER, &[]).await?.get(0))
    }

    /// Parked jobs by what they wait for (`external`, `event`, `sleep`, `child`), as
    /// [`sql::PARKED_BY_KIND`] counts them.
    pub async fn parked_by_kind(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.shared().await?;
        Ok(client
            .query(sql::PARKED_BY_KIND, &[])
            .await?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }

    /// The pool's connections now.
    pub fn pool_status(&self) -> PoolStatus {
        let status = self.pool.status();
        PoolStatus {
            size: status.size,
            available: status.available,
            waiting: status.waiting,
        }
    }
}
