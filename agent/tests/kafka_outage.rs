//! The agent's Kafka sink through a broker outage, against a real broker:
//! a tansu of this test's own (scripts/kafka-test-server.sh), since the
//! test stops and restarts it. Runs when `KILN_TEST_KAFKA` is set (tansu
//! is installed: scripts/test.sh starts the shared broker), skipped with a
//! message otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kiln_agent::{Delivery, KafkaSink, Sink, Spool};
use kiln_ingest_bus::{Bus, BusUrl, KafkaBus, KafkaOptions};
use kiln_model::{Batch, Envelope};

/// Sends while the broker is known to be down.
const DOWN_SENDS: u64 = 10;
/// The most sends (one every [`RESEND_EVERY`]) before the sink is back:
/// a bound so that a broken reconnect fails the test rather than hangs it.
const MAX_SENDS_UNTIL_BACK: usize = 600;
const RESEND_EVERY: Duration = Duration::from_millis(200);

/// A tansu broker in a directory of its own, stopped on drop.
struct Broker {
    dir: tempfile::TempDir,
}

impl Broker {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka-test-server.sh")
    }

    fn run(&self, command: &str) -> String {
        let output = Command::new(Self::script())
            .args([command, &self.dir.path().display().to_string()])
            .output()
            .expect("running scripts/kafka-test-server.sh");
        assert!(
            output.status.success(),
            "kafka-test-server.sh {command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// Starts a broker; returns its URL.
    fn start() -> (Broker, String) {
        let broker = Broker {
            dir: tempfile::tempdir().unwrap(),
        };
        let url = broker.run("start");
        (broker, url)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .args(["stop", &self.dir.path().display().to_string()])
            .output();
    }
}

/// A batch numbered `n` (its send time), so that the records on the topic
/// can be matched to the sends.
fn numbered(n: u64) -> Batch {
    Batch {
        source: "outage-host".into(),
        sent_at_ns: n as i64,
        ..Batch::default()
    }
}

/// The numbers of the batches on the topic of `options`, in partition
/// order (every batch of one host has one key, so one partition). Reads
/// until `expected` records came, then once more, so that a duplicate
/// past them would show.
fn numbers_on_topic(options: KafkaOptions, expected: usize) -> Vec<u64> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let bus = KafkaBus::connect(options).await.unwrap();
        let mut consumer = bus.consumer("outage-check").await.unwrap();
        let mut numbers = Vec::new();
        let mut polls = 0;
        while numbers.len() < expected {
            polls += 1;
            assert!(polls < 120, "only {numbers:?} on the topic");
            for record in consumer.poll(1000, Duration::from_secs(1)).await.unwrap() {
                let envelope = Envelope::parse(&record.payload).unwrap();
                assert_eq!((envelope.tenant(), envelope.project()), ("acme", "web"));
                numbers.push(Batch::decode(envelope.batch()).unwrap().sent_at_ns as u64);
            }
        }
        for record in consumer.poll(1000, Duration::from_secs(2)).await.unwrap() {
            let envelope = Envelope::parse(&record.payload).unwrap();
            numbers.push(Batch::decode(envelope.batch()).unwrap().sent_at_ns as u64);
        }
        numbers
    })
}

/// Guards the sink through an outage: once a publish has found the broker
/// gone, batches are spooled without a publish attempt (so without waiting
/// for the publish timeout); a background probe finds the broker back, and
/// then every spooled batch arrives once, in order, before the new ones.
#[test]
fn a_broker_outage_spools_without_waiting_and_loses_nothing() {
    if std::env::var("KILN_TEST_KAFKA").map_or(true, |url| url.is_empty()) {
        eprintln!(
            "skipped: KILN_TEST_KAFKA is not set (tansu is started by scripts/test.sh; this test runs a broker of its own)"
        );
        return;
    }
    let (broker, url) = Broker::start();
    let BusUrl::Kafka(options) = format!("{url}/agent-outage?partitions=2").parse().unwrap() else {
        panic!("{url} is not a Kafka URL")
    };
    let spool_dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(spool_dir.path(), 1 << 26).unwrap();
    let mut sink =
        KafkaSink::kafka(options.clone(), "acme", "web", "outage-host", Some(spool)).unwrap();
    let mut next = 0;
    let mut send = |sink: &mut KafkaSink| {
        next += 1;
        (next, sink.send(&numbered(next)).unwrap())
    };

    // Connected: a batch through.
    let (_, delivery) = send(&mut sink);
    assert_eq!(delivery, Delivery::Delivered);

    broker.run("stop");
    // The first send finds the broker gone: one publish, which waits for
    // the publish timeout, and the batch is spooled.
    let started = Instant::now();
    let (first_down, delivery) = send(&mut sink);
    let discovering = started.elapsed();
    assert_eq!(delivery, Delivery::Spooled);
    let publishes = sink.transport().publish_attempts();
    // Known down: straight to the spool, no publish.
    let started = Instant::now();
    for _ in 0..DOWN_SENDS {
        assert_eq!(send(&mut sink).1, Delivery::Spooled);
    }
    let known_down = started.elapsed() / DOWN_SENDS as u32;
    assert_eq!(sink.transport().publish_attempts(), publishes);
    eprintln!(
        "kafka outage: the send that found the broker gone took {discovering:?} (it waited for \
         a publish, as every send did before the sink skipped a broker known down); sends while \
         known down took {known_down:?} each, {:.0}x less",
        discovering.as_secs_f64() / known_down.as_secs_f64().max(1e-9)
    );

    // Back (with no data: it was in memory), on the same port.
    assert_eq!(broker.run("start"), url);
    let mut back = None;
    for _ in 0..MAX_SENDS_UNTIL_BACK {
        let (n, delivery) = send(&mut sink);
        if delivery == Delivery::Delivered {
            back = Some(n);
            break;
        }
        std::thread::sleep(RESEND_EVERY);
    }
    let last = back.expect("the sink never found the broker back");
    assert!(sink.spool().unwrap().files().unwrap().is_empty());
    assert!(
        sink.transport().connect_attempts() >= 2,
        "a probe reconnected"
    );

    // Every batch since the broker went down, once each, in order.
    let expected: Vec<u64> = (first_down..=last).collect();
    assert_eq!(numbers_on_topic(options, expected.len()), expected);
}
