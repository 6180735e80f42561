//! The `envelope_parse` fuzz target's seeds must be envelopes this build
//! verifies (signed with the target's key): a seed written before a change
//! to the envelope only exercises the refusal path.
//! `KILN_WRITE_FIXTURES=1 cargo test -p kiln-model --test fuzz_seeds`
//! writes them again.

use std::path::PathBuf;

use kiln_model::{BatchBuilder, Envelope, Frame, FrameKind, LabelSet};

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
