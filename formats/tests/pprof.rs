//! pprof import, on profiles built with the crate's own prost messages.

mod common;

use std::io::Write;

use common::{NOW_NS, collapsed, stack_frames};
use kiln_formats::pprof_proto::{
    Function, Label, Line, Location, Mapping, Profile, Sample, ValueType,
};
use kiln_formats::{Format, ImportError, ImportOptions, Imported, import};
use kiln_model::{Frame, FrameKind, LabelSet};
use prost::Message;

/// Builds a profile's string table as it goes.
#[derive(Default)]
struct Strings(Vec<String>);

impl Strings {
    fn new() -> Self {
        Strings(vec![String::new()])
    }

    fn id(&mut self, s: &str) -> i64 {
        let i = match self.0.iter().position(|x| x == s) {
            Some(i) => i,
            None => {
                self.0.push(s.to_owned());
                self.0.len() - 1
            }
        };
        i as i64
    }
}

fn value_type(strings: &mut Strings, ty: &str, unit: &str) -> ValueType {
    ValueType {
        r#type: strings.id(ty),
        unit: strings.id(unit),
    }
}

fn line(function_id: u64, line: i64) -> Line {
    Line {
        function_id,
        line,
        column: 0,
    }
}

const PROFILE_TIME_NS: i64 = 1_699_999_000_000_000_000;

/// The shape of a profile from Go's `runtime/pprof` CPU profiler: two
/// sample types, a 10 ms CPU period, one mapping for the binary, a location
/// with an inlined function, and `pprof.Do` labels.
fn go_cpu_profile() -> Profile {
    let mut s = Strings::new();
    let sample_type = vec![
        value_type(&mut s, "samples", "count"),
        value_type(&mut s, "cpu", "nanoseconds"),
    ];
    let period_type = Some(value_type(&mut s, "cpu", "nanoseconds"));
    let function = |s: &mut Strings, id, name: &str, file: &str| Function {
        id,
        name: s.id(name),
        system_name: s.id(name),
        filename: s.id(file),
        start_line: 1,
    };
    let functions = vec![
        function(&mut s, 1, "main.hash", "/src/server/hash.go"),
        function(&mut s, 2, "main.checksum", "/src/server/hash.go"),
        function(&mut s, 3, "main.(*Server).handle", "/src/server/main.go"),
        function(
            &mut s,
            4,
            "runtime.goexit",
            "/usr/local/go/src/runtime/asm_amd64.s",
        ),
    ];
    let mapping = Mapping {
        id: 1,
        memory_start: 0x400000,
        memory_limit: 0x800000,
        file_offset: 0,
        filename: s.id("/usr/local/bin/server"),
        build_id: s.id("c0ffee"),
        has_functions: true,
        has_filenames: true,
        has_line_numbers: true,
        has_inline_frames: true,
    };
    let location = |id, address, lines| Location {
        id,
        mapping_id: 1,
        address,
        line: lines,
        is_folded: false,
    };
    let locations = vec![
        location(1, 0x4a0010, vec![line(1, 30)]),
        // main.checksum inlined into main.(*Server).handle: innermost first.
        location(2, 0x4a0200, vec![line(2, 12), line(3, 88)]),
        location(3, 0x470001, vec![line(4, 1700)]),
    ];
    let handler = s.id("handler");
    let label = |s: &mut Strings, value: &str| Label {
        key: handler,
        str: s.id(value),
        num: 0,
        num_unit: 0,
    };
    let bytes_label = Label {
        key: s.id("bytes"),
        str: 0,
        num: 512,
        num_unit: s.id("bytes"),
    };
    let samples = vec![
        Sample {
            location_id: vec![1, 2, 3],
            value: vec![5, 50_000_000],
            label: vec![label(&mut s, "/api"), bytes_label],
        },
        Sample {
            location_id: vec![2, 3],
            value: vec![2, 20_000_000],
            label: vec![label(&mut s, "/api")],
        },
        Sample {
            location_id: vec![1, 2, 3],
            value: vec![1, 10_000_000],
            label: vec![label(&mut s, "/health")],
        },
        Sample {
            location_id: vec![1, 2, 3],
            value: vec![3, 30_000_000],
            label: vec![label(&mut s, "/api")],
        },
    ];
    Profile {
        sample_type,
        sample: samples,
        mapping: vec![mapping],
        location: locations,
        function: functions,
        string_table: s.0,
        time_nanos: PROFILE_TIME_NS,
        duration_nanos: 10_000_000_000,
        period_type,
        period: 10_000_000,
        ..Profile::default()
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn import_profile(profile: &Profile) -> Result<Imported, ImportError> {
    import(
        Format::Pprof,
        &profile.encode_to_vec(),
        &ImportOptions::new(NOW_NS),
    )
}

#[test]
fn go_cpu_profile_plain_and_gzipped() {
    let bytes = go_cpu_profile().encode_to_vec();
    let options = ImportOptions::new(NOW_NS);
    let plain = import(Format::Pprof, &bytes, &options).unwrap();
    let gzipped = import(Format::Pprof, &gzip(&bytes), &options).unwrap();
    assert_eq!(plain, gzipped);

    assert_eq!(plain.samples, 11);
    assert_eq!(plain.stacks, 2);
    assert_eq!(plain.batch.period_ns, 10_000_000);
    assert!(
        plain
            .batch
            .samples
            .iter()
            .all(|s| s.timestamp_ns == PROFILE_TIME_NS)
    );
    let stacks = collapsed(&plain.batch);
    assert_eq!(
        stacks,
        [
            (
                "runtime.goexit;main.(*Server).handle;main.checksum;main.hash".to_owned(),
                9
            ),
            (
                "runtime.goexit;main.(*Server).handle;main.checksum".to_owned(),
                2
            ),
        ]
        .into()
    );
    // The two `/api` samples of one stack are summed; `/health` stays apart.
    let mut counts: Vec<u64> = plain.batch.samples.iter().map(|s| s.count).collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2, 8]);
}

#[test]
fn frames_carry_function_file_line_and_module() {
    let imported = import_profile(&go_cpu_profile()).unwrap();
    // The deeper of the profile's two stacks.
    let frames = (0..imported.batch.samples.len())
        .map(|i| stack_frames(&imported.batch, i))
        .max_by_key(Vec::len)
        .unwrap();
    let named = |function: &str, file: &str, line| Frame::Named {
        kind: FrameKind::Native,
        function: function.into(),
        module: Some("server".into()),
        file: Some(file.into()),
        line,
    };
    assert_eq!(
        frames,
        [
            named(
                "runtime.goexit",
                "/usr/local/go/src/runtime/asm_amd64.s",
                1700
            ),
            named("main.(*Server).handle", "/src/server/main.go", 88),
            named("main.checksum", "/src/server/hash.go", 12),
            named("main.hash", "/src/server/hash.go", 30),
        ]
    );
}

#[test]
fn string_labels_are_kept_and_options_labels_win() {
    let mut options = ImportOptions::new(NOW_NS);
    options.labels = LabelSet::new()
        .with("host", "web-1")
        .with("handler", "forced");
    let imported = import(Format::Pprof, &go_cpu_profile().encode_to_vec(), &options).unwrap();
    let sets: Vec<_> = imported
        .batch
        .label_sets
        .iter()
        .map(|l| &l.labels)
        .collect();
    assert_eq!(
        sets.len(),
        1,
        "options' handler replaced both values: {sets:?}"
    );
    assert_eq!(sets[0].get("host"), Some("web-1"));
    assert_eq!(sets[0].get("bytes"), None, "numeric labels are left out");

    let imported = import_profile(&go_cpu_profile()).unwrap();
    let handlers: Vec<_> = imported
        .batch
        .label_sets
        .iter()
        .map(|l| l.labels.get("handler").unwrap())
        .collect();
    assert_eq!(handlers, ["/api", "/health"]);
}

#[test]
fn count_is_the_first_value_without_samples_or_count() {
    let mut profile = go_cpu_profile();
    let mut s = Strings(profile.string_table.clone());
    profile.sample_type = vec![
        value_type(&mut s, "alloc_objects", "count"),
        value_type(&mut s, "alloc_space", "bytes"),
    ];
    profile.period_type = Some(value_type(&mut s, "space", "bytes"));
    profile.period = 524_288;
    profile.time_nanos = 0;
    profile.string_table = s.0;
    let imported = import_profile(&profile).unwrap();
    assert_eq!(imported.samples, 11);
    assert_eq!(imported.batch.period_ns, kiln_formats::DEFAULT_PERIOD_NS);
    assert!(
        imported
            .batch
            .samples
            .iter()
            .all(|s| s.timestamp_ns == NOW_NS)
    );
}

#[test]
fn nanosecond_counts_make_a_one_nanosecond_period() {
    let mut profile = go_cpu_profile();
    let mut s = Strings(profile.string_table.clone());
    profile.sample_type = vec![value_type(&mut s, "cpu", "nanoseconds")];
    profile.string_table = s.0;
    for sample in &mut profile.sample {
        sample.value.remove(0);
    }
    let imported = import_profile(&profile).unwrap();
    assert_eq!(imported.samples, 110_000_000);
    assert_eq!(imported.batch.period_ns, 1);
}

#[test]
fn locations_without_lines_and_kernel_mappings() {
    let mut profile = go_cpu_profile();
    let mut s = Strings(profile.string_table.clone());
    profile.mapping.push(Mapping {
        id: 2,
        filename: s.id("[kernel.kallsyms]"),
        ..Mapping::default()
    });
    profile.location.push(Location {
        id: 9,
        mapping_id: 2,
        address: 0xffffffff81000130,
        line: vec![],
        is_folded: false,
    });
    profile.location[0].line.clear();
    profile.sample = vec![Sample {
        location_id: vec![9, 1, 2, 3],
        value: vec![1, 1],
        label: vec![],
    }];
    profile.string_table = s.0;
    let imported = import_profile(&profile).unwrap();
    let frames = stack_frames(&imported.batch, 0);
    assert_eq!(
        frames.last().unwrap(),
        &Frame::Named {
            kind: FrameKind::Kernel,
            function: "0xffffffff81000130".into(),
            module: Some("[kernel.kallsyms]".into()),
            file: None,
            line: 0,
        }
    );
    assert_eq!(
        frames[frames.len() - 2],
        Frame::Named {
            kind: FrameKind::Native,
            function: "0x4a0010".into(),
            module: Some("server".into()),
            file: None,
            line: 0,
        }
    );
}

/// Guards the error messages: each names the sample, location or field.
#[test]
fn invalid_profiles_are_refused_by_name() {
    let err = |edit: &dyn Fn(&mut Profile)| {
        let mut profile = go_cpu_profile();
        edit(&mut profile);
        import_profile(&profile).unwrap_err().to_string()
    };
    assert_eq!(
        err(&|p| p.sample[3].location_id[0] = 99),
        "pprof: sample 3 refers to location id 99, which the profile does not define"
    );
    assert_eq!(
        err(&|p| p.location[1].line[1].function_id = 7),
        "pprof: location id 2 refers to function id 7, which the profile does not define"
    );
    assert_eq!(
        err(&|p| p.location[0].mapping_id = 5),
        "pprof: location id 1 refers to mapping id 5, which the profile does not define"
    );
    assert_eq!(
        err(&|p| p.function[2].name = 1000),
        format!(
            "pprof: function id 3 name refers to string 1000, but the string table has {} entries",
            go_cpu_profile().string_table.len()
        )
    );
    assert!(
        err(&|p| p.sample_type[1].unit = -1)
            .starts_with("pprof: sample type 1 unit refers to string -1")
    );
    assert_eq!(
        err(&|p| p.sample[1].value.push(3)),
        "pprof: sample 1 has 3 values, but the profile declares 2 sample types"
    );
    assert_eq!(
        err(&|p| p.sample[0].value[0] = -4),
        "pprof: sample 0 has a negative samples value -4"
    );
    assert_eq!(
        err(&|p| p.location[2].id = 1),
        "pprof: location id 1 is defined twice"
    );
    assert_eq!(
        err(&|p| p.function[0].id = 0),
        "pprof: function id 0 is reserved (ids start at 1)"
    );
    assert_eq!(
        err(&|p| p.sample_type.clear()),
        "pprof: the profile declares no sample types"
    );
    assert_eq!(err(&|p| p.sample.clear()), "no samples in input");
    assert_eq!(
        err(&|p| p.sample[2].label[0].key = 0),
        "pprof: sample 2 has a label with an empty key"
    );
}

#[test]
fn bytes_that_are_not_a_profile() {
    let options = ImportOptions::new(NOW_NS);
    let err = import(Format::Pprof, b"\x1f\x8bnot gzip at all", &options).unwrap_err();
    assert!(
        err.to_string().starts_with("pprof: gzip data is corrupt"),
        "{err}"
    );
    let err = import(Format::Pprof, b"\xff\xff\xff", &options).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("pprof: not a valid profile.proto message"),
        "{err}"
    );
    let err = import(Format::Pprof, b"", &options).unwrap_err();
    assert_eq!(err.to_string(), "input is empty");
}

proptest::proptest! {
    /// Guards the decoder and the checks after it against damaged
    /// profiles: an error, never a panic.
    #[test]
    fn damaged_profiles_never_panic(
        edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 1..8),
        gzipped in proptest::prelude::any::<bool>(),
    ) {
        let mut bytes = go_cpu_profile().encode_to_vec();
        if gzipped {
            bytes = gzip(&bytes);
        }
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = import(Format::Pprof, &bytes, &ImportOptions::new(NOW_NS));
    }
}

/// Guards the depth cut: a stack deeper than 4096 frames keeps its leaf
/// end under a truncation marker, whatever the profile asks for.
#[test]
fn deep_stacks_are_cut_at_the_root() {
    let mut profile = go_cpu_profile();
    // 3 locations of 1 + 2 + 1 frames, repeated: 4 frames a round.
    let mut ids = Vec::new();
    for _ in 0..2000 {
        ids.extend([1, 2, 3]);
    }
    profile.sample = vec![Sample {
        location_id: ids,
        value: vec![1, 1],
        label: vec![],
    }];
    let imported = import_profile(&profile).unwrap();
    let frames = stack_frames(&imported.batch, 0);
    assert_eq!(frames.len(), 4096);
    assert_eq!(frames[0], Frame::named(FrameKind::Truncated, "[truncated]"));
    let leaf = common::frame_name(frames.last().unwrap());
    assert_eq!(leaf, "main.hash");

    // Exactly 4096 frames fit.
    profile.sample[0].location_id.truncate(3 * 1024);
    let imported = import_profile(&profile).unwrap();
    let frames = stack_frames(&imported.batch, 0);
    assert_eq!(frames.len(), 4096);
    assert_eq!(common::frame_name(&frames[0]), "runtime.goexit");
}

/// `n` lines of function 1, as a `Location`'s field 4 on the wire: the
/// shortest a line can be (4 bytes), decoded as 24.
fn wire_lines(n: usize) -> Vec<u8> {
    [0x22, 0x02, 0x08, 0x01].repeat(n)
}

/// A location message, on the wire, with `lines` lines.
fn wire_location(id: u8, lines: &[u8]) -> Vec<u8> {
    let mut location = vec![0x08, id];
    location.extend_from_slice(lines);
    let mut out = vec![0x22];
    let mut len = location.len();
    while len >= 0x80 {
        out.push((len as u8) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend(location);
    out
}

/// Guards the pprof line bomb: a gzipped profile of ~100 KB whose
/// locations hold six million lines is refused by its count before one
/// line is decoded or one frame built, fast.
#[test]
fn a_line_bomb_is_refused_before_decoding() {
    let lines = wire_lines(3000);
    let mut profile = go_cpu_profile().encode_to_vec();
    for id in 10..210u8 {
        for _ in 0..10 {
            profile.extend(wire_location(id, &lines));
        }
    }
    let bomb = gzip(&profile);
    assert!(bomb.len() < 200_000, "{} bytes gzipped", bomb.len());
    let started = std::time::Instant::now();
    let err = import(Format::Pprof, &bomb, &ImportOptions::new(NOW_NS)).unwrap_err();
    assert!(
        matches!(
            err,
            ImportError::PprofTooMany {
                what: "lines in locations",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "pprof: the profile has more than 4194304 lines in locations, more than one import takes; split it"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// One location with more lines than a stack holds frames is refused,
/// naming it.
#[test]
fn a_location_with_too_many_lines_is_refused() {
    let mut profile = go_cpu_profile().encode_to_vec();
    profile.extend(wire_location(
        99,
        &wire_lines(kiln_model::MAX_STACK_DEPTH + 1),
    ));
    let err = import(Format::Pprof, &profile, &ImportOptions::new(NOW_NS)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "pprof: location 3 (counting from 0) has more than 4096 lines, more than a stack holds"
    );
}

/// Empty samples (2 bytes each on the wire, 72 decoded) past the limit
/// are refused before decoding.
#[test]
fn too_many_samples_are_refused_before_decoding() {
    let mut profile = go_cpu_profile().encode_to_vec();
    profile.extend([0x12, 0x00].repeat((1 << 22) + 1));
    let err = import(Format::Pprof, &gzip(&profile), &ImportOptions::new(NOW_NS)).unwrap_err();
    assert!(
        matches!(
            err,
            ImportError::PprofTooMany {
                what: "samples",
                ..
            }
        ),
        "{err:?}"
    );
}
