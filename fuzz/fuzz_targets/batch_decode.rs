//! `Batch::decode` on arbitrary bytes: an error, never a panic, and a batch
//! that decodes encodes to one that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(batch) = kiln_model::Batch::decode(data) {
        let again = kiln_model::Batch::decode(&batch.encode()).expect("re-encoded batch decodes");
        assert_eq!(again, batch);
    }
});
