//! Property tests: collapsed stacks round-trip, and no input makes any
//! import panic.

mod common;

use std::collections::BTreeMap;

use common::{NOW_NS, collapsed};
use kiln_formats::{Format, ImportOptions, import};
use proptest::prelude::*;

/// A frame name as collapsed files hold them: no `;` or line break, no
/// blank at either end (those are layout), anything else (blanks, tabs,
/// parentheses, non-ASCII) inside.
fn frame_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^;\\s]",
        "[^;\\s][^;\\r\\n]{0,12}[^;\\s]",
        "[a-z_:<>(),][a-z_:<>(), ]{0,10}_\\[k\\]",
    ]
}

fn stacks() -> impl Strategy<Value = Vec<(Vec<String>, u64)>> {
    prop::collection::vec(
        (prop::collection::vec(frame_name(), 1..8), 0u64..1_000_000),
        1..20,
    )
}

/// Lines of perf script-like text, to reach past the first line's checks.
fn perf_like_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just(String::new()),
        Just("# comment".to_owned()),
        "[a-z ]{1,8} [0-9]{1,5}(/[0-9]{1,5})?( \\[[0-9]{3}\\])? [0-9]{1,6}\\.[0-9]{1,10}:( [0-9]{1,8})? [a-z:-]{0,12}:?( .{0,20})?",
        "\t[0-9a-f]{1,16}( .{0,30})?( \\(.{0,20}\\))?",
        "\t[0-9a-f]{1,16} [a-zA-Z_$.:<>()+ ]{0,40}(\\+0x[0-9a-f]{0,4})? \\((\\[[a-z.]{1,16}\\]|/[a-z/ ()]{1,16})\\)",
        ".{0,40}",
    ];
    prop::collection::vec(line, 0..30).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Importing collapsed text and joining each stack's frame names gives
    /// the input back, duplicates summed and zero counts dropped.
    #[test]
    fn collapsed_round_trips(stacks in stacks()) {
        let mut text = String::new();
        let mut expected: BTreeMap<String, u64> = BTreeMap::new();
        for (frames, count) in &stacks {
            let stack = frames.join(";");
            text.push_str(&format!("{stack} {count}\n"));
            if *count > 0 {
                *expected.entry(stack).or_insert(0) += count;
            }
        }
        match import(Format::Collapsed, text.as_bytes(), &ImportOptions::new(NOW_NS)) {
            Ok(imported) => {
                prop_assert_eq!(imported.samples, expected.values().sum::<u64>());
                prop_assert_eq!(imported.stacks, expected.len());
                prop_assert_eq!(collapsed(&imported.batch), expected);
            }
            Err(e) => {
                prop_assert!(expected.is_empty(), "{e}");
                prop_assert_eq!(e.to_string(), "no samples in input");
            }
        }
    }

    /// Guards every format against arbitrary bytes: an error, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let options = ImportOptions::new(NOW_NS);
        for format in Format::ALL {
            let _ = import(format, &bytes, &options);
        }
        // The same bytes behind a gzip header reach the decompressor.
        let mut gz = vec![0x1f, 0x8b];
        gz.extend_from_slice(&bytes);
        let _ = import(Format::Pprof, &gz, &options);
    }

    /// Guards the text formats against text that looks almost right.
    #[test]
    fn perf_like_text_never_panics(text in perf_like_text()) {
        let options = ImportOptions::new(NOW_NS);
        if let Ok(imported) = import(Format::PerfScript, text.as_bytes(), &options) {
            prop_assert_eq!(imported.samples, imported.batch.sample_count());
            prop_assert!(imported.batch.samples.iter().all(|s| s.timestamp_ns <= NOW_NS));
        }
        let _ = import(Format::Collapsed, text.as_bytes(), &options);
    }
}
