//! Fleet-wide limits on calls (migration V27): token buckets and caps on calls in
//! flight, taken by the worker before each call (see `worker::throttle`), all of a
//! call's limits at once or none.

use super::*;

/// One limit a call takes from: its bucket (rate and burst) and its cap on calls in
/// flight, each optional.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitAsk {
    /// The limit's name (`target:<pattern>` or `step:<workflow>.<step>[=key]`).
    pub name: String,
    /// Units per second, with the bucket's burst.
    pub rate: Option<(f64, f64)>,
    /// The most calls in flight at once.
    pub max_concurrent: Option<i32>,
    /// The units this call takes.
    pub units: f64,
}

/// A limit as the fleet holds it now.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitState {
    /// Its name.
    pub name: String,
    /// Tokens in its bucket now (negative in debt); `None` without a rate.
    pub tokens: Option<f64>,
    /// Its burst.
    pub burst: Option<f64>,
    /// Calls in flight under its cap.
    pub in_flight: i64,
    /// Its cap.
    pub max_concurrent: Option<i32>,
}

impl Store {
    /// Takes one call's units from every limit of `asks` at once, all or nothing,
    /// registering hold `hold` for `hold_for` under the capped ones: `Ok(None)` when
    /// taken, else how long until they may have room.
    pub async fn take_limits(
        &self,
        asks: &[LimitAsk],
        hold: Uuid,
        hold_for: Duration,
    ) -> Result<Option<Duration>, StoreError> {
        let mut sorted: Vec<&LimitAsk> = asks.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<&str> = sorted.iter().map(|a| a.name.as_str()).collect();
        let rates: Vec<Option<f64>> = sorted.iter().map(|a| a.rate.map(|r| r.0)).collect();
        let bursts: Vec<Option<f64>> = sorted.iter().map(|a| a.rate.map(|r| r.1)).collect();
        let caps: Vec<Option<i32>> = sorted.iter().map(|a| a.max_concurrent).collect();
        let units: Vec<f64> = sorted.iter().map(|a| a.units).collect();
        let client = self.pool.get().await?;
        let statement = client.prepare_cached(sql::TAKE_LIMITS).await?;
        let wait: f64 = client
            .query_one(
                &statement,
                &[
                    &names,
                    &rates,
                    &bursts,
                    &caps,
                    &units,
                    &hold,
                    &millis(hold_for),
                ],
            )
            .await?
            .get("wait");
        Ok((wait > 0.0).then(|| Duration::from_secs_f64(wait.min(86_400.0))))
    }

    /// Ends the holds of a call (its caps have room again).
    pub async fn release_holds(&self, hold: Uuid) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client.execute(sql::RELEASE_HOLDS, &[&hold]).await?;
        Ok(())
    }

    /// The limits and what they hold now (at most `limit`, by name).
    pub async fn limits_state(&self, limit: i64) -> Result<Vec<LimitState>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client.query(sql::LIMITS_STATE, &[&limit]).await?;
        Ok(rows
            .iter()
            .map(|row| LimitState {
                name: row.get("name"),
                tokens: row.get("tokens"),
                burst: row.get("burst"),
                in_flight: row.get("in_flight"),
                max_concurrent: row.get("max_concurrent"),
            })
            .collect())
    }
}
