//! Snapshot frames off the library's socket (`kiln_cuda::wire`) on
//! arbitrary bytes, read back to back as the agent reads a connection:
//! never a panic, a frame accepted only whole and only within its declared
//! length, and a snapshot it yields survives encoding again and folding.
//! Seeds in `fuzz/seeds/gpu_snapshot` are frames `Snapshot::encode` wrote.
#![no_main]

use std::io::Cursor;

use kiln_cuda::wire::HEADER_LEN;
use kiln_cuda::{FoldOptions, Snapshot, StallReasonTable, WeightUnit, fold_snapshot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Cursor::new(data);
    let mut stalls = StallReasonTable::default();
    loop {
        let start = input.position();
        // The agent closes the connection on any error: so does this.
        let Ok(snapshot) = Snapshot::read_from(&mut input) else {
            break;
        };
        let declared = u32::from_le_bytes(
            data[start as usize + 8..start as usize + 12]
                .try_into()
                .unwrap(),
        );
        assert_eq!(
            input.position() - start,
            HEADER_LEN as u64 + u64::from(declared),
            "a frame must take exactly its header and declared payload"
        );
        let again = snapshot.encode().expect("a decoded snapshot encodes");
        let back = Snapshot::read_from(&mut again.as_slice()).expect("and decodes again");
        assert_eq!(back, snapshot);
        stalls.update(&snapshot);
        let stacks = fold_snapshot(&snapshot, &stalls, &FoldOptions::default(), |_, _| None);
        let samples: u128 = snapshot
            .pc_samples
            .iter()
            .map(|p| u128::from(p.samples))
            .sum();
        let folded: u128 = stacks
            .iter()
            .filter(|s| s.unit == WeightUnit::Samples)
            .map(|s| u128::from(s.weight))
            .sum();
        assert_eq!(folded, samples, "folding keeps every PC sample");
    }
});
