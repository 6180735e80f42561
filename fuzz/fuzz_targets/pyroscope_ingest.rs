//! `kiln_formats::pyroscope::import_ingest` on arbitrary bodies: the first
//! byte picks the format and content type as the SDKs send them, the
//! rest is the body. An error, never a panic; what converts agrees with
//! its batches (the weights add up, every batch survives the wire).
#![no_main]

use kiln_formats::pyroscope::{IngestQuery, PyroscopeOptions, import_ingest};
use kiln_model::Batch;
use libfuzzer_sys::fuzz_target;

const SHAPES: [(Option<&str>, Option<&str>); 5] = [
    (None, Some("multipart/form-data; boundary=b0undary")),
    (Some("pprof"), None),
    (Some("folded"), None),
    (Some("lines"), None),
    (None, Some("binary/octet-stream")),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (format, content_type) = SHAPES[usize::from(pick) % SHAPES.len()];
    let query = IngestQuery {
        name: Some("app.cpu{env=fuzz}".into()),
        from: Some("1700000000".into()),
        until: Some("1700000010".into()),
        format: format.map(str::to_owned),
        spy_name: Some("gospy".into()),
        ..IngestQuery::default()
    };
    let options = PyroscopeOptions {
        now_ns: 1_700_000_000_000_000_000,
    };
    let Ok(imported) = import_ingest(&query, content_type, body, &options) else {
        return;
    };
    let sum: u64 = imported.batches.iter().map(Batch::sample_count).sum();
    assert_eq!(imported.samples, sum);
    for batch in &imported.batches {
        let decoded = Batch::decode(&batch.encode()).expect("a converted batch decodes");
        assert_eq!(&decoded, batch);
    }
});
