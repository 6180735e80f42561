//! Fuzz seeds that must stay inputs this build accepts, or the fuzzers
//! only exercise refusal paths: the `envelope_parse` target's must be
//! envelopes it verifies (signed with the target's key), the
//! `batch_decode` target's batches it decodes (random bytes almost never
//! reach past the header).
//! `KILN_WRITE_FIXTURES=1 cargo test -p kiln-model --test fuzz_seeds`
//! writes them again.

use std::path::PathBuf;

use kiln_model::{Batch, BatchBuilder, Envelope, Frame, FrameKind, LabelSet};

/// `FUZZ_KEY` of `fuzz/fuzz_targets/envelope_parse.rs`.
const FUZZ_KEY: &[u8] = b"kiln-fuzz-bus-key-0123456789";

fn seeds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/envelope_parse")
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut b = BatchBuilder::new("host-a", 1, 10_000_000);
    let stack = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, "work"),
    ];
    b.add(
        1_800_000_000_000_000_000,
        &stack,
        &LabelSet::new().with("process", "app"),
        3,
    );
    let batch = b.finish().encode();
    vec![
        (
            "signed_batch",
            Envelope::new("acme", "web", 7, &batch)
                .unwrap()
                .encode(FUZZ_KEY),
        ),
        (
            "signed_empty",
            Envelope::new("a", "b", -1, &[]).unwrap().encode(FUZZ_KEY),
        ),
    ]
}

#[test]
fn every_envelope_parse_seed_verifies() {
    let dir = seeds_dir();
    if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    for (name, expected) in seeds() {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(
            bytes, expected,
            "{name} is stale: rerun with KILN_WRITE_FIXTURES=1"
        );
        Envelope::parse(&bytes, FUZZ_KEY).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

fn batch_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let labels = LabelSet::new().with("process", "app").with("host", "h");
    let mut small = BatchBuilder::new("host-a", 1_800_000_000_000_000_000, 52_631_578);
    let stack = [
        Frame::named(FrameKind::Native, "main"),
        Frame::named(FrameKind::Native, "work"),
    ];
    small.add(1_800_000_000_000_000_000, &stack, &labels, 3);
    small.add(1_800_000_001_000_000_000, &stack[..1], &labels, 1);
    let mut metrics = BatchBuilder::new("gpu-box", 1_800_000_000_000_000_000, 1);
    metrics
        .metric(
            "gpu.utilization_percent",
            &labels,
            1_800_000_000_000_000_000,
            87.5,
        )
        .unwrap();
    metrics.add(
        1_800_000_000_000_000_000,
        &[Frame::named(FrameKind::GpuKernel, "_Z4gemmPfi")],
        &labels,
        1_500_000,
    );
    let v1 = include_bytes!("fixtures/batch-v1.bin").to_vec();
    vec![
        ("small", small.finish().encode()),
        ("metrics", metrics.finish().encode()),
        ("v1", v1),
    ]
}

#[test]
fn every_batch_decode_seed_decodes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/batch_decode");
    if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in batch_seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    for (name, _) in batch_seeds() {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; write it with KILN_WRITE_FIXTURES=1",
                path.display()
            )
        });
        Batch::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
