//! Noticing a request consumer that receives nothing while records wait, and what to
//! do about it.
//!
//! librdkafka recovers from most broker trouble by itself, but the chaos runs found two
//! states it stays in: consumers that, after broker restarts, kept their assignment and
//! fetched nothing for minutes; and (a 2,000-job run under every fault) a group whose
//! consumers held one partition at the same committed offset to the end of the run
//! while 85 requests waited behind it, never noticed because the check then asked only
//! about the partitions the consumer believed it held, and only while it was idle.
//!
//! So the watch looks at every partition of the requests topic ([`look`], through a
//! client of its own, so a consumer whose connections are wedged is not asked about
//! itself): the group's committed offset, the partition's end, and who holds it (this
//! member, by its assignment; another, by the group's description; nobody). A
//! partition this member holds counts as taken up to where the member has fetched
//! (markers of transactions, which no record follows, included; the consumer commits
//! that position when idle). A partition whose position stays put while records wait
//! past it is stuck once that lasts [`STALL_AFTER`] when this member holds it or
//! nobody does, or longer when another member does or the holder cannot be told
//! ([`StallWatch::new`]: librdkafka's `max.poll.interval.ms` and [`STALL_AFTER`] more,
//! since a member that stops taking records for that long leaves the group by
//! itself). A partition that changes hands starts its clock again. A member paused on
//! the database holds its partitions still on purpose: its clocks restart when it
//! resumes, and its peers give it the longer wait, so a fleet does not rebalance around
//! a short database outage.
//!
//! The first remedy is a rejoin (unsubscribe and subscribe: a rebalance, which hands
//! every partition out again); the next, [`STALL_AFTER`] later, replaces the client
//! with a new one (as after a restart); each further one waits twice as long as the
//! last, up to [`MOST_BETWEEN_REMEDIES`], until the stuck partitions move or nothing
//! waits on them, so a partition that only looks stuck costs a rebalance now and then,
//! not a storm. A group whose offsets cannot be read while the broker answers is
//! treated the same way. A broker that does not answer the watch's client at all is an
//! outage, which librdkafka rides out by itself: the clocks start again (the remedies
//! given so far are remembered); a partition whose end alone could not be read keeps
//! its clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

pub mod look;

pub use look::{assigned_partitions, read_positions};

/// How long a partition this member holds (or nobody holds) may keep its committed
/// offset while records wait past it before the consumer acts.
pub const STALL_AFTER: Duration = Duration::from_secs(30);

/// librdkafka's default `max.poll.interval.ms`: a member that takes no record for this
/// long leaves its group by itself.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// The longest wait between two remedies of one stall.
pub const MOST_BETWEEN_REMEDIES: Duration = Duration::from_secs(30 * 60);

/// Who holds a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// This member (its assignment names it).
    ThisMember,
    /// Another member of the group (the group's description names it).
    OtherMember,
    /// Nobody: the group is stable and no member's assignment names it.
    Nobody,
    /// Not this member; who else, the group's description could not say.
    Unknown,
}

/// Where the group stands on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionPosition {
    /// The partition.
    pub partition: i32,
    /// The next offset the group will take: its committed offset, or the partition's
    /// first record when it has committed none or retention removed what it had not
    /// taken; for a partition this member holds, where it has fetched to, when that is
    /// further.
    pub next: i64,
    /// The offset the next record produced will get.
    pub end: i64,
    /// Who holds it.
    pub holder: Holder,
    /// This member's position, when it holds the partition and has taken it past the
    /// committed offset with nothing left to handle (a transaction marker, say): to be
    /// committed.
    pub commit_to: Option<i64>,
}

/// What one look at the group found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Every partition's position, but those whose end could not be read (`unread`).
    Positions {
        /// The partitions read.
        positions: Vec<PartitionPosition>,
        /// The partitions whose end could not be read (their clocks keep running).
        unread: Vec<i32>,
    },
    /// The broker answered, but the group's committed offsets could not be read.
    GroupUnreadable(String),
    /// The broker did not answer: an outage.
    BrokerUnreachable(String),
}

/// What the consumer should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// Nothing is stuck (or the last remedy is still being given its time).
    Wait,
    /// Unsubscribe and subscribe again.
    Rejoin {
        /// Why, for the log.
        reason: String,
    },
    /// Drop the client and build a new one.
    Rebuild {
        /// Why, for the log.
        reason: String,
    },
}

/// Remembers, between looks, since when each waiting partition's position stayed put
/// and what was done about it.
#[derive(Debug)]
pub struct StallWatch {
    /// How long a partition another member holds may stand still.
    others_after: Duration,
    /// Per partition with records waiting: its position, whether another member (or
    /// an unknown one) holds it, and since when both are so.
    unmoved: HashMap<i32, Unmoved>,
    /// Since when the group's offsets could not be read.
    unreadable_since: Option<Instant>,
    /// The stall that lasts: the partitions stuck when it was last remedied (empty for
    /// an unreadable group), the remedies given and when the last one was.
    stall: Option<Stall>,
}

#[derive(Debug, Clone, Copy)]
struct Unmoved {
    next: i64,
    held_by_others: bool,
    since: Instant,
}

#[derive(Debug)]
struct Stall {
    partitions: HashMap<i32, i64>,
    remedies: u32,
    last: Instant,
}

impl Default for StallWatch {
    fn default() -> Self {
        StallWatch::new(DEFAULT_MAX_POLL_INTERVAL)
    }
}

impl StallWatch {
    /// A watch for a consumer whose group evicts a member that takes no record for
    /// `max_poll_interval`: another member's partition is given that and
    /// [`STALL_AFTER`] more.
    pub fn new(max_poll_interval: Duration) -> Self {
        StallWatch {
            others_after: max_poll_interval.saturating_add(STALL_AFTER),
            unmoved: HashMap::new(),
            unreadable_since: None,
            stall: None,
        }
    }

    /// Takes in one look at the group, made at `now`, and says what to do.
    pub fn observe(&mut self, reading: Reading, now: Instant) -> Remedy {
        let (positions, unread) = match reading {
            Reading::BrokerUnreachable(_) => {
                self.unreadable_since = None;
                self.restart_clocks(now);
                return Remedy::Wait;
            }
            Reading::GroupUnreadable(why) => {
                self.unmoved.clear();
                let since = *self.unreadable_since.get_or_insert(now);
                if now.duration_since(since) < STALL_AFTER {
                    return Remedy::Wait;
                }
                return self.escalate(
                    now,
                    HashMap::new(),
                    format!("the group's committed offsets could not be read while the broker answered: {why}"),
                );
            }
            Reading::Positions { positions, unread } => (positions, unread),
        };
        self.unreadable_since = None;
        let waiting: Vec<PartitionPosition> = positions
            .into_iter()
            .filter(|position| position.end > position.next)
            .collect();
        let is_waiting = |partition: i32| waiting.iter().any(|p| p.partition == partition);
        self.unmoved
            .retain(|partition, _| is_waiting(*partition) || unread.contains(partition));
        // A stall is over once each of its partitions moved or has nothing waiting
        // (an unreadable group's, once the group reads).
        if let Some(stall) = &self.stall
            && stall.partitions.iter().all(|(partition, next)| {
                !unread.contains(partition)
                    && waiting
                        .iter()
                        .find(|p| p.partition == *partition)
                        .is_none_or(|p| p.next != *next)
            })
        {
            self.stall = None;
        }
        let mut stuck = Vec::new();
        for position in &waiting {
            let held_by_others = matches!(position.holder, Holder::OtherMember | Holder::Unknown);
            let entry = self.unmoved.entry(position.partition).or_insert(Unmoved {
                next: position.next,
                held_by_others,
                since: now,
            });
            if entry.next != position.next || entry.held_by_others != held_by_others {
                // It moved, or changed hands: a new holder gets its own time.
                *entry = Unmoved {
                    next: position.next,
                    held_by_others,
                    since: now,
                };
                continue;
            }
            let patience = if held_by_others {
                self.others_after
            } else {
                STALL_AFTER
            };
            if now.duration_since(entry.since) >= patience {
                stuck.push(*position);
            }
        }
        if stuck.is_empty() {
            return Remedy::Wait;
        }
        let described = stuck
            .iter()
            .map(|p| {
                format!(
                    "partition {} ({:?}) at offset {} with {} waiting",
                    p.partition,
                    p.holder,
                    p.next,
                    p.end - p.next
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let partitions = stuck.iter().map(|p| (p.partition, p.next)).collect();
        self.escalate(now, partitions, format!("nothing consumed: {described}"))
    }

    /// The next remedy of the stall that lasts, once the last one has had its time.
    fn escalate(&mut self, now: Instant, partitions: HashMap<i32, i64>, reason: String) -> Remedy {
        let given = match &self.stall {
            None => 0,
            Some(stall) => {
                // The second remedy follows the first after STALL_AFTER, each later one
                // after twice the wait before it.
                let wait = STALL_AFTER
                    .saturating_mul(1 << stall.remedies.saturating_sub(1).min(16))
                    .min(MOST_BETWEEN_REMEDIES);
                if now.duration_since(stall.last) < wait {
                    return Remedy::Wait;
                }
                stall.remedies
            }
        };
        self.stall = Some(Stall {
            partitions,
            remedies: given + 1,
            last: now,
        });
        if given == 0 {
            Remedy::Rejoin { reason }
        } else {
            Remedy::Rebuild {
                reason: format!("{reason} (remedy {} of this stall)", given + 1),
            }
        }
    }

    /// Starts the clocks of every waiting partition again from `now`: after this
    /// member paused on the database (committing nothing meanwhile, on purpose).
    pub fn restart_clocks(&mut self, now: Instant) {
        for unmoved in self.unmoved.values_mut() {
            unmoved.since = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(partition: i32, next: i64, end: i64) -> PartitionPosition {
        held_by(Holder::ThisMember, partition, next, end)
    }

    fn held_by(holder: Holder, partition: i32, next: i64, end: i64) -> PartitionPosition {
        PartitionPosition {
            partition,
            next,
            end,
            holder,
            commit_to: None,
        }
    }

    fn reading(p: &[PartitionPosition]) -> Reading {
        Reading::Positions {
            positions: p.to_vec(),
            unread: Vec::new(),
        }
    }

    fn look(watch: &mut StallWatch, start: Instant, secs: u64, p: &[PartitionPosition]) -> Remedy {
        watch.observe(reading(p), start + Duration::from_secs(secs))
    }

    #[test]
    fn a_partition_that_keeps_moving_is_never_stuck() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        for i in 0..60 {
            assert_eq!(
                look(&mut watch, t, i * 5, &[at(0, i as i64, 1_000)]),
                Remedy::Wait
            );
        }
    }

    #[test]
    fn a_partition_with_nothing_waiting_is_never_stuck() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        for i in 0..60 {
            assert_eq!(look(&mut watch, t, i * 5, &[at(0, 7, 7)]), Remedy::Wait);
        }
    }

    #[test]
    fn a_stuck_partition_is_rejoined_then_rebuilt_then_left_longer_each_time() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        let stuck = [at(0, 500, 510), held_by(Holder::Nobody, 1, 233, 318)];
        assert_eq!(look(&mut watch, t, 0, &stuck), Remedy::Wait);
        assert_eq!(look(&mut watch, t, 25, &stuck), Remedy::Wait);
        let Remedy::Rejoin { reason } = look(&mut watch, t, 30, &stuck) else {
            panic!("a rejoin after 30 s");
        };
        assert!(
            reason.contains("partition 1 (Nobody) at offset 233 with 85 waiting"),
            "{reason}"
        );
        // The rejoin is given its time before anything more is done.
        assert_eq!(look(&mut watch, t, 45, &stuck), Remedy::Wait);
        assert!(matches!(
            look(&mut watch, t, 60, &stuck),
            Remedy::Rebuild { .. }
        ));
        // Then 60 s, 120 s, ... up to 30 min between remedies.
        let mut remedies = Vec::new();
        for secs in (65..20_000).step_by(5) {
            if look(&mut watch, t, secs, &stuck) != Remedy::Wait {
                remedies.push(secs);
            }
        }
        assert_eq!(
            remedies,
            [
                120, 240, 480, 960, 1920, 3720, 5520, 7320, 9120, 10920, 12720, 14520, 16320,
                18120, 19920
            ]
        );
    }

    #[test]
    fn a_partition_another_member_holds_is_left_to_it_for_longer() {
        let t = Instant::now();
        for holder in [Holder::OtherMember, Holder::Unknown] {
            let mut watch = StallWatch::default();
            let stuck = [held_by(holder, 0, 10, 20)];
            for secs in (0..330).step_by(5) {
                assert_eq!(
                    look(&mut watch, t, secs, &stuck),
                    Remedy::Wait,
                    "{holder:?}"
                );
            }
            assert!(matches!(
                look(&mut watch, t, 330, &stuck),
                Remedy::Rejoin { .. }
            ));
        }
    }

    #[test]
    fn a_rejoin_that_worked_is_forgotten() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        look(&mut watch, t, 0, &[at(1, 233, 318)]);
        assert!(matches!(
            look(&mut watch, t, 30, &[at(1, 233, 318)]),
            Remedy::Rejoin { .. }
        ));
        assert_eq!(look(&mut watch, t, 35, &[at(1, 300, 318)]), Remedy::Wait);
        assert_eq!(look(&mut watch, t, 40, &[at(1, 318, 318)]), Remedy::Wait);
        // A later stall starts with a rejoin again.
        look(&mut watch, t, 100, &[at(1, 318, 400)]);
        assert!(matches!(
            look(&mut watch, t, 130, &[at(1, 318, 400)]),
            Remedy::Rejoin { .. }
        ));
    }

    #[test]
    fn an_unreadable_group_is_remedied_an_unreachable_broker_restarts_the_watch() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        look(&mut watch, t, 0, &[at(0, 1, 9)]);
        for i in 1..100 {
            let unreachable = Reading::BrokerUnreachable("all brokers down".into());
            assert_eq!(
                watch.observe(unreachable, t + Duration::from_secs(i * 5)),
                Remedy::Wait
            );
        }
        // The outage (its last look at 495 s) is not counted as time the partition
        // stood still.
        assert_eq!(look(&mut watch, t, 520, &[at(0, 1, 9)]), Remedy::Wait);
        assert!(matches!(
            look(&mut watch, t, 525, &[at(0, 1, 9)]),
            Remedy::Rejoin { .. }
        ));

        let unreadable = || Reading::GroupUnreadable("coordinator unavailable".into());
        let mut watch = StallWatch::default();
        assert_eq!(watch.observe(unreadable(), t), Remedy::Wait);
        assert_eq!(
            watch.observe(unreadable(), t + Duration::from_secs(20)),
            Remedy::Wait
        );
        assert!(matches!(
            watch.observe(unreadable(), t + Duration::from_secs(30)),
            Remedy::Rejoin { .. }
        ));
        assert_eq!(
            watch.observe(unreadable(), t + Duration::from_secs(45)),
            Remedy::Wait
        );
        assert!(matches!(
            watch.observe(unreadable(), t + Duration::from_secs(60)),
            Remedy::Rebuild { .. }
        ));
    }

    #[test]
    fn a_pause_on_the_database_restarts_the_clocks() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        look(&mut watch, t, 0, &[at(0, 1, 9)]);
        watch.restart_clocks(t + Duration::from_secs(40));
        assert_eq!(look(&mut watch, t, 45, &[at(0, 1, 9)]), Remedy::Wait);
        assert!(matches!(
            look(&mut watch, t, 70, &[at(0, 1, 9)]),
            Remedy::Rejoin { .. }
        ));
    }

    #[test]
    fn the_wait_for_another_members_partition_follows_its_poll_interval() {
        let (mut watch, t) = (StallWatch::new(Duration::from_secs(600)), Instant::now());
        let stuck = [held_by(Holder::OtherMember, 0, 10, 20)];
        assert_eq!(look(&mut watch, t, 0, &stuck), Remedy::Wait);
        assert_eq!(look(&mut watch, t, 625, &stuck), Remedy::Wait);
        assert!(matches!(
            look(&mut watch, t, 630, &stuck),
            Remedy::Rejoin { .. }
        ));
    }

    #[test]
    fn a_partition_that_changes_hands_starts_its_clock_again_but_the_stall_goes_on() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        let mine = [at(0, 10, 20)];
        look(&mut watch, t, 0, &mine);
        assert!(matches!(
            look(&mut watch, t, 30, &mine),
            Remedy::Rejoin { .. }
        ));
        // Rebalancing: held by nobody this member can name, then by it again.
        let rebalancing = [held_by(Holder::Unknown, 0, 10, 20)];
        assert_eq!(look(&mut watch, t, 35, &rebalancing), Remedy::Wait);
        assert_eq!(look(&mut watch, t, 40, &mine), Remedy::Wait);
        assert_eq!(look(&mut watch, t, 65, &mine), Remedy::Wait);
        // Its clock started again at 40 s; the stall did not: the next remedy follows.
        assert!(matches!(
            look(&mut watch, t, 70, &mine),
            Remedy::Rebuild { .. }
        ));
    }

    #[test]
    fn a_partition_whose_end_could_not_be_read_keeps_its_clock() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        look(&mut watch, t, 0, &[at(0, 10, 20), at(1, 5, 5)]);
        let partly = Reading::Positions {
            positions: vec![at(1, 5, 5)],
            unread: vec![0],
        };
        assert_eq!(
            watch.observe(partly, t + Duration::from_secs(20)),
            Remedy::Wait
        );
        assert!(matches!(
            look(&mut watch, t, 30, &[at(0, 10, 20), at(1, 5, 5)]),
            Remedy::Rejoin { .. }
        ));
    }

    #[test]
    fn an_outage_remembers_the_remedies_given() {
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        let stuck = [at(0, 10, 20)];
        look(&mut watch, t, 0, &stuck);
        assert!(matches!(
            look(&mut watch, t, 30, &stuck),
            Remedy::Rejoin { .. }
        ));
        let unreachable = Reading::BrokerUnreachable("all brokers down".into());
        assert_eq!(
            watch.observe(unreachable, t + Duration::from_secs(40)),
            Remedy::Wait
        );
        assert_eq!(look(&mut watch, t, 65, &stuck), Remedy::Wait);
        assert!(matches!(
            look(&mut watch, t, 70, &stuck),
            Remedy::Rebuild { .. }
        ));
    }
}
