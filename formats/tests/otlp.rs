//! OTLP profiles import, on requests built with the `opentelemetry-proto`
//! crate's own messages.

mod common;

use std::collections::BTreeMap;

use common::{NOW_NS, collapsed, stack_frames};
use kiln_formats::otlp::proto::collector::ExportProfilesServiceRequest;
use kiln_formats::otlp::proto::common::{AnyValue, InstrumentationScope, KeyValue, any_value};
use kiln_formats::otlp::proto::profiles::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use kiln_formats::otlp::proto::resource::Resource;
use kiln_formats::otlp::{Layout, OtlpError, OtlpImported, OtlpOptions, downgrade_to_v1_9, import};
use kiln_model::{Batch, FileId, Frame, FrameKind, LabelSet};
use prost::Message;

const SECOND: u64 = 1_000_000_000;
/// A time in the past of [`NOW_NS`], on a whole second.
const T0: u64 = 1_699_999_000 * SECOND;

fn options() -> OtlpOptions {
    OtlpOptions { now_ns: NOW_NS }
}

/// Builds a request's dictionary as it goes; entry 0 of every table is
/// the zero value.
struct Dict(ProfilesDictionary);

impl Dict {
    fn new() -> Self {
        Dict(ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: vec![Location::default()],
            function_table: vec![Function::default()],
            link_table: vec![Default::default()],
            string_table: vec![String::new()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![Stack::default()],
        })
    }

    fn s(&mut self, s: &str) -> i32 {
        let t = &mut self.0.string_table;
        let i = t.iter().position(|x| x == s).unwrap_or_else(|| {
            t.push(s.to_owned());
            t.len() - 1
        });
        i as i32
    }

    fn attr(&mut self, key: &str, value: any_value::Value) -> i32 {
        let key_strindex = self.s(key);
        self.0.attribute_table.push(KeyValueAndUnit {
            key_strindex,
            value: Some(AnyValue { value: Some(value) }),
            unit_strindex: 0,
        });
        (self.0.attribute_table.len() - 1) as i32
    }

    fn str_attr(&mut self, key: &str, value: &str) -> i32 {
        self.attr(key, any_value::Value::StringValue(value.into()))
    }

    fn function(&mut self, name: &str, file: &str) -> i32 {
        let f = Function {
            name_strindex: self.s(name),
            system_name_strindex: 0,
            filename_strindex: self.s(file),
            start_line: 0,
        };
        self.0.function_table.push(f);
        (self.0.function_table.len() - 1) as i32
    }

    fn mapping(&mut self, file: &str, attributes: &[(&str, &str)]) -> i32 {
        let attribute_indices = attributes
            .iter()
            .map(|(k, v)| self.str_attr(k, v))
            .collect();
        let m = Mapping {
            memory_start: 0x1000,
            memory_limit: 0x9000,
            file_offset: 0,
            filename_strindex: self.s(file),
            attribute_indices,
        };
        self.0.mapping_table.push(m);
        (self.0.mapping_table.len() - 1) as i32
    }

    /// A location of frame type `kind` (none when empty) with `lines`
    /// (function, file, line), innermost first.
    fn location(
        &mut self,
        kind: &str,
        mapping: i32,
        address: u64,
        lines: &[(&str, &str, i64)],
    ) -> i32 {
        let lines = lines
            .iter()
            .map(|(f, file, line)| Line {
                function_index: self.function(f, file),
                line: *line,
                column: 3,
            })
            .collect();
        let attribute_indices = if kind.is_empty() {
            vec![]
        } else {
            vec![self.str_attr("profile.frame.type", kind)]
        };
        self.0.location_table.push(Location {
            mapping_index: mapping,
            address,
            lines,
            attribute_indices,
        });
        (self.0.location_table.len() - 1) as i32
    }

    /// A stack of `locations`, leaf first.
    fn stack(&mut self, locations: &[i32]) -> i32 {
        self.0.stack_table.push(Stack {
            location_indices: locations.to_vec(),
        });
        (self.0.stack_table.len() - 1) as i32
    }

    fn value_type(&mut self, t: &str, unit: &str) -> ValueType {
        ValueType {
            type_strindex: self.s(t),
            unit_strindex: self.s(unit),
        }
    }

    /// A CPU profile as the eBPF profiler sends it: 20 Hz, a timestamp
    /// per event.
    fn cpu_profile(&mut self, samples: Vec<Sample>) -> Profile {
        Profile {
            sample_type: Some(self.value_type("samples", "count")),
            period_type: Some(self.value_type("cpu", "nanoseconds")),
            period: 50_000_000,
            time_unix_nano: T0,
            duration_nano: 5 * SECOND,
            samples,
            ..Profile::default()
        }
    }
}

fn sample(stack: i32, attributes: Vec<i32>, timestamps: Vec<u64>) -> Sample {
    Sample {
        stack_index: stack,
        attribute_indices: attributes,
        link_index: 0,
        values: vec![],
        timestamps_unix_nano: timestamps,
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn request(
    dict: Dict,
    resource: Vec<KeyValue>,
    profiles: Vec<Profile>,
) -> ExportProfilesServiceRequest {
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "ebpf-profiler".into(),
                    ..InstrumentationScope::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.0),
    }
}

fn convert(request: &ExportProfilesServiceRequest) -> OtlpImported {
    import(&request.encode_to_vec(), &options()).unwrap_or_else(|e| panic!("{e}"))
}

fn only_batch(imported: &OtlpImported) -> &Batch {
    assert_eq!(imported.batches.len(), 1, "{imported:#?}");
    &imported.batches[0]
}

fn labels_of(batch: &Batch, i: usize) -> &LabelSet {
    let id = batch.samples[i].labels;
    &batch.label_sets.iter().find(|l| l.id == id).unwrap().labels
}

fn named(
    kind: FrameKind,
    function: &str,
    module: Option<&str>,
    file: Option<&str>,
    line: u32,
) -> Frame {
    Frame::Named {
        kind,
        function: function.into(),
        module: module.map(Into::into),
        file: file.map(Into::into),
        line,
    }
}

/// Every frame type the OpenTelemetry profiler sends, each the leaf of a
/// stack under one native `main`, maps to the frame the design tables.
#[test]
fn every_frame_type_maps_to_its_kind() {
    let mut d = Dict::new();
    let exe = d.mapping(
        "/usr/bin/app",
        &[(
            "process.executable.build_id.gnu",
            "0123456789ABCDEF0123456789abcdef01234567",
        )],
    );
    let kernel = d.mapping("vmlinux", &[]);
    let ext4 = d.mapping("ext4", &[]);
    let main = d.location("native", exe, 0x1100, &[]);
    let cases: Vec<(i32, Vec<Frame>)> = vec![
        (
            d.location("native", exe, 0x1234, &[]),
            vec![Frame::Address {
                kind: FrameKind::Native,
                file_id: FileId::from_build_id(&hex("0123456789abcdef0123456789abcdef01234567")),
                addr: 0x1234,
            }],
        ),
        (
            d.location("kernel", kernel, 0x10, &[("do_syscall_64", "", 0)]),
            vec![named(
                FrameKind::Kernel,
                "do_syscall_64",
                Some("[kernel.kallsyms]"),
                None,
                0,
            )],
        ),
        (
            d.location("kernel", ext4, 0x20, &[]),
            vec![named(
                FrameKind::Kernel,
                "[unknown]",
                Some("[ext4]"),
                None,
                0,
            )],
        ),
        (
            d.location("go", exe, 0x30, &[("main.work", "/src/main.go", 12)]),
            vec![named(
                FrameKind::Go,
                "main.work",
                Some("app"),
                Some("/src/main.go"),
                12,
            )],
        ),
        (
            d.location("cpython", 0, 0, &[("parse", "/app/p.py", 7)]),
            vec![named(
                FrameKind::Python,
                "parse",
                None,
                Some("/app/p.py"),
                7,
            )],
        ),
        (
            d.location("php", 0, 0, &[("handle", "index.php", 3)]),
            vec![named(FrameKind::Php, "handle", None, Some("index.php"), 3)],
        ),
        (
            d.location("jvm", 0, 0, &[("com.x.Main.run", "Main.java", 9)]),
            vec![named(
                FrameKind::Jvm,
                "com.x.Main.run",
                None,
                Some("Main.java"),
                9,
            )],
        ),
        (
            d.location("ruby", 0, 0, &[("each", "a.rb", 1)]),
            vec![named(FrameKind::Ruby, "each", None, Some("a.rb"), 1)],
        ),
        (
            d.location("perl", 0, 0, &[("main::go", "a.pl", 2)]),
            vec![named(FrameKind::Perl, "main::go", None, Some("a.pl"), 2)],
        ),
        (
            d.location("v8js", 0, 0, &[("onRequest", "server.js", 4)]),
            vec![named(
                FrameKind::V8,
                "onRequest",
                None,
                Some("server.js"),
                4,
            )],
        ),
        (
            d.location("dotnet", 0, 0, &[("Program.Main", "P.cs", 5)]),
            vec![named(
                FrameKind::Dotnet,
                "Program.Main",
                None,
                Some("P.cs"),
                5,
            )],
        ),
        (
            d.location("beam", 0, 0, &[("gen_server:loop/7", "gen_server.erl", 6)]),
            vec![named(
                FrameKind::Beam,
                "gen_server:loop/7",
                None,
                Some("gen_server.erl"),
                6,
            )],
        ),
        (
            d.location("unknown", exe, 0x40, &[]),
            vec![Frame::Address {
                kind: FrameKind::Native,
                file_id: FileId::from_build_id(&hex("0123456789abcdef0123456789abcdef01234567")),
                addr: 0x40,
            }],
        ),
        (
            d.location("abort-marker", 0, 0, &[]),
            vec![Frame::named(FrameKind::Truncated, "[unwinding aborted]")],
        ),
        (
            d.location("cpython", 0, 0, &[]),
            vec![Frame::named(FrameKind::Python, "[cpython: unknown]")],
        ),
    ];
    let mut samples = Vec::new();
    for (i, (location, _)) in cases.iter().enumerate() {
        let stack = d.stack(&[*location, main]);
        samples.push(sample(stack, vec![], vec![T0 + i as u64 * SECOND]));
    }
    let profile = d.cpu_profile(samples);
    let imported = convert(&request(d, vec![], vec![profile]));
    assert_eq!(imported.rejected_profiles, 0, "{:?}", imported.problems);
    let batch = only_batch(&imported);
    assert_eq!(batch.period_ns, 50_000_000);
    assert_eq!(batch.source, "otlp");
    assert_eq!(batch.samples.len(), cases.len());
    for (i, (_, leaf)) in cases.iter().enumerate() {
        // Samples are in time order, one second apart.
        let frames = stack_frames(batch, i);
        assert_eq!(&frames[1..], &leaf[..], "case {i}");
        assert!(matches!(frames[0], Frame::Address { addr: 0x1100, .. }));
    }
    // The executable with a GNU build id is recorded for the symbolizer.
    assert_eq!(batch.executables.len(), 1);
    assert_eq!(batch.executables[0].name, "app");
    assert_eq!(
        batch.executables[0].build_id.as_deref(),
        Some("0123456789abcdef0123456789abcdef01234567")
    );
    // Every kind survives the wire.
    let decoded = Batch::decode(&batch.encode()).unwrap();
    assert_eq!(&decoded, batch);
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn native_frames_without_a_gnu_build_id() {
    let mut d = Dict::new();
    let htl = d.mapping(
        "libx.so",
        &[(
            "process.executable.build_id.htlhash",
            "00112233445566778899aabbccddeeff",
        )],
    );
    let plain = d.mapping("/lib/liby.so", &[]);
    let a = d.location("native", htl, 0x10, &[]);
    let b = d.location("native", plain, 0x20, &[]);
    let c = d.location("native", 0, 0x30, &[]);
    let stack = d.stack(&[c, b, a]);
    let profile = d.cpu_profile(vec![sample(stack, vec![], vec![T0])]);
    let imported = convert(&request(d, vec![], vec![profile]));
    let batch = only_batch(&imported);
    assert_eq!(
        stack_frames(batch, 0),
        [
            Frame::Address {
                kind: FrameKind::Native,
                file_id: FileId::from_build_id(&hex("00112233445566778899aabbccddeeff")),
                addr: 0x10
            },
            named(FrameKind::Native, "0x20", Some("liby.so"), None, 0),
            Frame::named(FrameKind::Native, "[unknown]"),
        ]
    );
    // Only GNU build ids name an executable debuginfod knows.
    assert!(batch.executables.is_empty());
}

/// Several lines in a location are a call and what was inlined into it,
/// innermost first: frames root first, each with its file and line.
#[test]
fn inline_lines_are_frames_of_their_own() {
    let mut d = Dict::new();
    let exe = d.mapping("app", &[]);
    let loc = d.location(
        "native",
        exe,
        0x99,
        &[
            ("inlined_leaf", "a.c", 30),
            ("inlined_mid", "a.c", 20),
            ("outer", "b.c", 10),
        ],
    );
    let stack = d.stack(&[loc]);
    let profile = d.cpu_profile(vec![sample(stack, vec![], vec![T0])]);
    let batch = convert(&request(d, vec![], vec![profile]))
        .batches
        .remove(0);
    assert_eq!(
        stack_frames(&batch, 0),
        [
            named(FrameKind::Native, "outer", Some("app"), Some("b.c"), 10),
            named(
                FrameKind::Native,
                "inlined_mid",
                Some("app"),
                Some("a.c"),
                20
            ),
            named(
                FrameKind::Native,
                "inlined_leaf",
                Some("app"),
                Some("a.c"),
                30
            ),
        ]
    );
}

/// Index 0 is "none" everywhere: an empty stack, no mapping, no function,
/// no attribute.
#[test]
fn index_zero_means_none() {
    let mut d = Dict::new();
    d.0.location_table.push(Location {
        mapping_index: 0,
        address: 0x77,
        lines: vec![Line {
            function_index: 0,
            line: 5,
            column: 0,
        }],
        attribute_indices: vec![0],
    });
    let loc = (d.0.location_table.len() - 1) as i32;
    let stack = d.stack(&[loc, 0]);
    let profile = d.cpu_profile(vec![
        sample(0, vec![0], vec![T0, T0 + 1]),
        sample(stack, vec![], vec![T0]),
    ]);
    let imported = convert(&request(d, vec![], vec![profile]));
    let batch = only_batch(&imported);
    let lines = collapsed(batch);
    assert_eq!(lines.get("[no stack]"), Some(&2), "{lines:?}");
    assert_eq!(lines.get("0x77"), Some(&1), "{lines:?}");
    assert!(labels_of(batch, 0).is_empty());
}

#[test]
fn attributes_become_labels() {
    let mut d = Dict::new();
    let loc = d.location("cpython", 0, 0, &[("f", "f.py", 1)]);
    let stack = d.stack(&[loc]);
    let thread = d.str_attr("thread.name", "worker-1");
    let tid = d.attr("thread.id", any_value::Value::IntValue(42));
    let cpu = d.attr("cpu.logical_number", any_value::Value::IntValue(3));
    let custom = d.attr(
        "process.context.label.user",
        any_value::Value::BoolValue(true),
    );
    let strindex_value = d.s("frontend");
    let tier = d.attr(
        "tier",
        any_value::Value::StringValueStrindex(strindex_value),
    );
    let array = d.attr("tags", any_value::Value::ArrayValue(Default::default()));
    let ratio = d.attr("ratio", any_value::Value::DoubleValue(0.25));
    let mut profile = d.cpu_profile(vec![sample(
        stack,
        vec![thread, tid, cpu, custom, array, ratio],
        vec![T0],
    )]);
    profile.attribute_indices = vec![tier];
    let pod_key = d.s("k8s.pod.name");
    let resource = vec![
        kv("host.name", "web-1"),
        kv("service.name", "checkout"),
        kv("container.id", "abc123"),
        kv("k8s.container.name", "api"),
        kv("k8s.namespace.name", "prod"),
        kv("k8s.deployment.name", "checkout-v2"),
        kv("process.pid", "1234"),
        kv("process.executable.name", "python3"),
        kv("process.executable.path", "/usr/bin/python3"),
        kv("container.id", ""),
        KeyValue {
            key: String::new(),
            key_strindex: pod_key,
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("checkout-7d9".into())),
            }),
        },
    ];
    let imported = convert(&request(d, resource, vec![profile]));
    let batch = only_batch(&imported);
    assert_eq!(batch.source, "web-1");
    let labels: BTreeMap<_, _> = labels_of(batch, 0).iter().collect();
    let expected: BTreeMap<_, _> = [
        ("host", "web-1"),
        ("service", "checkout"),
        ("container_name", "api"),
        ("namespace", "prod"),
        ("k8s.deployment.name", "checkout-v2"),
        ("pid", "1234"),
        ("process", "python3"),
        ("pod", "checkout-7d9"),
        ("thread", "worker-1"),
        ("tid", "42"),
        ("process.context.label.user", "true"),
        ("tier", "frontend"),
        ("ratio", "0.25"),
    ]
    .into_iter()
    .collect();
    assert_eq!(labels, expected);
    assert!(
        imported.warnings.iter().any(|w| w.contains("\"tags\"")),
        "{:?}",
        imported.warnings
    );
}

#[test]
fn timestamps_values_and_windows_weigh_samples() {
    let mut d = Dict::new();
    let loc = d.location("go", 0, 0, &[("main.f", "m.go", 1)]);
    let stack = d.stack(&[loc]);
    let cpu = d.cpu_profile(vec![
        // Two events in one second are one row of 2, at their mean time
        // (a second split between two requests stays two rows).
        sample(stack, vec![], vec![T0 + 100, T0 + 900_000_000, T0 + SECOND]),
    ]);
    let mut off_cpu = d.cpu_profile(vec![Sample {
        values: vec![300, 0, 700],
        timestamps_unix_nano: vec![T0, T0, T0 + 2 * SECOND],
        ..sample(stack, vec![], vec![])
    }]);
    off_cpu.sample_type = Some(d.value_type("off_cpu", "nanoseconds"));
    off_cpu.period_type = None;
    off_cpu.period = 0;
    // Values alone spread over the profile's window: 4 s, 8 ns.
    let mut cpu_ns = d.cpu_profile(vec![Sample {
        values: vec![5, 3],
        ..sample(stack, vec![], vec![])
    }]);
    cpu_ns.sample_type = Some(d.value_type("cpu", "nanoseconds"));
    cpu_ns.duration_nano = 4 * SECOND;
    let imported = convert(&request(d, vec![], vec![cpu, off_cpu, cpu_ns]));
    assert_eq!(imported.rejected_profiles, 0, "{:?}", imported.problems);
    // The CPU profile's period, then period 1 for both nanosecond ones.
    assert_eq!(imported.batches.len(), 2);
    let cpu = &imported.batches[0];
    assert_eq!(cpu.period_ns, 50_000_000);
    let rows: Vec<_> = cpu
        .samples
        .iter()
        .map(|s| (s.timestamp_ns as u64, s.count))
        .collect();
    assert_eq!(rows, [(T0 + 450_000_050, 2), (T0 + SECOND, 1)]);
    let ns = &imported.batches[1];
    assert_eq!(ns.period_ns, 1);
    let mut off = Vec::new();
    let mut on = Vec::new();
    for (i, s) in ns.samples.iter().enumerate() {
        let row = (s.timestamp_ns as u64, s.count);
        match labels_of(ns, i).get("device_kind") {
            Some("off_cpu") => off.push(row),
            _ => on.push(row),
        }
    }
    assert_eq!(off, [(T0, 300), (T0 + 2 * SECOND, 700)]);
    assert_eq!(
        on,
        [
            (T0 + SECOND / 2, 2),
            (T0 + SECOND + SECOND / 2, 2),
            (T0 + 2 * SECOND + SECOND / 2, 2),
            (T0 + 3 * SECOND + SECOND / 2, 2)
        ]
    );
    assert_eq!(imported.samples, 3 + 1000 + 8);
    assert_eq!(imported.sample_rows, 2 + 6);
}

/// Samples with no usable period are taken as 100 Hz, with a warning;
/// other profile types are kept under their `sample_type`, in their own
/// unit (period 1), snapshots stamped at the profile's end; a type without
/// a name is refused alone.
#[test]
fn sample_types_other_than_cpu_are_kept_under_their_type() {
    let mut d = Dict::new();
    let loc = d.location("go", 0, 0, &[("main.f", "m.go", 1)]);
    let stack = d.stack(&[loc]);
    let other_loc = d.location("go", 0, 0, &[("main.g", "m.go", 2)]);
    let other = d.stack(&[other_loc]);
    let mut no_period = d.cpu_profile(vec![sample(stack, vec![], vec![T0])]);
    no_period.period = 0;
    let mut events = d.cpu_profile(vec![sample(stack, vec![], vec![T0, T0 + 2])]);
    events.sample_type = Some(d.value_type("events", "count"));
    let mut heap = d.cpu_profile(vec![
        Sample {
            values: vec![4096],
            ..sample(stack, vec![], vec![])
        },
        Sample {
            values: vec![512],
            ..sample(other, vec![], vec![])
        },
    ]);
    heap.sample_type = Some(d.value_type("inuse_space", "bytes"));
    heap.duration_nano = 10 * SECOND;
    let mut unnamed = d.cpu_profile(vec![sample(stack, vec![], vec![T0])]);
    unnamed.sample_type = Some(d.value_type("", "bytes"));
    let imported = convert(&request(d, vec![], vec![no_period, events, heap, unnamed]));
    assert_eq!((imported.profiles, imported.rejected_profiles), (4, 1));
    assert_eq!(imported.batches.len(), 2, "{imported:#?}");
    assert_eq!(imported.batches[0].period_ns, 10_000_000);
    let typed = &imported.batches[1];
    assert_eq!(typed.period_ns, 1);
    let mut rows: Vec<(String, u64, u64)> = typed
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let kind = labels_of(typed, i).get("sample_type").unwrap().to_owned();
            (kind, s.timestamp_ns as u64, s.count)
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            ("events".to_owned(), T0 + 1, 2),
            // A snapshot: every stack at the profile's end.
            ("inuse_space".to_owned(), T0 + 10 * SECOND, 512),
            ("inuse_space".to_owned(), T0 + 10 * SECOND, 4096),
        ]
    );
    let partial = imported.partial_success().unwrap();
    assert_eq!(partial.rejected_profiles, 1);
    assert!(
        partial.error_message.starts_with(
            "1 of 4 profiles rejected: resourceProfiles[0].scopeProfiles[0].profiles[3]: \
             profile type \"\"/bytes has no name"
        ),
        "{}",
        partial.error_message
    );
}

/// A bad index refuses its profile, naming the field; the request's other
/// profiles are kept.
#[test]
fn bad_indices_refuse_their_profile_only() {
    let mut d = Dict::new();
    let loc = d.location("native", 0, 0x1, &[]);
    let good = d.stack(&[loc]);
    let bad_location = d.stack(&[loc, 99]);
    d.0.location_table.push(Location {
        mapping_index: 50,
        ..Location::default()
    });
    let bad_mapping_loc = (d.0.location_table.len() - 1) as i32;
    let bad_mapping = d.stack(&[bad_mapping_loc]);
    d.0.location_table.push(Location {
        lines: vec![Line {
            function_index: 70,
            line: 1,
            column: 0,
        }],
        ..Location::default()
    });
    let bad_function_loc = (d.0.location_table.len() - 1) as i32;
    let bad_function = d.stack(&[bad_function_loc]);
    let profiles = vec![
        d.cpu_profile(vec![sample(good, vec![], vec![T0])]),
        d.cpu_profile(vec![
            sample(good, vec![], vec![T0]),
            sample(40, vec![], vec![T0]),
        ]),
        d.cpu_profile(vec![sample(good, vec![-1], vec![T0])]),
        d.cpu_profile(vec![sample(bad_location, vec![], vec![T0])]),
        d.cpu_profile(vec![sample(bad_mapping, vec![], vec![T0])]),
        d.cpu_profile(vec![sample(bad_function, vec![], vec![T0])]),
        d.cpu_profile(vec![Sample {
            values: vec![1, 2],
            ..sample(good, vec![], vec![T0])
        }]),
        d.cpu_profile(vec![Sample {
            values: vec![-5],
            ..sample(good, vec![], vec![T0])
        }]),
        d.cpu_profile(vec![Sample {
            values: vec![i64::MAX, i64::MAX, i64::MAX],
            ..sample(good, vec![], vec![])
        }]),
    ];
    let imported = convert(&request(d, vec![], profiles));
    assert_eq!((imported.profiles, imported.rejected_profiles), (9, 8));
    assert_eq!(imported.samples, 1);
    let p = |i: usize| format!("resourceProfiles[0].scopeProfiles[0].profiles[{i}]: ");
    let expected = [
        format!(
            "{}samples[1].stackIndex is 40, but dictionary.stackTable has 5 entries",
            p(1)
        ),
        format!(
            "{}samples[0].attributeIndices[0] is -1, but dictionary.attributeTable has 2 entries",
            p(2)
        ),
        format!(
            "{}dictionary.stackTable[2].locationIndices[1] is 99, but dictionary.locationTable has 4 entries",
            p(3)
        ),
        format!(
            "{}dictionary.locationTable[2].mappingIndex is 50, but dictionary.mappingTable has 1 entries",
            p(4)
        ),
        format!(
            "{}dictionary.locationTable[3].lines[0].functionIndex is 70, but dictionary.functionTable has 1 entries",
            p(5)
        ),
        format!(
            "{}samples[0] has 2 values and 1 timestamps; each value is the event at the timestamp of the same index",
            p(6)
        ),
        format!("{}samples[0] has a negative value -5", p(7)),
        format!(
            "{}the profile's values add up to more than {}",
            p(8),
            u64::MAX
        ),
    ];
    assert_eq!(imported.problems, expected);
    assert_eq!(collapsed(only_batch(&imported)).get("[unknown]"), Some(&1));
}

/// A request in opentelemetry-proto 1.9.0's `Sample` layout converts to
/// the same batches as its 1.10.0 twin, with a note saying so.
#[test]
fn both_layouts_convert_to_the_same_batches() {
    let mut d = Dict::new();
    let exe = d.mapping("app", &[("process.executable.build_id.gnu", "aabbccdd")]);
    let a = d.location("native", exe, 0x10, &[]);
    let b = d.location("kernel", 0, 0x20, &[("schedule", "", 0)]);
    let stack = d.stack(&[b, a]);
    let thread = d.str_attr("thread.name", "t1");
    let other = d.str_attr("thread.name", "t2");
    let mut profile = d.cpu_profile(vec![
        sample(stack, vec![thread], vec![T0, T0 + SECOND]),
        Sample {
            link_index: 0,
            values: vec![4, 6],
            ..sample(stack, vec![other], vec![T0, T0 + 2 * SECOND])
        },
    ]);
    profile.sample_type = Some(d.value_type("off_cpu", "nanoseconds"));
    let new = request(d, vec![kv("host.name", "h")], vec![profile]).encode_to_vec();
    let old = downgrade_to_v1_9(&new);
    assert_ne!(old, new);
    let from_new = import(&new, &options()).unwrap();
    let from_old = import(&old, &options()).unwrap();
    assert_eq!(from_new.layout, Layout::V1_10);
    assert_eq!(from_old.layout, Layout::V1_9);
    assert_eq!(from_new.batches, from_old.batches);
    assert_eq!(from_new.samples, 1 + 1 + 4 + 6);
    assert!(from_new.partial_success().is_none());
    let note = from_old.partial_success().unwrap();
    assert_eq!(note.rejected_profiles, 0);
    assert!(
        note.error_message.contains("opentelemetry-proto 1.9.0"),
        "{}",
        note.error_message
    );
}

#[test]
fn malformed_requests_are_refused_whole() {
    assert!(matches!(import(&[], &options()), Err(OtlpError::Empty)));
    let e = import(&[0x0a, 0x05, 0x01], &options()).unwrap_err();
    assert!(matches!(e, OtlpError::Decode(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with("not a valid OTLP ExportProfilesServiceRequest")
    );
    let e = import(
        &ExportProfilesServiceRequest::default().encode_to_vec(),
        &options(),
    );
    // An empty message is no bytes at all.
    assert!(matches!(e, Err(OtlpError::Empty)));
    let e = import(&[0x12, 0x00], &options()).unwrap_err();
    assert!(matches!(e, OtlpError::NoProfiles), "{e}");
    // A v1.9.0 sample and a v1.10.0 sample in one request.
    let mixed = wrap(
        1,
        &wrap(
            2,
            &wrap(
                2,
                &[wrap(2, &[0x1a, 0x01, 0x01]), wrap(2, &[0x22, 0x01, 0x01])].concat(),
            ),
        ),
    );
    assert!(matches!(
        import(&mixed, &options()),
        Err(OtlpError::MixedLayouts)
    ));
}

// ---- limits: one past each is refused by name, before decoding ----

/// `bytes` as field `field`, length-delimited.
fn wrap(field: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 12);
    varint(&mut out, field << 3 | 2);
    varint(&mut out, bytes.len() as u64);
    out.extend_from_slice(bytes);
    out
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `n` empty occurrences of length-delimited field `field`.
fn empties(field: u64, n: usize) -> Vec<u8> {
    wrap(field, &[]).repeat(n)
}

/// A request whose one profile holds `profile`'s bytes.
fn in_profile(profile: &[u8]) -> Vec<u8> {
    wrap(1, &wrap(2, &wrap(2, profile)))
}

fn too_many(bytes: &[u8]) -> Option<(&'static str, usize)> {
    match import(bytes, &options()) {
        Err(OtlpError::TooMany { what, limit }) => Some((what, limit)),
        _ => None,
    }
}

/// Makes a request with `n` of something.
type Make = Box<dyn Fn(usize) -> Vec<u8>>;

#[test]
fn limits_refuse_one_past_each() {
    let cases: Vec<(&str, usize, Make)> = vec![
        ("resourceProfiles", 1 << 14, Box::new(|n| empties(1, n))),
        (
            "profiles",
            1 << 16,
            Box::new(|n| wrap(1, &wrap(2, &empties(2, n)))),
        ),
        ("samples", 1 << 20, Box::new(|n| in_profile(&empties(2, n)))),
        ("mappings", 1 << 16, Box::new(|n| wrap(2, &empties(1, n)))),
        ("locations", 1 << 20, Box::new(|n| wrap(2, &empties(2, n)))),
        ("functions", 1 << 20, Box::new(|n| wrap(2, &empties(3, n)))),
        ("links", 1 << 20, Box::new(|n| wrap(2, &empties(4, n)))),
        ("strings", 1 << 21, Box::new(|n| wrap(2, &empties(5, n)))),
        (
            "attributes in the attribute table",
            1 << 20,
            Box::new(|n| wrap(2, &empties(6, n))),
        ),
        ("stacks", 1 << 20, Box::new(|n| wrap(2, &empties(7, n)))),
        (
            "location indices in stacks",
            1 << 23,
            Box::new(|n| wrap(2, &wrap(7, &wrap(1, &vec![1u8; n])))),
        ),
        (
            "lines in locations",
            1 << 22,
            Box::new(|n| {
                // 4096 lines per location at most: spread them.
                let full = wrap(2, &empties(3, 4096));
                let mut dict = full.repeat(n / 4096);
                dict.extend(wrap(2, &empties(3, n % 4096)));
                wrap(2, &dict)
            }),
        ),
        (
            "values, timestamps and attribute indices in samples",
            1 << 23,
            Box::new(|n| in_profile(&wrap(2, &wrap(4, &vec![1u8; n])))),
        ),
        (
            "attribute indices of locations, mappings and profiles",
            1 << 22,
            Box::new(|n| in_profile(&wrap(11, &vec![1u8; n]))),
        ),
        (
            "attribute values",
            1 << 22,
            Box::new(|n| {
                // One attribute whose value is an array of n - 1 values.
                wrap(2, &wrap(6, &wrap(2, &wrap(5, &empties(1, n - 1)))))
            }),
        ),
        (
            "attributes in one resource or scope",
            1024,
            Box::new(|n| wrap(1, &wrap(1, &empties(1, n)))),
        ),
    ];
    for (what, limit, make) in cases {
        assert_eq!(
            too_many(&make(limit + 1)),
            Some((what, limit)),
            "{what} one past"
        );
        assert_eq!(too_many(&make(limit)), None, "{what} at the limit");
    }
}

#[test]
fn per_location_lines_and_value_depth_are_bounded() {
    let lines = wrap(2, &wrap(2, &empties(3, 4097)));
    let e = import(&lines, &options()).unwrap_err();
    assert!(
        matches!(
            e,
            OtlpError::LocationLines {
                location: 0,
                limit: 4096
            }
        ),
        "{e}"
    );
    // AnyValue { array_value: ArrayValue { values: [AnyValue { … }] } },
    // nested nine deep under an attribute.
    let mut value = Vec::new();
    for _ in 0..9 {
        value = wrap(5, &wrap(1, &value));
    }
    let deep = wrap(2, &wrap(6, &wrap(2, &value)));
    let e = import(&deep, &options()).unwrap_err();
    assert!(matches!(e, OtlpError::TooDeep { limit: 8 }), "{e}");
}
