//! `Batch::decode` on arbitrary bytes: an error, never a panic, and a batch
//! that decodes encodes to one that decodes the same. `Batch::peek_within`
//! (what a gateway checks) on the same bytes: never a panic, and it agrees
//! with the full decode: whatever decodes peeks to the same figures, and
//! whatever a peek refuses, the decode refuses too.
#![no_main]

use kiln_model::{Batch, BatchPeek, MAX_BATCH_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let peeked = Batch::peek_within(data, MAX_BATCH_BYTES);
    if let Ok(batch) = Batch::decode(data) {
        let again = Batch::decode(&batch.encode()).expect("re-encoded batch decodes");
        assert_eq!(again, batch);
        assert_eq!(peeked.expect("a batch that decodes peeks"), BatchPeek::of(&batch));
    }
});
