//! The Kafka bus against a real broker: run when `KILN_TEST_KAFKA` names
//! one (`kafka://127.0.0.1:PORT`, as `scripts/kafka-test-server.sh start`
//! (tansu) and `scripts/apache-kafka-test-server.sh start` (Apache Kafka)
//! print), skipped with a message otherwise. Each test uses a topic of its
//! own, which the bus creates. `scripts/test.sh` runs them against both.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{payload, payload_number};
use kiln_ingest_bus::{
    Bus, BusError, BusUrl, Consumer, KafkaBus, KafkaOptions, Record, partition_for,
};

/// The broker URL, or `None` (after saying why) when the tests skip.
fn broker() -> Option<String> {
    match std::env::var("KILN_TEST_KAFKA") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipped: KILN_TEST_KAFKA is not set (export KILN_TEST_KAFKA=\"$(scripts/kafka-test-server.sh start /tmp/kiln-kafka)\")"
            );
            None
        }
    }
}

/// A bus on a fresh topic of `partitions` partitions, named after the test.
/// Tests name their consumer groups after the topic too ([`group`]): tests
/// run in parallel on one broker, and members of one group on different
/// topics would rebalance each other.
async fn fresh_bus(url: &str, test: &str, partitions: u32) -> KafkaBus {
    let url = format!("{url}/{}?partitions={partitions}", fresh_topic(test));
    let BusUrl::Kafka(options) = url.parse().unwrap() else {
        panic!("{url} is not a Kafka URL")
    };
    KafkaBus::connect(options.session_timeout(Duration::from_secs(6)))
        .await
        .unwrap()
}

/// A topic name no other test (or run) uses.
fn fresh_topic(test: &str) -> String {
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t-{test}-{}-{unique}", std::process::id())
}

/// A consumer group of this test's own.
fn group(bus: &KafkaBus, name: &str) -> String {
    format!("{}-{name}", bus.options().topic)
}

fn key(i: u64) -> Vec<u8> {
    format!("tenant\0host-{}", i % 13).into_bytes()
}

async fn publish_numbered(bus: &dyn Bus, range: std::ops::Range<u64>) {
    for i in range {
        let at = bus.publish(&key(i), payload(i)).await.unwrap();
        assert_eq!(at.partition, partition_for(&key(i), bus.partition_count()));
    }
}

/// Polls until `n` records arrived (a new group member may wait a few
/// seconds for its partitions); fails after 60 s without a record.
async fn poll_n(consumer: &mut dyn Consumer, n: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let mut idle = Duration::ZERO;
    while out.len() < n {
        let batch = consumer
            .poll(n - out.len(), usize::MAX, Duration::from_secs(1))
            .await
            .unwrap();
        if batch.is_empty() {
            idle += Duration::from_secs(1);
            assert!(
                idle < Duration::from_secs(60),
                "stuck after {} of {n} records",
                out.len()
            );
        }
        out.extend(batch);
    }
    out
}

fn numbers(records: &[Record]) -> Vec<u64> {
    records
        .iter()
        .map(|r| payload_number(&r.payload).expect("intact payload"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_come_back_whole_in_key_order_on_their_partition() {
    let Some(url) = broker() else { return };
    let bus = fresh_bus(&url, "order", 4).await;
    assert_eq!(bus.partition_count(), 4);
    publish_numbered(&bus, 0..200).await;

    let mut consumer = bus.consumer(&group(&bus, "g")).await.unwrap();
    let records = poll_n(&mut *consumer, 200).await;
    let mut by_key: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    for (record, n) in records.iter().zip(numbers(&records)) {
        assert_eq!(record.key, key(n));
        assert_eq!(record.partition, partition_for(&record.key, 4));
        by_key.entry(record.key.clone()).or_default().push(n);
    }
    for (k, ns) in &by_key {
        assert!(
            ns.is_sorted(),
            "{:?} out of order: {ns:?}",
            String::from_utf8_lossy(k)
        );
    }
    let all: BTreeSet<u64> = numbers(&records).into_iter().collect();
    assert_eq!(all, (0..200).collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_member_resumes_after_the_commits() {
    let Some(url) = broker() else { return };
    let bus = fresh_bus(&url, "resume", 2).await;
    publish_numbered(&bus, 0..60).await;

    let mut first = bus.consumer(&group(&bus, "g")).await.unwrap();
    let records = poll_n(&mut *first, 60).await;
    // Commit only the first half of each partition.
    let mut ends: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for r in &records {
        ends.entry(r.partition).or_default().push(r.offset);
    }
    let mut expected_again = BTreeSet::new();
    let mut halves = Vec::new();
    for (&partition, offsets) in &ends {
        let half = offsets[offsets.len() / 2];
        halves.push((partition, half));
        for r in records
            .iter()
            .filter(|r| r.partition == partition && r.offset >= half)
        {
            expected_again.insert(payload_number(&r.payload).unwrap());
        }
    }
    // Both partitions in one request, as a worker commits a poll.
    first.commit_all(&halves).await.unwrap();
    let committed = bus.committed_offsets(&group(&bus, "g")).await.unwrap();
    for (&partition, offsets) in &ends {
        assert_eq!(committed[partition as usize], offsets[offsets.len() / 2]);
    }
    drop(first);

    let mut second = bus.consumer(&group(&bus, "g")).await.unwrap();
    let again = poll_n(&mut *second, expected_again.len()).await;
    assert_eq!(
        numbers(&again).into_iter().collect::<BTreeSet<_>>(),
        expected_again
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_a_group_share_the_partitions() {
    let Some(url) = broker() else { return };
    let bus = fresh_bus(&url, "share", 4).await;
    let mut a = bus.consumer(&group(&bus, "g")).await.unwrap();
    let mut b = bus.consumer(&group(&bus, "g")).await.unwrap();

    // Both members poll (and so take part in the group) while records keep
    // coming, 20 per round, until each member has received some and every
    // record was seen: the group may hand all partitions to whichever
    // member joins first and rebalance only later. Redeliveries during a
    // rebalance are allowed, losses are not.
    let mut seen: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    let mut all = BTreeSet::new();
    let mut published = 0;
    for _round in 0..300 {
        if seen.len() < 2 || seen.values().any(BTreeSet::is_empty) {
            publish_numbered(&bus, published..published + 20).await;
            published += 20;
        } else if all.len() as u64 == published {
            break;
        }
        for (name, member) in [("a", &mut a), ("b", &mut b)] {
            let records = member
                .poll(100, usize::MAX, Duration::from_millis(200))
                .await
                .unwrap();
            seen.entry(name)
                .or_default()
                .extend(records.iter().map(|r| r.partition));
            all.extend(numbers(&records));
        }
    }
    assert_eq!(all, (0..published).collect(), "records were lost");
    assert!(
        seen.values().all(|p| !p.is_empty()),
        "one member got every partition: {seen:?}"
    );
}

/// Guards the lag the workers export on Kafka: the high watermark of each
/// assigned partition against the group's commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_readers_report_watermarks_against_commits() {
    let Some(url) = broker() else { return };
    let bus = fresh_bus(&url, "lag", 2).await;
    publish_numbered(&bus, 0..30).await;
    let mut consumer = bus.consumer(&group(&bus, "g")).await.unwrap();
    let lag = consumer.lag_reader();
    assert_eq!(lag.topic(), bus.options().topic);
    // Partitions are assigned once the member has polled.
    let records = poll_n(&mut *consumer, 30).await;
    let mut ends: BTreeMap<u32, u64> = BTreeMap::new();
    for r in &records {
        let end = ends.entry(r.partition).or_default();
        *end = (*end).max(r.offset + 1);
    }
    let lags = lag.lag().await.unwrap();
    assert_eq!(lags.len(), 2, "{lags:?}");
    for l in &lags {
        assert_eq!(l.end, ends[&l.partition], "{l:?}");
        assert_eq!(l.records(), l.end, "nothing committed yet: {l:?}");
    }
    let first = lags[0];
    consumer.commit(first.partition, first.end).await.unwrap();
    let after = lag.lag().await.unwrap();
    let of = |p: u32| after.iter().find(|l| l.partition == p).unwrap().records();
    assert_eq!(of(first.partition), 0);
    assert_eq!(of(lags[1].partition), lags[1].end);
    drop(consumer);
    assert!(lag.lag().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_read_independently() {
    let Some(url) = broker() else { return };
    let bus = fresh_bus(&url, "groups", 2).await;
    publish_numbered(&bus, 0..20).await;
    for name in ["g1", "g2"] {
        let mut consumer = bus.consumer(&group(&bus, name)).await.unwrap();
        let records = poll_n(&mut *consumer, 20).await;
        assert_eq!(
            numbers(&records).into_iter().collect::<BTreeSet<_>>(),
            (0..20).collect()
        );
    }
    assert_eq!(
        bus.committed_offsets(&group(&bus, "none")).await.unwrap(),
        vec![0, 0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_records_are_refused_and_handed_back() {
    let Some(url) = broker() else { return };
    let bus = fresh_bus(&url, "oversized", 1).await;
    let limit = bus.options().max_record_bytes;
    let err = bus.publish(b"k", vec![0; limit]).await.unwrap_err();
    assert!(
        matches!(err.source, BusError::RecordTooLarge { .. }),
        "{err:?}"
    );
    assert_eq!(err.into_payload().len(), limit);
}

/// Runs without a broker: nothing listens on the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_is_named_in_the_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let options = KafkaOptions::new(format!("127.0.0.1:{port}"));
    let err = KafkaBus::connect(options).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, BusError::Kafka { .. }), "{err:?}");
    assert!(text.contains("metadata"), "{text}");
}

/// A record the broker refuses is not lost quietly: the publish fails,
/// with the payload handed back (the gateway answers 503, the agent keeps
/// the batch). The bus takes records up to `max_record_bytes` (64 MiB),
/// but a broker takes only what its `message.max.bytes` or the topic's
/// `max.message.bytes` allow (Apache Kafka's default: 1 MiB): here a topic
/// taking 4 KiB gets a 64 KiB record (zstd cannot shrink it: the payload is
/// random), and the broker's refusal must reach the caller. A record within
/// the limit still goes through.
///
/// Runs on brokers that report the topic's `max.message.bytes` back as
/// the topic's own config (Apache Kafka:
/// `scripts/apache-kafka-test-server.sh`); skips with a message on brokers
/// that only echo it (tansu, which does not enforce it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_broker_refuses_fails_the_publish() {
    use rdkafka::ClientConfig;
    use rdkafka::admin::{
        AdminClient, AdminOptions, ConfigSource, NewTopic, ResourceSpecifier, TopicReplication,
    };
    use rdkafka::client::DefaultClientContext;

    let Some(url) = broker() else { return };
    let BusUrl::Kafka(base) = url.parse().unwrap() else {
        panic!("{url} is not a Kafka URL")
    };
    let topic = fresh_topic("refused");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &base.brokers)
        .create()
        .unwrap();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let created = admin
        .create_topics(
            [&NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
                .set("max.message.bytes", "4096")],
            &options,
        )
        .await
        .unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    // The broker may not know a topic for a moment after its creation.
    let mut limit = None;
    for _ in 0..20 {
        let described = admin
            .describe_configs([&ResourceSpecifier::Topic(&topic)], &options)
            .await;
        limit = described.ok().and_then(|results| {
            let config = results.into_iter().next()?.ok()?;
            let entry = config.get("max.message.bytes")?;
            Some((
                entry.value.clone(),
                entry.source == ConfigSource::DynamicTopic,
            ))
        });
        if limit.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Apache Kafka reports the setting as the topic's own (a dynamic topic
    // config). tansu echoes it back as a default, and does not enforce it.
    if limit != Some((Some("4096".to_owned()), true)) {
        eprintln!(
            "skipped: the broker at {url} does not report max.message.bytes=4096 as the \
             topic's own config ({limit:?}), so it does not enforce it (tansu); run against \
             Apache Kafka (scripts/apache-kafka-test-server.sh)"
        );
        return;
    }

    // The bus on that topic: it exists, so the bus keeps its one partition.
    let BusUrl::Kafka(options) = format!("{url}/{topic}").parse().unwrap() else {
        unreachable!()
    };
    let bus = KafkaBus::connect(options.publish_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(bus.partition_count(), 1);
    // xorshift: bytes zstd cannot compress below the limit.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let big: Vec<u8> = (0..64 << 10)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let err = bus.publish(b"k", big.clone()).await.unwrap_err();
    assert!(matches!(err.source, BusError::Kafka { .. }), "{err:?}");
    let text = err.source.to_string();
    assert!(text.contains("too large"), "{text}");
    assert_eq!(err.into_payload(), big, "the payload comes back");

    let at = bus.publish(&key(1), payload(1)).await.unwrap();
    assert_eq!(at.offset, 0, "the refused record took no offset");
    let mut consumer = bus.consumer(&group(&bus, "g")).await.unwrap();
    assert_eq!(numbers(&poll_n(&mut *consumer, 1).await), vec![1]);
}

/// The Python side of the interop check: consumes `count` records of a
/// topic and prints them, then produces the given (partition, key,
/// payload) records; hex everywhere.
const KAFKA_PYTHON: &str = r#"
import json, sys
from kafka import KafkaConsumer, KafkaProducer
brokers, topic, group, count, produce = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
consumer = KafkaConsumer(topic, bootstrap_servers=brokers, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         consumer_timeout_ms=60000)
seen = []
for m in consumer:
    seen.append({"partition": m.partition, "offset": m.offset, "key": m.key.hex(), "payload": m.value.hex()})
    if len(seen) == count:
        break
consumer.close()
producer = KafkaProducer(bootstrap_servers=brokers, acks="all")
for p, k, v in produce:
    producer.send(topic, key=bytes.fromhex(k), value=bytes.fromhex(v), partition=p).get(timeout=30)
producer.flush()
print(json.dumps(seen))
"#;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An independent client, kafka-python, reads what our producer wrote
/// (zstd batches included) and writes what our consumer reads. Runs when
/// `python3` can import `kafka` and `zstandard` (the kafka tier of
/// scripts/test.sh installs them), skips with a message otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_reads_our_records_and_we_read_its() {
    let Some(url) = broker() else { return };
    let has_client = std::process::Command::new("python3")
        .args(["-c", "import kafka, zstandard"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_client {
        eprintln!(
            "skipped: python3 cannot import kafka-python and zstandard (pip install kafka-python zstandard)"
        );
        return;
    }
    let bus = fresh_bus(&url, "interop", 3).await;
    let mut ours = Vec::new();
    for i in 0..30 {
        let at = bus.publish(&key(i), payload(i)).await.unwrap();
        ours.push((at.partition, at.offset, hex(&key(i)), hex(&payload(i))));
    }
    let theirs: Vec<(u32, String, String)> = (100..110)
        .map(|i| (partition_for(&key(i), 3), hex(&key(i)), hex(&payload(i))))
        .collect();
    let produce = format!(
        "[{}]",
        theirs
            .iter()
            .map(|(p, k, v)| format!("[{p},\"{k}\",\"{v}\"]"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let out = tokio::process::Command::new("python3")
        .args([
            "-c",
            KAFKA_PYTHON,
            &bus.options().brokers,
            &bus.options().topic,
        ])
        .arg(group(&bus, "python"))
        .arg(ours.len().to_string())
        .arg(&produce)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = String::from_utf8(out.stdout).unwrap();
    let seen: Vec<serde_json::Value> = serde_json::from_str(&seen).unwrap();
    let mut read: Vec<(u32, u64, String, String)> = seen
        .iter()
        .map(|r| {
            (
                r["partition"].as_u64().unwrap() as u32,
                r["offset"].as_u64().unwrap(),
                r["key"].as_str().unwrap().to_owned(),
                r["payload"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    read.sort();
    ours.sort();
    assert_eq!(
        read, ours,
        "kafka-python read other records than we published"
    );

    let mut consumer = bus.consumer(&group(&bus, "rust")).await.unwrap();
    let records = poll_n(&mut *consumer, ours.len() + theirs.len()).await;
    let mut from_python: Vec<(u32, String, String)> = records
        .iter()
        .filter(|r| payload_number(&r.payload).is_some_and(|n| n >= 100))
        .map(|r| (r.partition, hex(&r.key), hex(&r.payload)))
        .collect();
    from_python.sort();
    let mut theirs = theirs;
    theirs.sort();
    assert_eq!(
        from_python, theirs,
        "we read other records than kafka-python produced"
    );
}
