//! One look at a consumer group: every partition of the requests topic, its committed
//! offset, its end and who holds it. Blocking round trips: run it off the async
//! threads.
//!
//! The questions go through the watch's own client (same settings and group, never
//! subscribed: it does not join the group), so a member whose connections are wedged
//! is not asked about itself; only the member's assignment and position, which it
//! knows without asking the broker, are read from the member.

use std::collections::HashSet;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{Holder, PartitionPosition, Reading};

/// How long one question to the broker may take.
const ASK_FOR: Duration = Duration::from_secs(5);

/// Looks at where `member`'s group (`group`) stands on every partition of `topic`,
/// asking the broker through `observer`. `starts_at_end`: the group's
/// `auto.offset.reset` is `latest`, so a partition it has committed nothing on is
/// taken from its end (nothing waits there until a record comes after it).
pub fn read_positions(
    observer: &BaseConsumer,
    member: &StreamConsumer,
    group: &str,
    topic: &str,
    starts_at_end: bool,
) -> Reading {
    let metadata = match observer.fetch_metadata(Some(topic), ASK_FOR) {
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
        return Reading::Positions {
            positions: Vec::new(),
            unread: Vec::new(),
        };
    }
    let committed = match observer.committed_offsets(partitions, ASK_FOR) {
        Ok(committed) => committed,
        Err(e) => return Reading::GroupUnreadable(e.to_string()),
    };
    let mine: HashSet<i32> = member
        .assignment()
        .map(|assigned| {
            assigned
                .elements_for_topic(topic)
                .iter()
                .map(|e| e.partition())
                .collect()
        })
        .unwrap_or_default();
    // Where this member has taken each partition it holds to (records handed to it,
    // and markers no record follows): what it has fetched is not stuck.
    let taken_to: Vec<(i32, i64)> = member
        .position()
        .map(|positions| {
            positions
                .elements_for_topic(topic)
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(at) => Some((e.partition(), at)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let others = others_holdings(observer, group, topic);
    let (mut positions, mut unread) = (Vec::new(), Vec::new());
    for entry in committed.elements() {
        let partition = entry.partition();
        let Ok((first, end)) = observer.fetch_watermarks(entry.topic(), partition, ASK_FOR) else {
            unread.push(partition);
            continue;
        };
        let committed_next = match entry.offset() {
            // Retention may have removed records the group never took: it resumes at
            // the first one left.
            Offset::Offset(next) => next.max(first),
            // Nothing committed yet: the group starts from the end, by its own rule
            // (and is then judged by where its member has taken the partition to),
            _ if starts_at_end => end,
            // or from the first record.
            _ => first,
        };
        let holder = if mine.contains(&partition) {
            Holder::ThisMember
        } else {
            match &others {
                Some(held) if held.contains(&partition) => Holder::OtherMember,
                Some(_) => Holder::Nobody,
                None => Holder::Unknown,
            }
        };
        let taken = taken_to
            .iter()
            .find(|(p, _)| *p == partition && holder == Holder::ThisMember)
            .map(|(_, at)| *at)
            .filter(|at| *at > committed_next);
        positions.push(PartitionPosition {
            partition,
            next: taken.unwrap_or(committed_next),
            end,
            holder,
            commit_to: taken,
        });
    }
    if positions.is_empty() && !unread.is_empty() {
        return Reading::BrokerUnreachable(format!(
            "no partition's end could be read ({} partitions)",
            unread.len()
        ));
    }
    Reading::Positions { positions, unread }
}

/// The partitions of `topic` the group's members hold, by the group's description;
/// `None` when it cannot be told (no answer, a rebalance under way, an assignment this
/// reader cannot follow).
fn others_holdings(observer: &BaseConsumer, group: &str, topic: &str) -> Option<HashSet<i32>> {
    let list = observer.fetch_group_list(Some(group), ASK_FOR).ok()?;
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
