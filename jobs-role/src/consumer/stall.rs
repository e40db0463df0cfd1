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
//! So the watch looks at every partition of the requests topic: the group's committed
//! offset, the partition's end, and who holds it (this member, by its assignment;
//! another, by the group's description; nobody). A partition whose committed offset
//! stays put while records wait past it is stuck once that lasts
//! [`STALL_AFTER`] when this member holds it or nobody does, or [`OTHERS_AFTER`] when
//! another member does or the holder cannot be told (that member watches its own
//! partitions; it is only helped when it has neither recovered nor been evicted by
//! librdkafka's own `max.poll.interval.ms`, whose default the wait outlasts). A member
//! paused on the database holds its partitions still on purpose: its clocks restart
//! when it resumes, and its peers give it [`OTHERS_AFTER`], so a fleet does not
//! rebalance around a database outage.
//!
//! The first remedy is a rejoin (unsubscribe and subscribe: a rebalance, which hands
//! every partition out again); the next, [`STALL_AFTER`] later, replaces the client
//! with a new one (as after a restart); each further one waits twice as long as the
//! last, up to [`MOST_BETWEEN_REMEDIES`], so a partition that only looks stuck (a
//! transaction marker past the last record under `read_committed`, say) costs a
//! rebalance now and then, not a storm. A group whose offsets cannot be read while the
//! broker answers is treated the same way. A broker that does not answer at all is an
//! outage, which librdkafka rides out by itself: the watch starts over.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};

/// How long a partition this member holds (or nobody holds) may keep its committed
/// offset while records wait past it before the consumer acts.
pub const STALL_AFTER: Duration = Duration::from_secs(30);

/// The same for a partition another member holds (or whose holder cannot be told):
/// past librdkafka's default `max.poll.interval.ms` (300 s), after which a member that
/// stopped taking records leaves the group by itself.
pub const OTHERS_AFTER: Duration = Duration::from_secs(330);

/// The longest wait between two remedies of one stall.
pub const MOST_BETWEEN_REMEDIES: Duration = Duration::from_secs(30 * 60);

/// How long one question to the broker may take.
const ASK_FOR: Duration = Duration::from_secs(5);

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
    /// taken.
    pub next: i64,
    /// The offset the next record produced will get.
    pub end: i64,
    /// Who holds it.
    pub holder: Holder,
}

/// What one look at the group found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Every partition's position.
    Positions(Vec<PartitionPosition>),
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
#[derive(Debug, Default)]
pub struct StallWatch {
    /// Per partition with records waiting: its position and since when it held it.
    unmoved: HashMap<i32, (i64, Instant)>,
    /// Since when the group's offsets could not be read.
    unreadable_since: Option<Instant>,
    /// The remedies given to the stall that lasts, and when the last one was.
    remedies: Option<(u32, Instant)>,
}

impl StallWatch {
    /// Takes in one look at the group, made at `now`, and says what to do.
    pub fn observe(&mut self, reading: Reading, now: Instant) -> Remedy {
        let positions = match reading {
            Reading::BrokerUnreachable(_) => {
                self.forget();
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
                    format!("the group's committed offsets could not be read while the broker answered: {why}"),
                );
            }
            Reading::Positions(positions) => positions,
        };
        self.unreadable_since = None;
        let waiting: Vec<PartitionPosition> = positions
            .into_iter()
            .filter(|position| position.end > position.next)
            .collect();
        self.unmoved
            .retain(|partition, _| waiting.iter().any(|p| p.partition == *partition));
        let mut stuck = Vec::new();
        for position in &waiting {
            let entry = self
                .unmoved
                .entry(position.partition)
                .or_insert((position.next, now));
            if entry.0 != position.next {
                *entry = (position.next, now);
                continue;
            }
            let patience = match position.holder {
                Holder::ThisMember | Holder::Nobody => STALL_AFTER,
                Holder::OtherMember | Holder::Unknown => OTHERS_AFTER,
            };
            if now.duration_since(entry.1) >= patience {
                stuck.push(*position);
            }
        }
        if stuck.is_empty() {
            self.remedies = None;
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
        self.escalate(now, format!("nothing consumed: {described}"))
    }

    /// The next remedy of the stall that lasts, once the last one has had its time.
    fn escalate(&mut self, now: Instant, reason: String) -> Remedy {
        let given = match self.remedies {
            None => 0,
            Some((given, at)) => {
                // The second remedy follows the first after STALL_AFTER, each later one
                // after twice the wait before it.
                let wait = STALL_AFTER
                    .saturating_mul(1 << (given - 1).min(16))
                    .min(MOST_BETWEEN_REMEDIES);
                if now.duration_since(at) < wait {
                    return Remedy::Wait;
                }
                given
            }
        };
        self.remedies = Some((given + 1, now));
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
        for (_, since) in self.unmoved.values_mut() {
            *since = now;
        }
    }

    /// Starts over.
    pub fn forget(&mut self) {
        *self = StallWatch::default();
    }
}

/// Looks at where `consumer`'s group stands on every partition of `topic` (blocking
/// round trips: run it off the async threads).
pub fn read_positions(consumer: &StreamConsumer, group: &str, topic: &str) -> Reading {
    let metadata = match consumer.fetch_metadata(Some(topic), ASK_FOR) {
        Ok(metadata) => metadata,
        Err(e) => return Reading::BrokerUnreachable(e.to_string()),
    };
    let mut partitions = TopicPartitionList::new();
    for found in metadata.topics().iter().filter(|t| t.name() == topic) {
        for partition in found.partitions() {
            partitions.add_partition(topic, partition.id());
        }
    }
    if partitions.count() == 0 {
        return Reading::Positions(Vec::new());
    }
    let committed = match consumer.committed_offsets(partitions, ASK_FOR) {
        Ok(committed) => committed,
        Err(e) => return Reading::GroupUnreadable(e.to_string()),
    };
    let mine: HashSet<i32> = consumer
        .assignment()
        .map(|assigned| {
            assigned
                .elements_for_topic(topic)
                .iter()
                .map(|e| e.partition())
                .collect()
        })
        .unwrap_or_default();
    let others = others_holdings(consumer, group, topic);
    let mut positions = Vec::new();
    for entry in committed.elements() {
        let (first, end) =
            match consumer.fetch_watermarks(entry.topic(), entry.partition(), ASK_FOR) {
                Ok(watermarks) => watermarks,
                Err(e) => return Reading::BrokerUnreachable(e.to_string()),
            };
        let next = match entry.offset() {
            // Retention may have removed records the group never took: it resumes at
            // the first one left.
            Offset::Offset(next) => next.max(first),
            // Nothing committed yet: the group starts from the first record.
            _ => first,
        };
        let partition = entry.partition();
        let holder = if mine.contains(&partition) {
            Holder::ThisMember
        } else {
            match &others {
                Some(held) if held.contains(&partition) => Holder::OtherMember,
                Some(_) => Holder::Nobody,
                None => Holder::Unknown,
            }
        };
        positions.push(PartitionPosition {
            partition,
            next,
            end,
            holder,
        });
    }
    Reading::Positions(positions)
}

/// The partitions of `topic` the group's members hold, by the group's description;
/// `None` when it cannot be told (no answer, a rebalance under way, an assignment this
/// reader cannot follow).
fn others_holdings(consumer: &StreamConsumer, group: &str, topic: &str) -> Option<HashSet<i32>> {
    let list = consumer.fetch_group_list(Some(group), ASK_FOR).ok()?;
    let described = list.groups().iter().find(|g| g.name() == group)?;
    if described.state() != "Stable" {
        return None;
    }
    let mut held = HashSet::new();
    for member in described.members() {
        held.extend(assigned_partitions(member.assignment()?, topic)?);
    }
    Some(held)
}

/// The partitions of `topic` in a consumer-protocol assignment (`version int16`, then
/// `[topic string, [partition int32]]`, then user data, which is not read); `None`
/// when the bytes are not one.
pub fn assigned_partitions(bytes: &[u8], topic: &str) -> Option<Vec<i32>> {
    let mut rest = bytes;
    let version = take::<2>(&mut rest).map(i16::from_be_bytes)?;
    if version < 0 {
        return None;
    }
    let mut found = Vec::new();
    let topics = take::<4>(&mut rest).map(i32::from_be_bytes)?;
    for _ in 0..usize::try_from(topics).ok()? {
        let name_len = take::<2>(&mut rest).map(i16::from_be_bytes)?;
        let name_len = usize::try_from(name_len).ok()?;
        let name = rest.get(..name_len)?;
        rest = &rest[name_len..];
        let count = take::<4>(&mut rest).map(i32::from_be_bytes)?;
        for _ in 0..usize::try_from(count).ok()? {
            let partition = take::<4>(&mut rest).map(i32::from_be_bytes)?;
            if name == topic.as_bytes() {
                found.push(partition);
            }
        }
    }
    Some(found)
}

/// The next `N` bytes of `rest`, which moves past them.
fn take<const N: usize>(rest: &mut &[u8]) -> Option<[u8; N]> {
    let (taken, after) = rest.split_first_chunk::<N>()?;
    *rest = after;
    Some(*taken)
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
        }
    }

    fn look(watch: &mut StallWatch, start: Instant, secs: u64, p: &[PartitionPosition]) -> Remedy {
        watch.observe(
            Reading::Positions(p.to_vec()),
            start + Duration::from_secs(secs),
        )
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
        let (mut watch, t) = (StallWatch::default(), Instant::now());
        for holder in [Holder::OtherMember, Holder::Unknown] {
            watch.forget();
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
        // The outage is not counted as time the partition stood still.
        assert_eq!(look(&mut watch, t, 500, &[at(0, 1, 9)]), Remedy::Wait);
        assert_eq!(look(&mut watch, t, 525, &[at(0, 1, 9)]), Remedy::Wait);

        let unreadable = || Reading::GroupUnreadable("coordinator unavailable".into());
        watch.forget();
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

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut bytes = 1i16.to_be_bytes().to_vec();
        bytes.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (name, partitions) in topics {
            bytes.extend_from_slice(&(name.len() as i16).to_be_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
            for p in *partitions {
                bytes.extend_from_slice(&p.to_be_bytes());
            }
        }
        bytes.extend_from_slice(&(-1i32).to_be_bytes()); // no user data
        bytes
    }

    #[test]
    fn an_assignment_names_its_partitions_of_the_topic() {
        let bytes = assignment(&[("other", &[0, 1]), ("requests", &[2, 5])]);
        assert_eq!(assigned_partitions(&bytes, "requests"), Some(vec![2, 5]));
        assert_eq!(assigned_partitions(&bytes, "absent"), Some(vec![]));
    }

    #[test]
    fn hostile_assignments_are_no_answer() {
        let bytes = assignment(&[("requests", &[2, 5])]);
        for cut in 0..bytes.len() - 4 {
            assert_eq!(
                assigned_partitions(&bytes[..cut], "requests"),
                None,
                "{cut}"
            );
        }
        let mut huge = 0i16.to_be_bytes().to_vec();
        huge.extend_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(assigned_partitions(&huge, "requests"), None);
        let mut negative = 0i16.to_be_bytes().to_vec();
        negative.extend_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(assigned_partitions(&negative, "requests"), None);
        assert_eq!(
            assigned_partitions(&(-1i16).to_be_bytes(), "requests"),
            None
        );
    }
}
