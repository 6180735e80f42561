//! The embedded bus through its public API: publish, consume, commit,
//! reopen, groups, retention, wakeups.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{assert_drained, payload, payload_number, poll_exactly};
use kiln_ingest_bus::{Bus, BusError, EmbeddedBus, EmbeddedBusOptions, Record, partition_for};

fn keys() -> impl Iterator<Item = Vec<u8>> {
    (0..).map(|i: u32| format!("host-{}", i % 7).into_bytes())
}

async fn publish_numbered(bus: &dyn Bus, range: std::ops::Range<u64>) {
    for (i, key) in range.zip(keys()) {
        let at = bus.publish(&key, payload(i)).await.unwrap();
        assert_eq!(at.partition, partition_for(&key, bus.partition_count()));
    }
}

fn numbers(records: &[Record]) -> Vec<u64> {
    let mut n: Vec<u64> = records
        .iter()
        .map(|r| payload_number(&r.payload).unwrap())
        .collect();
    n.sort_unstable();
    n
}

/// The basic cycle, and at-least-once across a restart: what was committed
/// is not seen again, what was read but not committed is.
#[tokio::test]
async fn reopen_resumes_after_commit_and_redelivers_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 3).unwrap();
    publish_numbered(&bus, 0..30).await;
    assert_eq!(bus.end_offsets().iter().sum::<u64>(), 30);

    let mut consumer = bus.consumer("workers").await.unwrap();
    let records = poll_exactly(&mut *consumer, 30).await;
    assert_eq!(numbers(&records), (0..30).collect::<Vec<_>>());
    assert_drained(&mut *consumer).await;

    // Commit the first half of each partition only.
    let mut by_partition: BTreeMap<u32, Vec<&Record>> = BTreeMap::new();
    for r in &records {
        by_partition.entry(r.partition).or_default().push(r);
    }
    let mut redelivered = Vec::new();
    for (&p, rs) in &by_partition {
        let half = rs.len() / 2;
        consumer.commit(p, rs[half].offset).await.unwrap();
        redelivered.extend(
            rs[half..]
                .iter()
                .map(|r| payload_number(&r.payload).unwrap()),
        );
    }
    redelivered.sort_unstable();
    let committed = bus.committed("workers").unwrap().unwrap();
    drop(consumer);
    drop(bus);

    let bus = EmbeddedBus::open(dir.path(), 3).unwrap();
    assert_eq!(bus.committed("workers").unwrap().unwrap(), committed);
    let mut consumer = bus.consumer("workers").await.unwrap();
    let again = poll_exactly(&mut *consumer, redelivered.len()).await;
    assert_eq!(numbers(&again), redelivered);
    assert_drained(&mut *consumer).await;

    // And the log keeps growing from where it was.
    let at = bus.publish(b"k", payload(99)).await.unwrap();
    assert_eq!(at.offset, bus.end_offsets()[at.partition as usize] - 1);
    assert_eq!(poll_exactly(&mut *consumer, 1).await[0].offset, at.offset);
}

/// Records of one key keep their publish order.
#[tokio::test]
async fn records_of_a_key_stay_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedBusOptions::default().segment_bytes(2000);
    let bus = EmbeddedBus::open_with(dir.path(), 4, options).unwrap();
    publish_numbered(&bus, 0..200).await;
    let mut consumer = bus.consumer("g").await.unwrap();
    let records = poll_exactly(&mut *consumer, 200).await;
    let mut last: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for r in &records {
        let n = payload_number(&r.payload).unwrap();
        if let Some(prev) = last.insert(r.key.clone(), n) {
            assert!(
                prev < n,
                "key {:?}: {n} after {prev}",
                String::from_utf8_lossy(&r.key)
            );
        }
    }
}

/// A new group created after others committed starts at the beginning:
/// groups are independent.
#[tokio::test]
async fn groups_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 1).unwrap();
    publish_numbered(&bus, 0..5).await;
    let mut a = bus.consumer("a").await.unwrap();
    poll_exactly(&mut *a, 5).await;
    a.commit(0, 5).await.unwrap();
    let mut b = bus.consumer("b").await.unwrap();
    assert_eq!(
        numbers(&poll_exactly(&mut *b, 5).await),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(bus.groups(), ["a", "b"]);
    assert_eq!(bus.committed("b").unwrap(), Some(vec![0]));
    assert_eq!(bus.committed("nobody").unwrap(), None);
}

/// Members of one group split the partitions; when one leaves, the other
/// takes over its partitions from the committed offsets.
#[tokio::test]
async fn group_members_share_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 4).unwrap();
    publish_numbered(&bus, 0..40).await;
    let mut a = bus.consumer("g").await.unwrap();
    let mut b = bus.consumer("g").await.unwrap();
    let end = bus.end_offsets();
    let share = |ps: &[u32]| ps.iter().map(|&p| end[p as usize] as usize).sum::<usize>();
    let from_a = poll_exactly(&mut *a, share(&[0, 2])).await;
    let from_b = poll_exactly(&mut *b, share(&[1, 3])).await;
    assert!(from_a.iter().all(|r| r.partition % 2 == 0));
    assert!(from_b.iter().all(|r| r.partition % 2 == 1));
    assert_drained(&mut *a).await;

    // b processed partition 1 only; after it leaves, a re-reads partition 3
    // whole and partition 1 from b's commit.
    b.commit(1, end[1]).await.unwrap();
    drop(b);
    let taken_over = poll_exactly(&mut *a, share(&[3])).await;
    assert!(taken_over.iter().all(|r| r.partition == 3));
    assert_drained(&mut *a).await;
}

/// A worker commits all of a poll's partitions at once: stored together,
/// or, where one offset is bad, none of them.
#[tokio::test]
async fn commits_of_several_partitions_are_stored_together() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 3).unwrap();
    publish_numbered(&bus, 0..30).await;
    let end = bus.end_offsets();
    let mut c = bus.consumer("g").await.unwrap();
    poll_exactly(&mut *c, 30).await;

    c.commit_all(&[(0, end[0]), (2, 1)]).await.unwrap();
    assert_eq!(bus.committed("g").unwrap(), Some(vec![end[0], 0, 1]));

    let err = c
        .commit_all(&[(1, end[1]), (2, end[2] + 1)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("partition 2"), "{err}");
    assert_eq!(
        bus.committed("g").unwrap(),
        Some(vec![end[0], 0, 1]),
        "a refused commit stored part of itself"
    );
    drop(c);
    drop(bus);
    let bus = EmbeddedBus::open(dir.path(), 3).unwrap();
    assert_eq!(bus.committed("g").unwrap(), Some(vec![end[0], 0, 1]));
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 2).unwrap();

    let err = bus.consumer("no/slashes").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid consumer group name "no/slashes": use 1 to 64 of the characters A-Z a-z 0-9 . _ -"#
    );

    let mut c = bus.consumer("g").await.unwrap();
    let err = c.commit(2, 0).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "partition 2 does not exist; the bus has 2 partitions"
    );
    let err = c.commit(0, 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot commit offset 1 on partition 0: the partition ends at offset 0"
    );

    let err = EmbeddedBus::open(dir.path(), 2).unwrap_err();
    assert!(matches!(err, BusError::Locked { .. }), "{err}");
    drop(c);
    drop(bus);
    let err = EmbeddedBus::open(dir.path(), 3).unwrap_err();
    assert!(err.to_string().contains("has 2 partitions, not 3"), "{err}");
    assert!(matches!(
        EmbeddedBus::open(dir.path(), 0),
        Err(BusError::NoPartitions)
    ));
    let zero = EmbeddedBusOptions::default().segment_bytes(0);
    assert!(matches!(
        EmbeddedBus::open_with(dir.path(), 2, zero),
        Err(BusError::InvalidOption(_))
    ));
}

/// A record that cannot be published is handed back, not dropped.
#[tokio::test]
async fn refused_payload_is_returned() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedBusOptions::default().max_record_bytes(100);
    let bus = EmbeddedBus::open_with(dir.path(), 1, options).unwrap();
    let err = bus.publish(b"key", vec![5; 98]).await.unwrap_err();
    assert!(matches!(
        err.source,
        BusError::RecordTooLarge {
            size: 101,
            limit: 100
        }
    ));
    assert_eq!(err.into_payload(), vec![5; 98]);
    assert_eq!(bus.end_offsets(), [0]);
}

/// Segments roll at the configured size, and retention deletes exactly
/// the segments every group has consumed, never the one being written.
#[tokio::test]
async fn retention_deletes_only_what_every_group_consumed() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedBusOptions::default().segment_bytes(1000);
    let bus = EmbeddedBus::open_with(dir.path(), 1, options).unwrap();
    publish_numbered(&bus, 0..100).await;
    let segments = || {
        std::fs::read_dir(dir.path().join("partitions/0"))
            .unwrap()
            .count()
    };
    let before = segments();
    assert!(before > 10, "{before} segments");

    // No group yet: records are kept for the first one.
    assert_eq!(bus.truncate_consumed().await.unwrap(), 0);

    let mut fast = bus.consumer("fast").await.unwrap();
    let mut slow = bus.consumer("slow").await.unwrap();
    poll_exactly(&mut *fast, 100).await;
    fast.commit(0, 100).await.unwrap();
    slow.commit(0, 10).await.unwrap();
    let removed = bus.truncate_consumed().await.unwrap();
    let start = bus.start_offsets()[0];
    assert!(
        removed >= 1 && start <= 10,
        "removed {removed}, start {start}"
    );

    // The slow group still gets everything from its commit on.
    drop(slow);
    let mut slow = bus.consumer("slow").await.unwrap();
    let rest = poll_exactly(&mut *slow, 90).await;
    assert_eq!(numbers(&rest), (10..100).collect::<Vec<_>>());
    drop(slow);

    // Without the slow group, everything but the active segment goes.
    assert!(matches!(
        bus.delete_group("fast").await,
        Err(BusError::GroupInUse { .. })
    ));
    assert!(bus.delete_group("slow").await.unwrap());
    bus.truncate_consumed().await.unwrap();
    assert_eq!(segments(), 1);
    assert_eq!(bus.end_offsets(), [100]);

    // A group created now starts at the oldest record kept.
    let mut late = bus.consumer("late").await.unwrap();
    let start = bus.start_offsets()[0];
    let kept = poll_exactly(&mut *late, (100 - start) as usize).await;
    assert_eq!(kept[0].offset, start);
}

/// Guards the wakeup path: a consumer blocked in poll gets a record
/// published later long before its timeout.
async fn poll_wakes_on_publish(bus: EmbeddedBus) {
    let mut consumer = bus.consumer("g").await.unwrap();
    let publisher = bus.clone();
    let publish = async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        publisher.publish(b"k", b"late".to_vec()).await.unwrap();
    };
    let started = std::time::Instant::now();
    let (records, ()) = tokio::join!(
        consumer.poll(10, usize::MAX, Duration::from_secs(10)),
        publish
    );
    let records = records.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload, b"late");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn poll_wakes_on_current_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    poll_wakes_on_publish(EmbeddedBus::open(dir.path(), 2).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_wakes_on_multi_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    poll_wakes_on_publish(EmbeddedBus::open(dir.path(), 2).unwrap()).await;
}

/// The actors crate drives the bus from actix's single-threaded runtime.
#[actix_rt::test]
async fn poll_wakes_on_actix_runtime() {
    let dir = tempfile::tempdir().unwrap();
    poll_wakes_on_publish(EmbeddedBus::open(dir.path(), 2).unwrap()).await;
}

/// A poll with nothing to read returns empty at its timeout, and a zero
/// timeout or `max` does not wait.
#[tokio::test]
async fn poll_times_out_empty() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 1).unwrap();
    let mut c = bus.consumer("g").await.unwrap();
    assert!(
        c.poll(10, usize::MAX, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        c.poll(10, usize::MAX, Duration::from_millis(20))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        c.poll(0, usize::MAX, Duration::from_secs(10))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Guards the poll byte budget: a poll stops before the record that would
/// exceed it (so a few huge records cannot make a worker hold hundreds),
/// always takes at least one, and loses none of those it left.
#[tokio::test]
async fn polls_keep_to_their_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 1).unwrap();
    for i in 0..5u8 {
        bus.publish(b"k", vec![i; 1000]).await.unwrap();
    }
    let mut c = bus.consumer("g").await.unwrap();
    let wait = Duration::from_secs(10);
    let first = c.poll(100, 2500, wait).await.unwrap();
    assert_eq!(
        first.len(),
        2,
        "2 × 1000 bytes fit in 2500, a third does not"
    );
    let second = c.poll(100, 10, wait).await.unwrap();
    assert_eq!(
        second.len(),
        1,
        "a record larger than the budget is taken alone"
    );
    let rest = c.poll(100, usize::MAX, wait).await.unwrap();
    let offsets: Vec<u64> = first
        .iter()
        .chain(&second)
        .chain(&rest)
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4]);
}

/// Guards cancel safety: polls cut short by a timeout lose no records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_polls_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 2).unwrap();
    publish_numbered(&bus, 0..200).await;
    let mut c = bus.consumer("g").await.unwrap();
    let mut got = Vec::new();
    for i in 0..2000 {
        let budget = Duration::from_micros(i % 200);
        if let Ok(batch) =
            tokio::time::timeout(budget, c.poll(3, usize::MAX, Duration::from_secs(1))).await
        {
            got.extend(batch.unwrap());
        }
        if got.len() == 200 {
            break;
        }
    }
    got.extend(poll_exactly(&mut *c, 200 - got.len()).await);
    assert_eq!(numbers(&got), (0..200).collect::<Vec<_>>());
    assert_drained(&mut *c).await;
}

/// Many concurrent publishers (sharing fsyncs) get distinct, gapless
/// offsets, and every acknowledged record reads back intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_publishers_get_distinct_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedBusOptions::default().segment_bytes(20_000);
    let bus: Arc<dyn Bus> = Arc::new(EmbeddedBus::open_with(dir.path(), 2, options).unwrap());
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let bus = bus.clone();
            tokio::spawn(async move {
                let mut acks = Vec::new();
                for i in 0..25 {
                    let n = t * 1000 + i;
                    let at = bus.publish(&t.to_le_bytes(), payload(n)).await.unwrap();
                    acks.push((at, n));
                }
                acks
            })
        })
        .collect();
    let mut acked = BTreeMap::new();
    for task in tasks {
        for (at, n) in task.await.unwrap() {
            assert!(
                acked.insert((at.partition, at.offset), n).is_none(),
                "offset given twice: {at:?}"
            );
        }
    }
    let mut c = bus.consumer("g").await.unwrap();
    let records = poll_exactly(&mut *c, 400).await;
    for r in &records {
        assert_eq!(
            acked.get(&(r.partition, r.offset)),
            payload_number(&r.payload).as_ref()
        );
    }
    for p in 0..2 {
        let offsets: Vec<u64> = acked.keys().filter(|k| k.0 == p).map(|k| k.1).collect();
        assert_eq!(
            offsets,
            (0..offsets.len() as u64).collect::<Vec<_>>(),
            "partition {p}"
        );
    }
}

/// Guards the lag the workers export: each member reports the partitions
/// it is assigned, end against the group's commits, so the members' sums
/// add up to the group's lag; a dropped member reports nothing.
#[tokio::test]
async fn lag_readers_report_their_members_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let bus = EmbeddedBus::open(dir.path(), 4).unwrap();
    publish_numbered(&bus, 0..40).await;
    let ends = bus.end_offsets();

    let mut a = bus.consumer("g").await.unwrap();
    let lag_a = a.lag_reader();
    assert_eq!(lag_a.topic(), "embedded");
    let lags = lag_a.lag().await.unwrap();
    assert_eq!(
        lags.iter().map(|l| l.partition).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    for l in &lags {
        assert_eq!((l.committed, l.end), (0, ends[l.partition as usize]));
        assert_eq!(l.records(), ends[l.partition as usize]);
    }

    // A second member takes half the partitions; between them they still
    // report each partition once.
    let b = bus.consumer("g").await.unwrap();
    let lag_b = b.lag_reader();
    let mut both: Vec<u32> = lag_a
        .lag()
        .await
        .unwrap()
        .iter()
        .map(|l| l.partition)
        .collect();
    both.extend(lag_b.lag().await.unwrap().iter().map(|l| l.partition));
    both.sort_unstable();
    assert_eq!(both, [0, 1, 2, 3]);

    // A commit lowers the lag of its partition only.
    let mine = lag_a.lag().await.unwrap()[0];
    a.commit(mine.partition, mine.end).await.unwrap();
    let after = lag_a.lag().await.unwrap();
    assert_eq!(after[0].records(), 0);
    assert_eq!(after[0].committed, mine.end);
    let total: u64 = after.iter().map(|l| l.records()).sum::<u64>()
        + lag_b
            .lag()
            .await
            .unwrap()
            .iter()
            .map(|l| l.records())
            .sum::<u64>();
    assert_eq!(total, 40 - mine.end);

    drop(b);
    assert!(lag_b.lag().await.unwrap().is_empty());
    drop(a);
    drop(bus);
    // The readers do not hold the directory: it opens again.
    let _again = EmbeddedBus::open(dir.path(), 4).unwrap();
    assert!(lag_a.lag().await.unwrap().is_empty());
}
