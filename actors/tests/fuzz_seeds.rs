//! The `scan_decode` fuzz target's seeds must be scans this build decodes:
//! a seed written before a change to the query wire only exercises the
//! refusal path. The wire's `WireScan` is private, so its layout is mirrored
//! here field for field; decoding the seeds checks the mirror too.
//! `KILN_WRITE_FIXTURES=1 cargo test -p kiln-actors --test fuzz_seeds`
//! writes them again.

use std::path::PathBuf;

/// `query/wire.rs`'s `WireScan`, field for field.
#[derive(rkyv::Archive, rkyv::Serialize)]
struct WireScan {
    tenant: String,
    project: String,
    from_ns: i64,
    to_ns: i64,
    filters: Vec<(String, String)>,
    timeline: Option<(i64, i64)>,
    label_sets: bool,
    stack_buckets: bool,
    /// 0: samples; else the rollup window's hours (1 or 24).
    rollup: u8,
}

fn scan_bytes(scan: &WireScan) -> Vec<u8> {
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(scan).unwrap();
    // "KLNQ" | version 4 | kind 1 (scan) | zstd(rkyv)
    let mut out = b"KLNQ\x04\x01".to_vec();
    zstd::stream::copy_encode(&archive[..], &mut out, 1).unwrap();
    out
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let plain = WireScan {
        tenant: "acme".into(),
        project: "web".into(),
        from_ns: 1_800_000_000_000_000_000,
        to_ns: 1_800_003_600_000_000_000,
        filters: Vec::new(),
        timeline: None,
        label_sets: false,
        stack_buckets: false,
        rollup: 0,
    };
    let full = WireScan {
        tenant: "t-1".into(),
        project: "p_2".into(),
        from_ns: 0,
        to_ns: 3_600_000_000_000,
        filters: vec![
            ("host".into(), "a".into()),
            ("process".into(), "app".into()),
        ],
        timeline: Some((0, 1_000_000_000)),
        label_sets: true,
        stack_buckets: true,
        rollup: 24,
    };
    vec![("plain", scan_bytes(&plain)), ("full", scan_bytes(&full))]
}

fn seeds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/scan_decode")
}

#[test]
fn every_scan_decode_seed_decodes() {
    let dir = seeds_dir();
    if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let scopes = ["acme/web", "t-1/p_2"];
    for ((name, expected), scope) in seeds().into_iter().zip(scopes) {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(
            bytes, expected,
            "{name} is stale: rerun with KILN_WRITE_FIXTURES=1"
        );
        let decoded =
            kiln_actors::fuzzing::decode_scan(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, scope);
    }
}
