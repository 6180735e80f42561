//! Seeds of the `otlp_decode` and `otlp_json` fuzz targets
//! (`fuzz/seeds/otlp_decode/`, `fuzz/seeds/otlp_json/`): requests this
//! build converts whole, so the fuzzer starts deep in the conversion
//! rather than at the decoder's refusals. The JSON seeds are the
//! hand-written requests of `tests/data/otlp/`.
//! `KILN_WRITE_FIXTURES=1 cargo test -p kiln-formats --test fuzz_seeds`
//! writes them again.

use std::path::PathBuf;

use kiln_formats::otlp::proto::collector::ExportProfilesServiceRequest;
use kiln_formats::otlp::proto::common::{AnyValue, KeyValue, any_value};
use kiln_formats::otlp::proto::profiles::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use kiln_formats::otlp::proto::resource::Resource;
use kiln_formats::otlp::{OtlpOptions, downgrade_to_v1_9, import, import_json};
use prost::Message;

fn seeds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/otlp_decode")
}

fn string(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.into())),
    })
}

/// Strings of the dictionary below, by index.
const STRINGS: [&str; 17] = [
    "",
    "profile.frame.type",
    "native",
    "kernel",
    "cpython",
    "process.executable.build_id.gnu",
    "app",
    "vmlinux",
    "do_syscall_64",
    "handle",
    "app.py",
    "thread.name",
    "samples",
    "count",
    "cpu",
    "nanoseconds",
    "off_cpu",
];

/// A request of a native, a kernel and a Python frame (inlined lines),
/// attributes by value and by string index, a CPU profile with a
/// timestamp per event and an off-CPU one with values.
fn every_kind() -> ExportProfilesServiceRequest {
    let attribute = |key: i32, value: any_value::Value| KeyValueAndUnit {
        key_strindex: key,
        value: Some(AnyValue { value: Some(value) }),
        unit_strindex: 0,
    };
    let dictionary = ProfilesDictionary {
        string_table: STRINGS.iter().map(|s| s.to_string()).collect(),
        attribute_table: vec![
            KeyValueAndUnit::default(),
            attribute(1, any_value::Value::StringValueStrindex(2)),
            attribute(1, any_value::Value::StringValueStrindex(3)),
            attribute(1, any_value::Value::StringValueStrindex(4)),
            attribute(5, any_value::Value::StringValue("0123456789abcdef".into())),
            attribute(11, any_value::Value::StringValue("worker".into())),
        ],
        mapping_table: vec![
            Mapping::default(),
            Mapping {
                memory_start: 0x1000,
                memory_limit: 0x9000,
                file_offset: 0,
                filename_strindex: 6,
                attribute_indices: vec![4],
            },
            Mapping {
                filename_strindex: 7,
                ..Mapping::default()
            },
        ],
        function_table: vec![
            Function::default(),
            Function {
                name_strindex: 8,
                ..Function::default()
            },
            Function {
                name_strindex: 9,
                filename_strindex: 10,
                ..Function::default()
            },
        ],
        location_table: vec![
            Location::default(),
            Location {
                mapping_index: 1,
                address: 0x1234,
                lines: vec![],
                attribute_indices: vec![1],
            },
            Location {
                mapping_index: 2,
                address: 0x10,
                lines: vec![Line {
                    function_index: 1,
                    line: 0,
                    column: 0,
                }],
                attribute_indices: vec![2],
            },
            Location {
                mapping_index: 0,
                address: 0,
                lines: vec![
                    Line {
                        function_index: 2,
                        line: 12,
                        column: 1,
                    },
                    Line {
                        function_index: 2,
                        line: 40,
                        column: 1,
                    },
                ],
                attribute_indices: vec![3],
            },
        ],
        stack_table: vec![
            Stack::default(),
            Stack {
                location_indices: vec![2, 3, 1],
            },
        ],
        link_table: vec![Default::default()],
    };
    let t0 = 1_699_999_000_000_000_000u64;
    let cpu = Profile {
        sample_type: Some(ValueType {
            type_strindex: 12,
            unit_strindex: 13,
        }),
        period_type: Some(ValueType {
            type_strindex: 14,
            unit_strindex: 15,
        }),
        period: 50_000_000,
        time_unix_nano: t0,
        duration_nano: 5_000_000_000,
        samples: vec![
            Sample {
                stack_index: 1,
                attribute_indices: vec![5],
                link_index: 0,
                values: vec![],
                timestamps_unix_nano: vec![t0, t0 + 1, t0 + 2_000_000_000],
            },
            Sample::default(),
        ],
        ..Profile::default()
    };
    let off_cpu = Profile {
        sample_type: Some(ValueType {
            type_strindex: 16,
            unit_strindex: 15,
        }),
        time_unix_nano: t0,
        duration_nano: 3_000_000_000,
        samples: vec![Sample {
            stack_index: 1,
            attribute_indices: vec![5],
            link_index: 0,
            values: vec![3_000, 5],
            timestamps_unix_nano: vec![],
        }],
        ..Profile::default()
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![
                    KeyValue {
                        key: "host.name".into(),
                        value: string("host-a"),
                        key_strindex: 0,
                    },
                    KeyValue {
                        key: String::new(),
                        value: string("svc"),
                        key_strindex: 11,
                    },
                ],
                ..Resource::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![cpu, off_cpu],
                ..ScopeProfiles::default()
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dictionary),
    }
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let v1_10 = every_kind().encode_to_vec();
    let v1_9 = downgrade_to_v1_9(&v1_10);
    vec![("every_kind.pb", v1_10), ("every_kind_v1_9.pb", v1_9)]
}

#[test]
fn every_otlp_decode_seed_converts_whole() {
    let dir = seeds_dir();
    if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let options = OtlpOptions {
        now_ns: 1_700_000_000_000_000_000,
    };
    for (name, expected) in seeds() {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(
            bytes, expected,
            "{name} is stale: rerun with KILN_WRITE_FIXTURES=1"
        );
        let imported = import(&bytes, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            imported.rejected_profiles, 0,
            "{name}: {:?}",
            imported.problems
        );
        assert_eq!(imported.samples, 3 + 3_005, "{name}");
    }
}

#[test]
fn every_otlp_json_seed_converts_whole() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/otlp_json");
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/otlp");
    let options = OtlpOptions {
        now_ns: 1_700_000_000_000_000_000,
    };
    for name in ["small.json", "every_field.json"] {
        let expected = std::fs::read(data.join(name)).unwrap();
        if std::env::var_os("KILN_WRITE_FIXTURES").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), &expected).unwrap();
        }
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(
            bytes, expected,
            "{name} is stale: rerun with KILN_WRITE_FIXTURES=1"
        );
        let imported = import_json(&bytes, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            imported.rejected_profiles, 0,
            "{name}: {:?}",
            imported.problems
        );
        assert!(imported.samples > 0, "{name}");
    }
}
