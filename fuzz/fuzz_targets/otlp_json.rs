//! `kiln_formats::otlp::import_json` on arbitrary bytes: an error, never a
//! panic; the transcoded protobuf stays within its limit; what converts
//! agrees with its batches, as in `otlp_decode`.
#![no_main]

use kiln_formats::otlp::{MAX_JSON_TRANSCODED, OtlpOptions, import_json, transcode_json};
use kiln_model::Batch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(wire) = transcode_json(data) else {
        return;
    };
    assert!(wire.len() <= MAX_JSON_TRANSCODED);
    let options = OtlpOptions {
        now_ns: 1_700_000_000_000_000_000,
    };
    let Ok(imported) = import_json(data, &options) else {
        return;
    };
    let sum: u128 = imported
        .batches
        .iter()
        .map(|b| u128::from(b.sample_count()))
        .sum();
    assert_eq!(u128::from(imported.samples), sum.min(u128::from(u64::MAX)));
    assert!(imported.rejected_profiles <= imported.profiles);
    for batch in &imported.batches {
        let decoded = Batch::decode(&batch.encode()).expect("a converted batch decodes");
        assert_eq!(&decoded, batch);
    }
});
