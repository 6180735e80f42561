//! Symbol extraction (ELF symbol tables, DWARF lines and inline trees) on
//! arbitrary bytes: an error or a table, never a panic or a hang; and a
//! table always encodes to a ksym file that opens and verifies. Seeds in
//! `fuzz/seeds/elf_extract` are small real ELF files with DWARF.

#![no_main]

use std::path::Path;

use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract_bytes, ksym};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = ExtractOptions {
        no_debug_file: true,
        ..ExtractOptions::default()
    };
    let Ok(extracted) = extract_bytes(Path::new("fuzz"), data, &options) else {
        return;
    };
    let bytes = ksym::encode(&extracted.table);
    let symbols = Ksym::open(&bytes).expect("an encoded table opens");
    symbols.verify().expect("an encoded table verifies");
});
