//! Batches of format version 1 (before metric points) are still read:
//! agents older than version 2, and the batches they spooled while the
//! backend was away, keep being accepted.
//!
//! `fixtures/batch-v1.bin` was written by the version-1 code (the commit
//! before metric points) from exactly the batch [`v1_batch`] builds; never
//! regenerate it with newer code, which writes version 2.

use kiln_model::{
    BATCH_VERSION, Batch, BatchBuilder, Executable, FileId, Frame, FrameKind, LabelSet,
    batch_version,
};

const FIXTURE: &[u8] = include_bytes!("fixtures/batch-v1.bin");

/// The batch the fixture holds.
fn v1_batch() -> Batch {
    let mut b = BatchBuilder::new("host-v1", 1_700_000_000_000_000_000, 52_631_578);
    let labels = LabelSet::new()
        .with("host", "host-v1")
        .with("pid", "42")
        .with("process", "app");
    let main = Frame::named(FrameKind::Native, "main");
    let work = Frame::Address {
        kind: FrameKind::Native,
        file_id: FileId(0x1234_5678_9abc_def0_0fed_cba9_8765_4321),
        addr: 0x1040,
    };
    b.add(1_700_000_000_000_000_000, &[main.clone(), work], &labels, 7);
    b.add(1_700_000_001_000_000_000, &[main], &labels, 3);
    b.add_executable(Executable {
        file_id: FileId(0x1234_5678_9abc_def0_0fed_cba9_8765_4321),
        name: "app".into(),
        build_id: Some("123456789abcdef00fedcba987654321".into()),
    });
    b.finish()
}

#[test]
fn version_1_batches_decode_into_the_current_struct() {
    assert_eq!(batch_version(FIXTURE).unwrap(), 1);
    let batch = Batch::decode(FIXTURE).unwrap();
    assert!(batch.metrics.is_empty());
    assert_eq!(batch.sample_count(), 10);
    assert_eq!(batch, v1_batch());
}

/// Re-encoding writes the current version, which reads back the same.
#[test]
fn a_version_1_batch_re_encodes_as_the_current_version() {
    let batch = Batch::decode(FIXTURE).unwrap();
    let bytes = batch.encode();
    assert_eq!(batch_version(&bytes).unwrap(), BATCH_VERSION);
    assert_eq!(Batch::decode(&bytes).unwrap(), batch);
}

/// A damaged version-1 payload is an error, never a panic.
#[test]
fn damaged_version_1_payloads_are_errors() {
    for cut in [9, FIXTURE.len() / 2, FIXTURE.len() - 1] {
        assert!(Batch::decode(&FIXTURE[..cut]).is_err(), "cut at {cut}");
    }
}
