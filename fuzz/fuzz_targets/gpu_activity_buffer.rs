//! CUPTI activity buffer parsing on arbitrary bytes: never a panic or an
//! out-of-bounds read, and every record the walk reports is accounted for.
#![no_main]

use kiln_cuda::activity::{self, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut kernels = 0u64;
    let stats = activity::parse_buffer(data, |kernel| {
        kernels += 1;
        let _ = kernel.duration_ns();
    });
    assert_eq!(stats.kernels, kernels);
    // A record of any extent CUPTI might report parses too.
    for cut in [0, 4, 159, 160, 200]
        .into_iter()
        .filter(|&c| c <= data.len())
    {
        if let Record::Kernel(k) = activity::parse_record(&data[..cut]) {
            assert!(cut >= 160, "kernel read from a {cut}-byte record: {k:?}");
        }
    }
});
