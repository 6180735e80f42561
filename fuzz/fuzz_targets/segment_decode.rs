//! A sealed-hour segment (`kiln_storage::segment::decode`, what a query
//! node reads from the object store for every sealed hour of a range) on
//! arbitrary bytes: an error, never a panic, and a segment that decodes
//! encodes back to one that decodes to the same rows. Inputs up to a few
//! MiB show a zstd body's amplification (the decoder stops at 1 GiB
//! inflated). Seeds in `fuzz/seeds/segment_decode` are segments as a seal
//! writes them (`storage/tests/segment_seeds.rs` writes them).
#![no_main]

use kiln_storage::segment;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((hour, rows)) = segment::decode(data) {
        let (again, count) = segment::encode(hour, &rows);
        let (hour_again, rows_again) = segment::decode(&again).expect("an encoded segment decodes");
        assert_eq!(hour_again, hour);
        assert_eq!(count, rows_again.len());
        // Decoded rows may repeat a key (a forged segment); encoding keeps
        // one per key.
        assert!(rows_again.len() <= rows.len());
    }
});
