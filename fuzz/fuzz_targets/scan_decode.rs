//! A query node's peer scan (`POST /internal/v1/scan`, `query/wire.rs`'s
//! `decode_scan`) on arbitrary bytes: an error, never a panic, and a scan
//! that decodes names a valid scope. Inputs up to a few MiB show a zstd
//! body's amplification (the decoder stops at 512 MiB decompressed).
//! Seeds in `fuzz/seeds/scan_decode` are scans as a peer sends them
//! (`actors/tests/fuzz_seeds.rs` writes them).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(scope) = kiln_actors::fuzzing::decode_scan(data) {
        let (tenant, project) = scope.split_once('/').expect("tenant/project");
        kiln_model::check_scope_name("tenant", tenant).expect("a decoded scan's tenant is valid");
        kiln_model::check_scope_name("project", project).expect("and its project");
    }
});
