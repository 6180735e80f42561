//! perf script import, checked against inferno's stackcollapse-perf as an
//! independent implementation of the same naming rules.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{NOW_NS, collapsed, collapsed_with, fixture, frame_name, stack_frames};
use inferno::collapse::Collapse;
use inferno::collapse::perf::Folder;
use kiln_formats::{Format, ImportOptions, Imported, import};
use kiln_model::{Frame, FrameKind};

fn import_perf(text: &str) -> Imported {
    import(
        Format::PerfScript,
        text.as_bytes(),
        &ImportOptions::new(NOW_NS),
    )
    .unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// What inferno's perf folder, with its default options, makes of `text`:
/// its leading process-name frame dropped (Kiln puts the process in a
/// label), and lines that become equal summed.
fn inferno_stacks(text: &str) -> BTreeMap<String, u64> {
    let mut out = Vec::new();
    Folder::default()
        .collapse(text.as_bytes(), &mut out)
        .expect("inferno collapses the fixture");
    let mut stacks = BTreeMap::new();
    for line in String::from_utf8(out)
        .expect("inferno writes UTF-8")
        .lines()
    {
        let (stack, count) = line.rsplit_once(' ').expect("folded line has a count");
        let (_process, stack) = stack.split_once(';').expect("folded line has frames");
        *stacks.entry(stack.to_owned()).or_insert(0) += count.parse::<u64>().expect("count");
    }
    stacks
}

/// `text` without the period field of its sample headers. inferno weighs a
/// sample by its period, Kiln counts it once (the period goes to the
/// batch); without periods inferno counts samples too.
fn without_periods(text: &str) -> String {
    let is_time = |w: &str| {
        w.strip_suffix(':')
            .and_then(|w| w.split_once('.'))
            .is_some_and(|(s, f)| {
                !s.is_empty()
                    && !f.is_empty()
                    && (s.to_owned() + f).bytes().all(|b| b.is_ascii_digit())
            })
    };
    let mut out = String::new();
    for line in text.lines() {
        let mut words: Vec<&str> = line.split(' ').collect();
        if !line.starts_with(['\t', '#'])
            && let Some(time) = words.iter().position(|w| is_time(w))
        {
            let next = |from: usize| (from..words.len()).find(|&i| !words[i].is_empty());
            if let Some(period) = next(time + 1)
                && words[period].bytes().all(|b| b.is_ascii_digit())
                && next(period + 1).is_some_and(|event| words[event].ends_with(':'))
            {
                words.remove(period);
            }
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

/// Compares Kiln's import of fixture `name` with inferno's collapse of it.
/// Frames of C++'s anonymous namespaces are left out of Kiln's stacks first:
/// inferno drops them, Kiln keeps them (a documented difference).
fn assert_same_as_inferno(name: &str) -> Imported {
    let text = fixture(name);
    let imported = import_perf(&text);
    let ours = collapsed_with(&imported.batch, |frame| {
        let name = frame_name(frame);
        (!name.starts_with("(anonymous namespace)")).then_some(name)
    });
    let theirs = inferno_stacks(&without_periods(&text));
    assert!(!theirs.is_empty(), "{name}: inferno found no stacks");
    if ours != theirs {
        let ours_only: BTreeSet<_> = ours
            .iter()
            .filter(|(k, v)| theirs.get(*k) != Some(v))
            .collect();
        let theirs_only: BTreeSet<_> = theirs
            .iter()
            .filter(|(k, v)| ours.get(*k) != Some(v))
            .collect();
        panic!(
            "{name}: Kiln and inferno differ\nKiln only:\n{ours_only:#?}\ninferno only:\n{theirs_only:#?}"
        );
    }
    assert_eq!(theirs.values().sum::<u64>(), imported.samples, "{name}");
    imported
}

#[test]
fn hand_written_c_program_with_threads_syscalls_and_unknown_frames() {
    let imported = assert_same_as_inferno("c-libc-threads.perf");
    assert_eq!(imported.samples, 11);
    let stacks = collapsed(&imported.batch);
    assert_eq!(
        stacks["__clone3;start_thread;decode_worker;[libpng16.so.16.39.0];[libpng16.so.16.39.0]"],
        1
    );
    // 250000 ns periods: a cpu-clock profile at 4 kHz.
    assert_eq!(imported.batch.period_ns, 250_000);
}

#[test]
fn hand_written_cpp_symbols_with_templates_spaces_and_parentheses() {
    let imported = assert_same_as_inferno("cpp-symbols.perf");
    let stacks = collapsed(&imported.batch);
    assert_eq!(
        stacks["_start;__libc_start_main_impl;__libc_start_call_main;main;search::Index::add;std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>"],
        2
    );
    assert!(
        stacks
            .keys()
            .any(|s| s.ends_with(";search::Index::add;search::(anonymous namespace)::tokenize"))
    );
    assert!(stacks.keys().any(|s| s.ends_with(";main;std::function<void (int)>::operator;std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke")));
}

#[test]
fn hand_written_rust_symbols_half_demangled_or_not() {
    let imported = assert_same_as_inferno("rust-symbols.perf");
    let stacks = collapsed(&imported.batch);
    assert!(stacks.keys().any(|s| s.ends_with(
        ";rg::search_parallel::_{{closure}}::_{{closure}};rg::search::SearchWorker<W>::search;<grep_searcher::searcher::glue::ReadByLine<'s, M, R, S>>::run"
    )));
    // task-clock periods are nanoseconds too.
    assert_eq!(imported.batch.period_ns, 1_000_000);
}

#[test]
fn hand_written_variants_of_header_and_stack_lines() {
    let imported = assert_same_as_inferno("variants.perf");
    // The `cycles` sample is another event than the first one's.
    assert_eq!(imported.skipped_samples, 1);
    let stacks = collapsed(&imported.batch);
    assert!(stacks.contains_key(
        "start_thread;JavaCalls::call_helper;Interpreter;com/acme/orders/Service:::handle;com/acme/orders/Pricer:::quote;com/acme/orders/Tax:::apply_[i]"
    ));
    let labels: BTreeSet<_> = imported
        .batch
        .label_sets
        .iter()
        .filter_map(|l| l.labels.get("process"))
        .collect();
    assert!(
        labels.contains("V8 WorkerThread") && labels.contains("kworker/u16:2-e"),
        "{labels:?}"
    );
    // No period printed: the default.
    assert_eq!(imported.batch.period_ns, kiln_formats::DEFAULT_PERIOD_NS);
}

#[test]
fn real_perf_record_of_a_threaded_c_program() {
    let imported = assert_same_as_inferno("real-c-threads-syscalls.perf");
    // perf's default output prints thread ids only.
    let tids: BTreeSet<_> = imported
        .batch
        .label_sets
        .iter()
        .map(|l| {
            assert_eq!(l.labels.get("pid"), None);
            l.labels.get("tid").expect("tid label").to_owned()
        })
        .collect();
    assert_eq!(tids.len(), 3);
    let kernel = imported
        .batch
        .frames
        .iter()
        .filter(|f| f.frame.kind() == FrameKind::Kernel);
    assert!(kernel.count() > 10);
    let times: Vec<_> = imported
        .batch
        .samples
        .iter()
        .map(|s| s.timestamp_ns)
        .collect();
    assert_eq!(
        times.iter().max(),
        Some(&NOW_NS),
        "the last sample lands now"
    );
    assert!(*times.iter().min().unwrap() > NOW_NS - 10_000_000_000);
}

#[test]
fn real_perf_record_of_a_cpp_program() {
    let imported = assert_same_as_inferno("real-cpp-templates.perf");
    let stacks = collapsed(&imported.batch);
    // inferno drops these frames, the hottest of the program.
    assert_eq!(
        stacks["__libc_start_call_main;main;(anonymous namespace)::accumulate_squares<double>"],
        61
    );
}

#[test]
fn real_perf_record_of_a_rust_program_with_pid_and_tid() {
    let imported = assert_same_as_inferno("real-rust-pid-tid.perf");
    let labels = &imported.batch.label_sets[0].labels;
    assert_eq!(labels.get("process"), Some("rs_words"));
    assert!(labels.get("pid").is_some() && labels.get("tid").is_some());
}

#[test]
fn real_perf_record_without_callchains() {
    let imported = assert_same_as_inferno("real-no-callchain.perf");
    let stacks = collapsed(&imported.batch);
    assert!(
        stacks.keys().all(|s| !s.contains(';')),
        "one frame per sample"
    );
}

/// Where Kiln departs from stackcollapse-perf on purpose (see
/// `perf_script/naming.rs`): nothing is dropped or garbled.
#[test]
fn deleted_modules_paths_with_blanks_and_bare_addresses() {
    let imported = import_perf(&fixture("divergent.perf"));
    let stacks = collapsed(&imported.batch);
    let expected: BTreeMap<String, u64> = [
        ("main;codec_decode;[libcodec.so]".to_owned(), 1),
        (
            "main;(anonymous namespace)::pump;[libcodec.so];[unknown]".to_owned(),
            1,
        ),
    ]
    .into();
    assert_eq!(stacks, expected);
    let frames = stack_frames(&imported.batch, 0);
    assert_eq!(
        frames[1],
        Frame::Named {
            kind: FrameKind::Native,
            function: "codec_decode".into(),
            module: Some("libcodec.so".into()),
            file: None,
            line: 0,
        }
    );
    assert_eq!(
        frames[0],
        Frame::Named {
            kind: FrameKind::Native,
            function: "main".into(),
            module: Some("updater".into()),
            file: None,
            line: 0,
        },
        "the module path with a blank is read whole"
    );
}

#[test]
fn import_is_deterministic_and_round_trips_through_the_wire() {
    let text = fixture("real-rust-pid-tid.perf");
    let a = import_perf(&text);
    let b = import_perf(&text);
    assert_eq!(a, b);
    let decoded = kiln_model::Batch::decode(&a.batch.encode()).expect("batch decodes");
    assert_eq!(decoded, a.batch);
}
