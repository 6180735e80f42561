//! `kiln_formats::otlp::import` on arbitrary bytes: an error, never a
//! panic; what converts agrees with its batches (the weights add up, every
//! batch survives the wire, no more refusals than profiles). Each input is
//! also read in opentelemetry-proto 1.9.0's layout, so both paths are
//! fuzzed.
#![no_main]

use kiln_formats::otlp::{OtlpOptions, downgrade_to_v1_9, import};
use kiln_model::Batch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = OtlpOptions {
        now_ns: 1_700_000_000_000_000_000,
    };
    for bytes in [data.to_vec(), downgrade_to_v1_9(data)] {
        let Ok(imported) = import(&bytes, &options) else {
            continue;
        };
        // Profiles in different batches may add up past a u64: the
        // total saturates.
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
    }
});
