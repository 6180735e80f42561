//! `ksym::upgrade`, `Ksym::open`, `verify` and lookups on arbitrary bytes:
//! an error or an answer, never a panic, a hang or an out-of-bounds read.
//! Seeds in `fuzz/seeds/ksym_open` are real ksym files, of versions 6
//! (mangled names compressed in blocks; one of a C++ program, whose names
//! are read by demangling its mangled ones), which `Ksym::open` reads,
//! and 5 (compact range records, mangled names in the blob), 4 (32-byte
//! records; one of each with Rust legacy hashes in its function records),
//! 3, 2 (bodies that refer to shared nodes) and 1, which the upgrade reads
//! whole and rewrites in version 6, so mutations reach past the header
//! checks of both the reader and the upgrade.

#![no_main]

use kiln_symbolizer_workers::{Ksym, KsymFile, ksym};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As the symbolizer's loader reads a stored file: upgraded first.
    let Ok(data) = ksym::upgrade(data) else {
        return;
    };
    let Ok(ksym) = Ksym::open(&data) else {
        return;
    };
    // Lookups must not depend on verify having passed: files are verified
    // when stored, not when loaded, and `kiln symbols resolve` does not
    // verify.
    let verified = ksym.verify().is_ok();
    let probes = [0, 1, 0x1000, 0x1130, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    let from_data = data
        .chunks_exact(8)
        .take(32)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
    let addrs: Vec<u64> = probes.into_iter().chain(from_data).collect();
    read_every_name(&ksym, &addrs);
    let mut single = Vec::new();
    ksym.lookup_many(&addrs, |i, frames| {
        // A damaged file (overlapping ranges, a page index that disagrees
        // with them) may answer a batch otherwise; a sound one may not.
        if verified {
            ksym.lookup(addrs[i], &mut single);
            assert_eq!(frames, &single[..], "a batch answers as lookups do");
        }
    });
    // As the symbolizer's loader keeps a file: its strings checked whole
    // once, then sliced unchecked by every lookup.
    if let Ok(file) = KsymFile::new(data.to_vec()) {
        read_every_name(&file.ksym(), &addrs);
    }
});

/// Looks up `addrs`, reading every string of every frame.
fn read_every_name(ksym: &Ksym<'_>, addrs: &[u64]) {
    let mut frames = Vec::new();
    for &addr in addrs {
        ksym.lookup(addr, &mut frames);
        for frame in &frames {
            let _ = (frame.function(), frame.mangled(), frame.path());
        }
    }
}
