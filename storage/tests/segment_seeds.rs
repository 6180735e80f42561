//! The `segment_decode` fuzz target's seeds must be segments this build
//! decodes: a seed written before a change to the format only exercises
//! the refusal path. `KILN_WRITE_FIXTURES=1 cargo test -p kiln-storage
//! --test segment_seeds` writes them again.

use std::path::PathBuf;

use kiln_model::{LabelSetId, NANOS_PER_HOUR, StackId};
use kiln_storage::StoredSample;
use kiln_storage::segment;

/// An hour of two hosts' batches (many stacks at a few timestamps), an
/// hour before the epoch, and an empty one.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let hour = 500_000;
    let batches: Vec<StoredSample> = (0..400)
        .map(|i| StoredSample {
            timestamp_ns: hour * NANOS_PER_HOUR + (i % 12) * 5_000_000_000,
            stack: StackId(0x9e37_79b9_7f4a_7c15 * (i as u128 % 37)),
            labels: LabelSetId(i as u128 % 2),
            count: 1 + i as u64 % 5,
            period_ns: 52_631_578,
        })
        .collect();
    let before_epoch = [StoredSample {
        timestamp_ns: -NANOS_PER_HOUR + 1,
        stack: StackId(u128::MAX),
        labels: LabelSetId(0),
        count: u64::MAX,
        period_ns: 1,
    }];
    vec![
        ("hour.kseg", segment::encode(hour, &batches).0),
        ("before_epoch.kseg", segment::encode(-1, &before_epoch).0),
        ("empty.kseg", segment::encode(0, &[]).0),
    ]
}

#[test]
fn seeds_are_segments_this_build_decodes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/segment_decode");
    for (name, bytes) in seeds() {
        let path = dir.join(name);
        if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let stored = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (KILN_WRITE_FIXTURES=1 writes it)", path.display())
        });
        assert_eq!(
            stored, bytes,
            "{name} is stale: KILN_WRITE_FIXTURES=1 writes it again"
        );
        segment::decode(&stored).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
