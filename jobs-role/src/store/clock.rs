//! The database's clock, read on the node: what events are stamped with.
//!
//! Leases, sleeps, waits and schedule ticks are judged by PostgreSQL's `now()`, so a
//! node whose clock is off never runs a job another holds. Event times are written by
//! the node, though (the payload is encoded before the insert), and a fleet whose
//! clocks disagree would stamp a job's events out of order: a sleep would look woken
//! before it began. So the node anchors the database's clock to its own monotonic
//! clock (which no clock step moves) and stamps with that: [`now`].
//!
//! An anchor is a reading of `clock_timestamp()` paired with the [`Instant`] its
//! answer arrived: the estimate `reading + elapsed` is never ahead of the database
//! (the reading was taken before the answer came), and behind it by at most one round
//! trip. Each new reading ([`offer`]) replaces the anchor when it is a tighter bound
//! (later than the estimate) or the anchor is older than [`REANCHOR_AFTER`] (so a
//! database whose clock was stepped back, or a failover to a host whose clock is
//! behind, is followed within minutes). Until the first reading, [`now`] is the node's
//! own clock. One anchor serves the process: every store a process opens reads a
//! database on the same host's clock in practice, and a later reading only tightens it.

use std::sync::RwLock;
use std::time::{Duration, Instant, SystemTime};

/// How long an anchor is kept when later readings are no tighter.
pub const REANCHOR_AFTER: Duration = Duration::from_secs(300);

/// A reading of the database's clock and when, on this node's monotonic clock, it
/// arrived.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    database: SystemTime,
    arrived: Instant,
}

impl Anchor {
    fn estimate_at(self, instant: Instant) -> SystemTime {
        self.database + instant.saturating_duration_since(self.arrived)
    }
}

/// An anchor behind a lock (the process has one: [`now`], [`offer`]).
#[derive(Debug, Default)]
struct DatabaseClock {
    anchor: RwLock<Option<Anchor>>,
}

impl DatabaseClock {
    const fn new() -> Self {
        DatabaseClock {
            anchor: RwLock::new(None),
        }
    }

    fn now(&self) -> SystemTime {
        // A poisoned lock held only a Copy value, which is still whole: read it anyway.
        let anchor = *self
            .anchor
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        anchor.map_or_else(SystemTime::now, |anchor| anchor.estimate_at(Instant::now()))
    }

    fn offer(&self, database: SystemTime, arrived: Instant) {
        let fresh = Anchor { database, arrived };
        let mut anchor = self
            .anchor
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let keep = anchor.is_some_and(|old| {
            arrived.saturating_duration_since(old.arrived) < REANCHOR_AFTER
                && old.estimate_at(arrived) >= database
        });
        if !keep {
            *anchor = Some(fresh);
        }
    }
}

static CLOCK: DatabaseClock = DatabaseClock::new();

/// The database's time now, as well as the node can tell (see the module docs); the
/// node's own clock until the database was first read.
pub fn now() -> SystemTime {
    CLOCK.now()
}

/// Takes a reading of the database's clock (`database`), whose answer arrived at
/// `arrived`, as the anchor when it is tighter or the anchor is old.
pub fn offer(database: SystemTime, arrived: Instant) {
    CLOCK.offer(database, arrived)
}

/// Reads the database's clock on `client` and [`offer`]s the reading.
pub(super) async fn read_on(client: &tokio_postgres::Client) -> Result<(), super::StoreError> {
    let row = client.query_one(super::sql::READ_CLOCK, &[]).await?;
    offer(row.try_get(0)?, Instant::now());
    Ok(())
}

impl super::Store {
    /// Reads the database's clock, tightening the anchor events are stamped from
    /// (the sweeper does, each sweep).
    pub async fn read_database_clock(&self) -> Result<(), super::StoreError> {
        let connection = self.shared().await?;
        read_on(&connection).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_follows_the_monotonic_clock_from_the_tightest_reading() {
        let clock = DatabaseClock::new();
        // A clock ten minutes ahead of this machine's.
        let skewed = SystemTime::now() + Duration::from_secs(600);
        let first = Instant::now();
        clock.offer(skewed, first);
        let estimate = clock.now();
        assert!(estimate >= skewed && estimate < skewed + Duration::from_secs(60));
        let at = |clock: &DatabaseClock, instant| {
            clock.anchor.read().unwrap().unwrap().estimate_at(instant)
        };
        // A looser reading (earlier than the estimate) is not taken...
        clock.offer(skewed, first + Duration::from_millis(10));
        assert_eq!(at(&clock, first), skewed);
        // ...a tighter one is.
        let later = first + Duration::from_millis(5);
        clock.offer(skewed + Duration::from_millis(50), later);
        assert_eq!(at(&clock, later), skewed + Duration::from_millis(50));
        // An old anchor gives way to any reading, even one behind it.
        let much_later = first + REANCHOR_AFTER + Duration::from_secs(1);
        clock.offer(skewed, much_later);
        assert_eq!(at(&clock, much_later), skewed);
    }

    #[test]
    fn before_any_reading_the_node_keeps_its_own_time() {
        let clock = DatabaseClock::new();
        let before = SystemTime::now();
        let now = clock.now();
        assert!(now >= before && now <= SystemTime::now());
    }
}
