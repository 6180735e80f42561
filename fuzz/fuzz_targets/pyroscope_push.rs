//! `kiln_formats::pyroscope::import_push` on arbitrary bytes, as protobuf
//! and as Connect JSON: an error, never a panic; what converts agrees
//! with its batches.
#![no_main]

use kiln_formats::pyroscope::{PushEncoding, PyroscopeOptions, import_push};
use kiln_model::Batch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = PyroscopeOptions {
        now_ns: 1_700_000_000_000_000_000,
    };
    for encoding in [PushEncoding::Proto, PushEncoding::Json] {
        let Ok(imported) = import_push(data, encoding, &options) else {
            continue;
        };
        let sum: u128 = imported
            .batches
            .iter()
            .map(|b| u128::from(b.sample_count()))
            .sum();
        // Profiles in different batches may add up past a u64: the total
        // saturates.
        assert_eq!(u128::from(imported.samples), sum.min(u128::from(u64::MAX)));
        assert!(imported.skipped.len() <= imported.profiles);
        for batch in &imported.batches {
            let decoded = Batch::decode(&batch.encode()).expect("a converted batch decodes");
            assert_eq!(&decoded, batch);
        }
    }
});
