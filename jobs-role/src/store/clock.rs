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
//! while the anchor holds (the reading was taken before the answer came), and behind
//! it by at most the reading's round trip. Each new reading ([`offer`]) bounds the
//! database's time at its arrival between `reading` and `reading + round trip`; the
//! anchor is replaced when its estimate falls below that range (the new reading is
//! tighter) or above it (the database's clock was stepped back, or the node failed
//! over to a host whose clock is behind, or the monotonic clock ran fast): so the
//! estimate is at most one sweep away from being back within a round trip of the
//! database. A replacement after the estimate ran ahead steps the stamps back by as
//! much; nothing else does. Until the first reading, [`now`] is the node's own clock.
//!
//! One anchor serves the process, on the assumption that its stores reach one
//! database host (or hosts keeping one time): a process whose stores read clocks that
//! disagree stamps by whichever was read last.

use std::sync::RwLock;
use std::time::{Instant, SystemTime};

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

    fn offer(&self, database: SystemTime, sent: Instant, arrived: Instant) {
        let round_trip = arrived.saturating_duration_since(sent);
        let mut anchor = self
            .anchor
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let keep = anchor.is_some_and(|old| {
            let estimate = old.estimate_at(arrived);
            estimate >= database && estimate <= database + round_trip
        });
        if !keep {
            *anchor = Some(Anchor { database, arrived });
        }
    }
}

static CLOCK: DatabaseClock = DatabaseClock::new();

/// The database's time now, as well as the node can tell (see the module docs); the
/// node's own clock until the database was first read.
pub fn now() -> SystemTime {
    CLOCK.now()
}

/// Takes a reading of the database's clock (`database`), asked at `sent` and
/// answered at `arrived`, as the anchor when the anchor's estimate falls outside what
/// the reading allows (see the module docs).
fn offer(database: SystemTime, sent: Instant, arrived: Instant) {
    CLOCK.offer(database, sent, arrived)
}

/// Reads the database's clock on `client` and [`offer`]s the reading.
pub(super) async fn read_on(client: &tokio_postgres::Client) -> Result<(), super::StoreError> {
    // Prepared first, so the timed round trip is the reading's alone.
    let statement = client.prepare(super::sql::READ_CLOCK).await?;
    let sent = Instant::now();
    let row = client.query_one(&statement, &[]).await?;
    offer(row.try_get(0)?, sent, Instant::now());
    Ok(())
}

impl super::Store {
    /// Reads the database's clock, keeping the anchor events are stamped from within
    /// a round trip of it (the sweeper does, each sweep, on the connections the
    /// sweeps use: a storm of readers never holds it up).
    pub async fn read_database_clock(&self) -> Result<(), super::StoreError> {
        let client = self.pool.get().await?;
        read_on(&client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_anchor_moves_to_a_tighter_reading_and_away_from_one_it_is_ahead_of() {
        use std::time::Duration;
        let clock = DatabaseClock::new();
        let ms = Duration::from_millis;
        // A database clock ten minutes ahead of this machine's.
        let database = SystemTime::now() + Duration::from_secs(600);
        let first = Instant::now();
        clock.offer(database, first, first + ms(4));
        let at = |clock: &DatabaseClock, instant| {
            clock.anchor.read().unwrap().unwrap().estimate_at(instant)
        };
        assert_eq!(at(&clock, first + ms(4)), database);
        // 10 ms on, a reading of +9 ms taken over a 3 ms round trip: the estimate
        // (+10) lies within [+9, +12], so the anchor stays.
        clock.offer(database + ms(9), first + ms(11), first + ms(14));
        assert_eq!(at(&clock, first + ms(14)), database + ms(10));
        // A tighter reading (+15 when the estimate says +14) is taken.
        clock.offer(database + ms(15), first + ms(17), first + ms(18));
        assert_eq!(at(&clock, first + ms(18)), database + ms(15));
        // The database's clock stepped back a second: the estimate is above what the
        // reading allows, and follows it at once.
        clock.offer(database - ms(1_000), first + ms(20), first + ms(21));
        assert_eq!(at(&clock, first + ms(21)), database - ms(1_000));
    }

    #[test]
    fn before_any_reading_the_node_keeps_its_own_time() {
        let clock = DatabaseClock::new();
        let before = SystemTime::now();
        let now = clock.now();
        assert!(now >= before && now <= SystemTime::now());
    }
}
