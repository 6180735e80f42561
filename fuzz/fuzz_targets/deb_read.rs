//! `.deb` packages as `kiln symbols crawl` reads them
//! (`kiln_symbolizer_workers::debug_files_in_deb_reader`: the ar archive,
//! its `data.tar` plain, gzip, xz or zstd, the build-id debug files in it)
//! on arbitrary bytes: an error, never a panic, and every file handed out
//! has a build-id path. Seeds in `fuzz/seeds/deb_read` are small packages
//! `dpkg-deb` built, one per compression.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut seen = 0;
    let found = kiln_symbolizer_workers::debug_files_in_deb_reader(data, "fuzz.deb".into(), |m| {
        assert!(m.path.starts_with("usr/lib/debug/.build-id/"), "{}", m.path);
        assert!(m.path.ends_with(".debug"), "{}", m.path);
        seen += 1;
    });
    if let Ok(count) = found {
        assert_eq!(count, seen);
    }
});
