//! `kiln_formats::pyroscope::multipart::parts` on arbitrary bodies (the
//! first line is the Content-Type): an error, never a panic; the parts
//! are in-bounds, non-overlapping slices of the body, in order, at most
//! `MAX_PARTS` of them.
#![no_main]

use kiln_formats::pyroscope::multipart::{MAX_PARTS, parts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let Ok(content_type) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let body = data.get(split + 1..).unwrap_or_default();
    let Ok(parts) = parts(content_type, body) else {
        return;
    };
    assert!(parts.len() <= MAX_PARTS);
    let range = body.as_ptr_range();
    let mut end = range.start;
    for part in &parts {
        let r = part.body.as_ptr_range();
        assert!(range.start <= r.start && r.end <= range.end);
        assert!(r.start >= end, "parts overlap or are out of order");
        end = r.end;
        assert!(!part.name.is_empty());
    }
});
