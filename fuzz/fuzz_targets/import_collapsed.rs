//! `kiln_formats::import` of `Format::Collapsed` on arbitrary bytes: an error,
//! never a panic; a successful import's counts agree with its batch.
#![no_main]

use kiln_formats::{Format, ImportOptions, import};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = ImportOptions::new(1_700_000_000_000_000_000);
    if let Ok(imported) = import(Format::Collapsed, data, &options) {
        assert_eq!(imported.samples, imported.batch.sample_count());
        assert_eq!(imported.stacks, imported.batch.stacks.len());
    }
});
