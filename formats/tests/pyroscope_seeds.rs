//! The Pyroscope fuzz targets' seeds (`fuzz/seeds/pyroscope_ingest/`,
//! `pyroscope_push/`, `multipart/`) convert whole, so the fuzzer starts
//! deep in the conversion rather than at the decoders' refusals: each
//! body shape the SDKs send, read as the targets read them.

use std::path::PathBuf;

use kiln_formats::pyroscope::{
    IngestQuery, PushEncoding, PyroscopeOptions, import_ingest, import_push, multipart,
};

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const OPTIONS: PyroscopeOptions = PyroscopeOptions {
    now_ns: 1_700_000_000_000_000_000,
};

#[test]
fn ingest_seeds_convert() {
    // As fuzz_targets/pyroscope_ingest.rs picks the shape.
    for (name, format, content_type, samples) in [
        (
            "go_multipart",
            None,
            Some("multipart/form-data; boundary=b0undary"),
            5,
        ),
        ("pprof_gzip", Some("pprof"), None, 5),
        ("folded", Some("folded"), None, 10),
        ("lines", Some("lines"), None, 3),
    ] {
        let data = seed("pyroscope_ingest", name);
        let query = IngestQuery {
            name: Some("app.cpu{env=fuzz}".into()),
            from: Some("1700000000".into()),
            until: Some("1700000010".into()),
            format: format.map(str::to_owned),
            spy_name: Some("gospy".into()),
            ..IngestQuery::default()
        };
        let imported = import_ingest(&query, content_type, &data[1..], &OPTIONS)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(imported.samples, samples, "{name}");
        assert!(
            imported.skipped.is_empty(),
            "{name}: {:?}",
            imported.skipped
        );
    }
}

#[test]
fn push_seeds_convert() {
    for (name, encoding) in [
        ("python_cpu.pb", PushEncoding::Proto),
        ("python_cpu.json", PushEncoding::Json),
    ] {
        let imported = import_push(&seed("pyroscope_push", name), encoding, &OPTIONS)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(imported.batches.len(), 1, "{name}");
        assert_eq!(imported.samples, 5, "{name}");
    }
}

#[test]
fn multipart_seeds_split() {
    for (name, parts) in [("two_parts", 2), ("quoted_boundary", 1)] {
        let data = seed("multipart", name);
        let split = data.iter().position(|&b| b == b'\n').unwrap();
        let content_type = std::str::from_utf8(&data[..split]).unwrap();
        let got = multipart::parts(content_type, &data[split + 1..]).unwrap();
        assert_eq!(got.len(), parts, "{name}");
    }
}
