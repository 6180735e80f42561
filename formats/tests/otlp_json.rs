//! OTLP/JSON requests: hand-written JSON (`data/otlp/*.json`) decodes to
//! exactly the request its protobuf twin is, converts to the same
//! batches, and a malformed one is refused naming the field's path.

mod common;

use common::{NOW_NS, collapsed};
use kiln_formats::otlp::proto::collector::ExportProfilesServiceRequest;
use kiln_formats::otlp::proto::common::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use kiln_formats::otlp::proto::profiles::{
    Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use kiln_formats::otlp::proto::resource::Resource;
use kiln_formats::otlp::{
    OtlpError, OtlpImported, OtlpOptions, import, import_json, transcode_json,
};
use prost::Message;

const T0: u64 = 1_699_999_000_000_000_000;

fn options() -> OtlpOptions {
    OtlpOptions { now_ns: NOW_NS }
}

fn data(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/otlp/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn any(value: any_value::Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}

fn kv(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value,
        key_strindex: 0,
    }
}

fn string(s: &str) -> Option<AnyValue> {
    any(any_value::Value::StringValue(s.into()))
}

/// The request `every_field.json` spells: every field of every message,
/// in both names, 64-bit integers as strings and numbers.
fn every_field() -> ExportProfilesServiceRequest {
    use any_value::Value as V;
    let resource = Resource {
        attributes: vec![
            kv("service.name", string("checkout")),
            kv("host.name", string("web-1")),
            kv("flag", any(V::BoolValue(true))),
            kv("negative", any(V::IntValue(-42))),
            kv("number", any(V::IntValue(7))),
            kv("zero", any(V::IntValue(0))),
            kv("ratio", any(V::DoubleValue(1.5))),
            kv("whole", any(V::DoubleValue(2.0))),
            kv("infinite", any(V::DoubleValue(f64::NEG_INFINITY))),
            kv(
                "list",
                any(V::ArrayValue(ArrayValue {
                    values: vec![string("x").unwrap(), any(V::IntValue(1)).unwrap()],
                })),
            ),
            kv(
                "map",
                any(V::KvlistValue(KeyValueList {
                    values: vec![kv("k", string("v"))],
                })),
            ),
            kv("raw", any(V::BytesValue(b"hi".to_vec()))),
            kv("absent", None),
            kv("bare", None),
        ],
        dropped_attributes_count: 1,
        entity_refs: vec![EntityRef {
            schema_url: "https://example.com/s".into(),
            r#type: "host".into(),
            id_keys: vec!["host.name".into()],
            description_keys: vec!["host.arch".into(), "os.type".into()],
        }],
    };
    let scope = InstrumentationScope {
        name: "ebpf-profiler".into(),
        version: "v0.0.202633".into(),
        attributes: vec![KeyValue {
            key: String::new(),
            value: any(V::StringValueStrindex(12)),
            key_strindex: 11,
        }],
        dropped_attributes_count: 3,
    };
    let sample =
        |stack_index, attribute_indices: Vec<i32>, link_index, timestamps: Vec<u64>| Sample {
            stack_index,
            attribute_indices,
            link_index,
            values: vec![],
            timestamps_unix_nano: timestamps,
        };
    let profile = Profile {
        sample_type: Some(ValueType {
            type_strindex: 3,
            unit_strindex: 4,
        }),
        samples: vec![
            sample(
                1,
                vec![2],
                0,
                vec![T0, T0 + 100_000_000, T0 + 1_000_000_000],
            ),
            sample(2, vec![2], 1, vec![T0 + 2_000_000_000]),
            sample(1, vec![], 0, vec![T0 + 2_500_000_000]),
        ],
        time_unix_nano: T0,
        duration_nano: 5_000_000_000,
        period_type: Some(ValueType {
            type_strindex: 5,
            unit_strindex: 6,
        }),
        period: 50_000_000,
        profile_id: (1..=16).collect(),
        dropped_attributes_count: 0,
        original_payload_format: "pprof".into(),
        // Not transcoded: Kiln does not keep it.
        original_payload: vec![],
        attribute_indices: vec![3],
    };
    let schema_url = "https://opentelemetry.io/schemas/1.27.0".to_owned();
    let strings = [
        "",
        "profile.frame.type",
        "go",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "main.work",
        "/src/main.go",
        "main.serve",
        "main.main",
        "scope.attr",
        "scope value",
        "/usr/bin/app",
        "thread.name",
        "worker",
        "kiln.test",
        "process.executable.build_id.gnu",
    ];
    let attribute = |key_strindex, value, unit_strindex| KeyValueAndUnit {
        key_strindex,
        value,
        unit_strindex,
    };
    let line = |function_index, line, column| Line {
        function_index,
        line,
        column,
    };
    let function = |name_strindex, system_name_strindex, start_line| Function {
        name_strindex,
        system_name_strindex,
        filename_strindex: 8,
        start_line,
    };
    let dictionary = ProfilesDictionary {
        mapping_table: vec![
            Mapping::default(),
            Mapping {
                memory_start: 0x1000,
                memory_limit: 0x9000,
                file_offset: 0,
                filename_strindex: 13,
                attribute_indices: vec![4],
            },
        ],
        location_table: vec![
            Location::default(),
            Location {
                mapping_index: 1,
                address: 0x1234,
                lines: vec![line(1, 12, 3), line(2, 40, 0)],
                attribute_indices: vec![1],
            },
            Location {
                mapping_index: 1,
                address: 0x1100,
                lines: vec![line(3, 0, 0)],
                attribute_indices: vec![1],
            },
        ],
        function_table: vec![
            Function::default(),
            function(7, 7, 10),
            function(9, 0, 38),
            function(10, 0, 0),
        ],
        link_table: vec![
            Link::default(),
            Link {
                trace_id: hex("5b8efff798038103d269b633813fc60c"),
                span_id: hex("eee19b7ec3c1b174"),
            },
        ],
        string_table: strings.iter().map(|s| (*s).to_owned()).collect(),
        attribute_table: vec![
            KeyValueAndUnit::default(),
            attribute(1, any(V::StringValueStrindex(2)), 0),
            attribute(14, string("worker"), 0),
            attribute(16, any(V::IntValue(9)), 4),
            attribute(17, string("0123456789abcdef0123456789abcdef01234567"), 0),
        ],
        stack_table: vec![
            Stack::default(),
            Stack {
                location_indices: vec![1, 2],
            },
            Stack {
                location_indices: vec![2],
            },
        ],
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(scope),
                profiles: vec![profile],
                schema_url: schema_url.clone(),
            }],
            schema_url,
        }],
        dictionary: Some(dictionary),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn decoded(json: &[u8]) -> ExportProfilesServiceRequest {
    let wire = transcode_json(json).unwrap_or_else(|e| panic!("{e}"));
    ExportProfilesServiceRequest::decode(&wire[..]).expect("the transcoded bytes decode")
}

fn json_error(json: &str) -> (String, String) {
    match import_json(json.as_bytes(), &options()) {
        Err(OtlpError::Json { path, message, .. }) => (path, message),
        other => panic!("{json}: {other:?}"),
    }
}

#[test]
fn every_field_of_every_message_decodes_as_its_protobuf_twin() {
    let json = data("every_field.json");
    let twin = every_field();
    assert_eq!(decoded(&json), twin);
    let from_json = import_json(&json, &options()).unwrap_or_else(|e| panic!("{e}"));
    let from_protobuf = import(&twin.encode_to_vec(), &options()).unwrap();
    assert_eq!(from_json, from_protobuf);
    assert_eq!(from_json.rejected_profiles, 0, "{from_json:#?}");
    assert_eq!(from_json.samples, 5);
    let mut stacks = std::collections::BTreeMap::new();
    for batch in &from_json.batches {
        for (stack, count) in collapsed(batch) {
            *stacks.entry(stack).or_insert(0) += count;
        }
    }
    assert_eq!(
        stacks,
        [
            ("main.main".to_owned(), 1),
            ("main.main;main.serve;main.work".to_owned(), 4),
        ]
        .into()
    );
}

#[test]
fn zero_values_may_be_omitted_and_unknown_keys_are_ignored() {
    assert_eq!(
        decoded(br#"{"resourceProfiles":[{}],"dictionary":{},"extra":[{"a":1}]}"#),
        ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles::default()],
            dictionary: Some(ProfilesDictionary::default()),
        }
    );
    assert_eq!(
        decoded(br#"{"resourceProfiles":null,"dictionary":null}"#),
        ExportProfilesServiceRequest::default()
    );
}

#[test]
fn integers_take_every_json_form_and_their_ranges() {
    let stack = |indices: &str| {
        let json =
            format!(r#"{{"dictionary":{{"stackTable":[{{"locationIndices":{indices}}}]}}}}"#);
        decoded(json.as_bytes()).dictionary.unwrap().stack_table[0]
            .location_indices
            .clone()
    };
    assert_eq!(
        stack(r#"[1, "2", -3, "-4", 5e0, "2147483647", -2147483648]"#),
        [1, 2, -3, -4, 5, i32::MAX, i32::MIN]
    );
    let mapping = |address: &str| {
        let json = format!(r#"{{"dictionary":{{"mappingTable":[{{"memoryStart":{address}}}]}}}}"#);
        decoded(json.as_bytes()).dictionary.unwrap().mapping_table[0].memory_start
    };
    assert_eq!(mapping("18446744073709551615"), u64::MAX);
    assert_eq!(mapping(r#""18446744073709551615""#), u64::MAX);
    assert_eq!(mapping("9007199254740993"), 9_007_199_254_740_993);
}

#[test]
fn errors_name_the_path_of_the_problem() {
    let cases = [
        (
            r#"{"dictionary":{"locationTable":[{},{},{},{"lines":[{"functionIndex":"x"}]}]}}"#,
            "dictionary.locationTable[3].lines[0].functionIndex",
            "expected a 32-bit integer",
        ),
        (
            r#"{"resourceProfiles":[{"scopeProfiles":[{"profiles":[{"samples":[{},{"timestampsUnixNano":["1", "abc"]}]}]}]}]}"#,
            "resourceProfiles[0].scopeProfiles[0].profiles[0].samples[1].timestampsUnixNano[1]",
            "expected a 64-bit unsigned integer (a number or a decimal string)",
        ),
        (
            r#"{"dictionary":{"stackTable":[{"location_indices":[2147483648]}]}}"#,
            "dictionary.stackTable[0].locationIndices[0]",
            "2147483648 is not a 32-bit integer",
        ),
        (
            r#"{"dictionary":{"mappingTable":[{"memoryStart":-1}]}}"#,
            "dictionary.mappingTable[0].memoryStart",
            "-1 is not a 64-bit unsigned integer",
        ),
        (
            r#"{"resourceProfiles":{}}"#,
            "resourceProfiles",
            "expected an array",
        ),
        (
            r#"{"dictionary":{"stringTable":["a", 1]}}"#,
            "dictionary.stringTable[1]",
            "expected a string",
        ),
        (
            r#"{"resourceProfiles":[{"resource":{"attributes":[{"key":"k","value":{"bytesValue":"!!"}}]}}]}"#,
            "resourceProfiles[0].resource.attributes[0].value.bytesValue",
            "not base64",
        ),
        (
            r#"{"resourceProfiles":[{"resource":{"attributes":[{"key":"k","value":{"boolValue":1}}]}}]}"#,
            "resourceProfiles[0].resource.attributes[0].value.boolValue",
            "expected a boolean",
        ),
        (
            r#"[]"#,
            "",
            "expected an object (ExportProfilesServiceRequest)",
        ),
        (r#"{"dictionary":{}} x"#, "", "trailing characters"),
        (
            r#"{"dictionary":{"stringTable":["a""#,
            "dictionary.stringTable[1]",
            "EOF",
        ),
    ];
    for (json, path, message) in cases {
        let (got_path, got_message) = json_error(json);
        assert_eq!(got_path, path, "{json}: {got_message}");
        assert!(got_message.contains(message), "{json}: {got_message}");
    }
    let e = import_json(
        br#"{"dictionary":{"locationTable":[{"lines":[{"functionIndex":true}]}]}}"#,
        &options(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "not valid OTLP/JSON: dictionary.locationTable[0].lines[0].functionIndex: invalid type: \
         boolean `true`, expected a 32-bit integer at line 1 column 63"
    );
}

#[test]
fn nesting_and_emptiness_are_bounded() {
    let nested = |depth: usize| {
        let mut value = r#"{"intValue":1}"#.to_owned();
        for _ in 0..depth {
            value = format!(r#"{{"arrayValue":{{"values":[{value}]}}}}"#);
        }
        format!(
            r#"{{"resourceProfiles":[{{"resource":{{"attributes":[{{"key":"k","value":{value}}}]}}}}]}}"#
        )
    };
    // Past the attribute values' own depth: refused after transcoding.
    assert!(matches!(
        import_json(nested(9).as_bytes(), &options()),
        Err(OtlpError::TooDeep { .. })
    ));
    // Far past it: refused while transcoding, where it is.
    let (path, message) = json_error(&nested(40));
    assert!(
        message.contains("messages nest more than 32 deep"),
        "{message}"
    );
    assert!(
        path.starts_with("resourceProfiles[0].resource.attributes[0].value.arrayValue.values[0]")
    );
    for empty in ["", "  \n"] {
        assert!(matches!(
            import_json(empty.as_bytes(), &options()),
            Err(OtlpError::Empty)
        ));
    }
    assert!(matches!(
        import_json(b"{\"resourceProfiles\":[{}]}", &options()),
        Err(OtlpError::NoProfiles)
    ));
}

/// What the converter makes of both twins is the same to the last field
/// (a sanity check on `OtlpImported`'s equality too).
#[test]
fn a_small_request_converts_like_its_twin() {
    let json = data("small.json");
    let imported: OtlpImported = import_json(&json, &options()).unwrap_or_else(|e| panic!("{e}"));
    let twin = decoded(&json);
    assert_eq!(imported, import(&twin.encode_to_vec(), &options()).unwrap());
    assert_eq!(imported.profiles, 1);
    assert_eq!(imported.rejected_profiles, 0);
    let batch = &imported.batches[0];
    assert_eq!(
        collapsed(batch),
        [("main.main;main.run".to_owned(), 2)].into()
    );
}
