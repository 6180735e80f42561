//! Property: whatever sequence of publishes, reopens and polls, each
//! partition reads back exactly what was published to it, in order.

mod common;

use std::collections::BTreeMap;

use common::poll_exactly;
use kiln_ingest_bus::{Bus, EmbeddedBus, EmbeddedBusOptions, partition_for};
use proptest::prelude::*;

/// Per partition, the (key, payload) of each record in offset order.
type Log = BTreeMap<u32, Vec<(Vec<u8>, Vec<u8>)>>;

#[derive(Debug, Clone)]
enum Step {
    Publish {
        key: Vec<u8>,
        payload: Vec<u8>,
    },
    /// Close and reopen the bus.
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (prop::collection::vec(any::<u8>(), 0..6), prop::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(key, payload)| Step::Publish { key, payload }),
        1 => Just(Step::Reopen),
    ]
}

proptest! {
    // Every publish is an fsync: keep the case count modest.
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn partitions_read_back_exactly(
        partitions in 1u32..5,
        segment_bytes in prop_oneof![Just(64u64), 100u64..2000, Just(64 << 20)],
        steps in prop::collection::vec(step(), 0..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = EmbeddedBusOptions::default().segment_bytes(segment_bytes);
        let open = || EmbeddedBus::open_with(dir.path(), partitions, options.clone()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut model: Log = BTreeMap::new();
        let read_back = runtime.block_on(async {
            let mut bus = open();
            for step in steps {
                match step {
                    Step::Publish { key, payload } => {
                        let at = bus.publish(&key, payload.clone()).await.unwrap();
                        let expected = model.entry(partition_for(&key, partitions)).or_default();
                        assert_eq!((at.partition, at.offset), (partition_for(&key, partitions), expected.len() as u64));
                        expected.push((key, payload));
                    }
                    Step::Reopen => {
                        drop(bus);
                        bus = open();
                    }
                }
            }
            let total = model.values().map(Vec::len).sum();
            let mut consumer = bus.consumer("check").await.unwrap();
            poll_exactly(&mut *consumer, total).await
        });
        let mut got: Log = BTreeMap::new();
        for r in read_back {
            let records = got.entry(r.partition).or_default();
            prop_assert_eq!(r.offset, records.len() as u64);
            records.push((r.key, r.payload));
        }
        prop_assert_eq!(got, model);
    }
}
