//! A fleet's agent batches as other protocols send the same samples:
//! OTLP profiles as the OpenTelemetry eBPF profiler sends them (protobuf
//! and OTLP/JSON), and Pyroscope's `/ingest` (pyroscope-go's multipart
//! pprof) and `push.v1` bodies, each with what the gateway is told beside
//! the body (query, content type, content encoding). And the check that a
//! conversion kept every sample: [`StackCounts`], the samples by host,
//! pid and stack, equal for the batches and for what each body converts
//! to.
//!
//! The shapes follow the senders (and `kiln/tests/otlp.rs`,
//! `kiln/tests/pyroscope.rs`):
//!
//! - **OTLP**: one request per batch (the profiler reports every 5 s for
//!   the whole host); one `ResourceProfiles` per process (`host.name`,
//!   `process.executable.name`, `process.pid`), one CPU profile in it
//!   (`samples`/`count`, period `cpu`/`nanoseconds`); a `Sample` per stack
//!   and thread with one timestamp per event, spread over the interval;
//!   the dictionary's string, function, location, mapping, attribute and
//!   stack tables shared by all, each location a symbolized line with
//!   `profile.frame.type` `native` in a mapping with a GNU build id.
//!   Gzip-compressed, as the collector's exporters send by default.
//! - **Pyroscope `/ingest`**: one request per process and interval, as
//!   each process's SDK uploads its own: `name=APP{host=…,pid=…}`,
//!   `from`/`until` in ns, `spyName=gospy`, and a `multipart/form-data`
//!   body whose `profile` part is a gzipped Go CPU pprof (`samples/count`
//!   and `cpu/nanoseconds`).
//! - **Pyroscope Push**: one `PushRequest` per process and interval, a
//!   series (`__name__=process_cpu`, `service_name`, the tags) with the
//!   same pprof, the whole request gzip-compressed (`Content-Encoding`).

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Write};

use kiln_formats::otlp::proto::collector::ExportProfilesServiceRequest;
use kiln_formats::otlp::proto::common::{AnyValue, InstrumentationScope, KeyValue, any_value};
use kiln_formats::otlp::proto::profiles::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use kiln_formats::otlp::proto::resource::Resource;
use kiln_formats::pprof_proto as pprof;
use kiln_formats::pyroscope::IngestQuery;
use kiln_formats::pyroscope::push::{LabelPair, PushRequest, RawProfileSeries, RawSample};
use kiln_model::{Batch, Frame, FrameId, LabelSet, LabelSetId, StackId, label_names};
use prost::Message;
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// How long each batch's interval is: its samples' events fall in it.
pub const INTERVAL_NS: u64 = 5_000_000_000;

/// The boundary of the multipart bodies (Go's `mime/multipart` picks a
/// random one of this length).
pub const BOUNDARY: &str = "8c1b3f0e9a7d2c4b6e5f1a0d9c8b7a6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c";

/// A batch's dictionary, by id.
struct View<'a> {
    frames: HashMap<FrameId, &'a Frame>,
    stacks: HashMap<StackId, &'a [FrameId]>,
    labels: HashMap<LabelSetId, &'a LabelSet>,
}

impl<'a> View<'a> {
    fn of(batch: &'a Batch) -> Self {
        View {
            frames: batch.frames.iter().map(|e| (e.id, &e.frame)).collect(),
            stacks: batch
                .stacks
                .iter()
                .map(|e| (e.id, e.frames.as_slice()))
                .collect(),
            labels: batch.label_sets.iter().map(|e| (e.id, &e.labels)).collect(),
        }
    }

    /// The function names of `stack`, root first.
    fn names(&self, stack: StackId) -> Vec<String> {
        self.stacks[&stack]
            .iter()
            .map(|id| name_of(self.frames[id]))
            .collect()
    }
}

/// What a frame is called in a flamegraph.
fn name_of(frame: &Frame) -> String {
    match frame {
        Frame::Named { function, .. } => function.clone(),
        Frame::Address { addr, .. } => format!("{addr:#x}"),
    }
}

/// One process's samples of a batch: its labels and (stack, count) rows.
struct Process<'a> {
    labels: &'a LabelSet,
    rows: Vec<(StackId, u64)>,
}

impl Process<'_> {
    fn label(&self, name: &str) -> &str {
        self.labels.get(name).unwrap_or("")
    }
}

/// A batch's samples by label set (one per process), in label-set order.
fn processes<'a>(batch: &Batch, view: &View<'a>) -> Vec<Process<'a>> {
    let mut by: BTreeMap<LabelSetId, Vec<(StackId, u64)>> = BTreeMap::new();
    for s in &batch.samples {
        by.entry(s.labels).or_default().push((s.stack, s.count));
    }
    by.into_iter()
        .map(|(id, rows)| Process {
            labels: view.labels[&id],
            rows,
        })
        .collect()
}

/// The library a synthetic function lives in: `app::module_7::f` is in
/// `libmodule_7.so`, `main` in `app`.
fn library(function: &str) -> String {
    match function.split("::").nth(1) {
        Some(module) => format!("/usr/lib/lib{module}.so"),
        None => "/usr/bin/app".to_owned(),
    }
}

/// A GNU build id (20 bytes, hex) for `path`, the same every run.
fn build_id(path: &str) -> String {
    (0..5u8)
        .map(|i| {
            let mut h = DefaultHasher::new();
            (path, i).hash(&mut h);
            format!("{:08x}", h.finish() as u32)
        })
        .collect()
}

/// A string table: each string once, `""` first.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), i);
        i
    }
}

/// Adds attribute `key` = `value` (a string-table index) to `d`: its
/// index.
fn attribute(d: &mut ProfilesDictionary, strings: &mut Strings, key: &str, value: &str) -> i32 {
    d.attribute_table.push(KeyValueAndUnit {
        key_strindex: strings.get(key) as i32,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValueStrindex(
                strings.get(value) as i32
            )),
        }),
        unit_strindex: 0,
    });
    (d.attribute_table.len() - 1) as i32
}

fn string_kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

/// The OTLP request the OpenTelemetry eBPF profiler would send for
/// `batch` (module docs), its events' timestamps drawn from `rng`.
pub fn otlp_request(batch: &Batch, rng: &mut StdRng) -> ExportProfilesServiceRequest {
    let view = View::of(batch);
    let mut strings = Strings::new();
    let mut d = ProfilesDictionary {
        mapping_table: vec![Mapping::default()],
        location_table: vec![Location::default()],
        function_table: vec![Function::default()],
        link_table: vec![Default::default()],
        string_table: Vec::new(),
        attribute_table: vec![KeyValueAndUnit::default()],
        stack_table: vec![Stack::default()],
    };
    let native = attribute(&mut d, &mut strings, "profile.frame.type", "native");
    let mut mappings: HashMap<String, i32> = HashMap::new();
    let mut locations: HashMap<FrameId, i32> = HashMap::new();
    let mut stacks: HashMap<StackId, i32> = HashMap::new();
    let mut threads: HashMap<String, i32> = HashMap::new();
    let samples_t = strings.get("samples") as i32;
    let count_t = strings.get("count") as i32;
    let cpu_t = strings.get("cpu") as i32;
    let ns_t = strings.get("nanoseconds") as i32;
    let ts = batch.samples.first().map_or(0, |s| s.timestamp_ns) as u64;
    let mut resource_profiles = Vec::new();
    for process in processes(batch, &view) {
        let thread = process.label(label_names::PROCESS).to_owned();
        let thread_attribute = match threads.get(&thread) {
            Some(&i) => i,
            None => {
                let i = attribute(&mut d, &mut strings, "thread.name", &thread);
                threads.insert(thread.clone(), i);
                i
            }
        };
        let mut samples = Vec::new();
        for &(stack, count) in &process.rows {
            let stack_index = match stacks.get(&stack) {
                Some(&i) => i,
                None => {
                    // Leaf first.
                    let mut location_indices = Vec::new();
                    for frame in view.stacks[&stack].iter().rev() {
                        let index = match locations.get(frame) {
                            Some(&i) => i,
                            None => {
                                let name = name_of(view.frames[frame]);
                                let path = library(&name);
                                let mapping_index = match mappings.get(&path) {
                                    Some(&i) => i,
                                    None => {
                                        let id = build_id(&path);
                                        let a = attribute(
                                            &mut d,
                                            &mut strings,
                                            "process.executable.build_id.gnu",
                                            &id,
                                        );
                                        d.mapping_table.push(Mapping {
                                            memory_start: 0x40_0000,
                                            memory_limit: 0x80_0000,
                                            file_offset: 0,
                                            filename_strindex: strings.get(&path) as i32,
                                            attribute_indices: vec![a],
                                        });
                                        let i = (d.mapping_table.len() - 1) as i32;
                                        mappings.insert(path, i);
                                        i
                                    }
                                };
                                d.function_table.push(Function {
                                    name_strindex: strings.get(&name) as i32,
                                    system_name_strindex: 0,
                                    filename_strindex: 0,
                                    start_line: 0,
                                });
                                d.location_table.push(Location {
                                    mapping_index,
                                    address: 0x1000 + 16 * d.location_table.len() as u64,
                                    lines: vec![Line {
                                        function_index: (d.function_table.len() - 1) as i32,
                                        line: 0,
                                        column: 0,
                                    }],
                                    attribute_indices: vec![native],
                                });
                                let i = (d.location_table.len() - 1) as i32;
                                locations.insert(*frame, i);
                                i
                            }
                        };
                        location_indices.push(index);
                    }
                    d.stack_table.push(Stack { location_indices });
                    let i = (d.stack_table.len() - 1) as i32;
                    stacks.insert(stack, i);
                    i
                }
            };
            let mut timestamps: Vec<u64> = (0..count)
                .map(|_| ts + rng.random_range(0..INTERVAL_NS))
                .collect();
            timestamps.sort_unstable();
            samples.push(Sample {
                stack_index,
                attribute_indices: vec![thread_attribute],
                link_index: 0,
                values: Vec::new(),
                timestamps_unix_nano: timestamps,
            });
        }
        let pid: i64 = process.label(label_names::PID).parse().unwrap_or(0);
        resource_profiles.push(ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![
                    string_kv(
                        "host.name",
                        any_value::Value::StringValue(process.label(label_names::HOST).into()),
                    ),
                    string_kv(
                        "process.executable.name",
                        any_value::Value::StringValue(process.label(label_names::PROCESS).into()),
                    ),
                    string_kv("process.pid", any_value::Value::IntValue(pid)),
                ],
                ..Resource::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "go.opentelemetry.io/ebpf-profiler".into(),
                    ..InstrumentationScope::default()
                }),
                profiles: vec![Profile {
                    sample_type: Some(ValueType {
                        type_strindex: samples_t,
                        unit_strindex: count_t,
                    }),
                    period_type: Some(ValueType {
                        type_strindex: cpu_t,
                        unit_strindex: ns_t,
                    }),
                    period: batch.period_ns as i64,
                    time_unix_nano: ts,
                    duration_nano: INTERVAL_NS,
                    samples,
                    ..Profile::default()
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    d.string_table = strings.table;
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(d),
    }
}

/// A 64-bit integer as OTLP/JSON writes it: a string.
fn int(n: impl ToString) -> Value {
    Value::String(n.to_string())
}

fn any_json(value: &AnyValue) -> Value {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => json!({ "stringValue": s }),
        Some(any_value::Value::StringValueStrindex(i)) => json!({ "stringValueStrindex": i }),
        Some(any_value::Value::IntValue(n)) => json!({ "intValue": int(n) }),
        _ => json!({}),
    }
}

/// An object of the fields that are set (OTLP/JSON leaves out zeros and
/// empty lists, as protobuf's JSON mapping does).
fn object(fields: Vec<(&str, Value)>) -> Value {
    let set = |v: &Value| match v {
        Value::Null => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty() && s != "0",
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Bool(b) => *b,
    };
    Value::Object(
        fields
            .into_iter()
            .filter(|(_, v)| set(v))
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// `request` in OTLP/JSON, as the collector's `otlphttp` exporter writes
/// it with `encoding: json` (camelCase names, 64-bit integers as
/// strings); only the fields [`otlp_request`] sets.
pub fn otlp_json(request: &ExportProfilesServiceRequest) -> Vec<u8> {
    let value_type = |v: &Option<ValueType>| match v {
        Some(v) => object(vec![
            ("typeStrindex", json!(v.type_strindex)),
            ("unitStrindex", json!(v.unit_strindex)),
        ]),
        None => Value::Null,
    };
    let resource_profiles: Vec<Value> = request
        .resource_profiles
        .iter()
        .map(|rp| {
            let attributes: Vec<Value> = rp
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .map(|kv| json!({ "key": kv.key, "value": kv.value.as_ref().map(any_json) }))
                .collect();
            let scope_profiles: Vec<Value> = rp
                .scope_profiles
                .iter()
                .map(|sp| {
                    let profiles: Vec<Value> = sp
                        .profiles
                        .iter()
                        .map(|p| {
                            let samples: Vec<Value> = p
                                .samples
                                .iter()
                                .map(|s| {
                                    object(vec![
                                        ("stackIndex", json!(s.stack_index)),
                                        ("attributeIndices", json!(s.attribute_indices)),
                                        (
                                            "timestampsUnixNano",
                                            Value::Array(
                                                s.timestamps_unix_nano.iter().map(int).collect(),
                                            ),
                                        ),
                                    ])
                                })
                                .collect();
                            object(vec![
                                ("sampleType", value_type(&p.sample_type)),
                                ("periodType", value_type(&p.period_type)),
                                ("period", int(p.period)),
                                ("timeUnixNano", int(p.time_unix_nano)),
                                ("durationNano", int(p.duration_nano)),
                                ("samples", Value::Array(samples)),
                            ])
                        })
                        .collect();
                    object(vec![
                        (
                            "scope",
                            sp.scope
                                .as_ref()
                                .map_or(Value::Null, |s| object(vec![("name", json!(s.name))])),
                        ),
                        ("profiles", Value::Array(profiles)),
                    ])
                })
                .collect();
            object(vec![
                ("resource", object(vec![("attributes", json!(attributes))])),
                ("scopeProfiles", Value::Array(scope_profiles)),
            ])
        })
        .collect();
    let d = request.dictionary.as_ref().expect("a dictionary");
    let dictionary = object(vec![
        (
            "mappingTable",
            d.mapping_table
                .iter()
                .map(|m| {
                    object(vec![
                        ("memoryStart", int(m.memory_start)),
                        ("memoryLimit", int(m.memory_limit)),
                        ("fileOffset", int(m.file_offset)),
                        ("filenameStrindex", json!(m.filename_strindex)),
                        ("attributeIndices", json!(m.attribute_indices)),
                    ])
                })
                .collect(),
        ),
        (
            "locationTable",
            d.location_table
                .iter()
                .map(|l| {
                    let lines: Vec<Value> = l
                        .lines
                        .iter()
                        .map(|line| {
                            object(vec![
                                ("functionIndex", json!(line.function_index)),
                                ("line", int(line.line)),
                            ])
                        })
                        .collect();
                    object(vec![
                        ("mappingIndex", json!(l.mapping_index)),
                        ("address", int(l.address)),
                        ("lines", Value::Array(lines)),
                        ("attributeIndices", json!(l.attribute_indices)),
                    ])
                })
                .collect(),
        ),
        (
            "functionTable",
            d.function_table
                .iter()
                .map(|f| {
                    object(vec![
                        ("nameStrindex", json!(f.name_strindex)),
                        ("filenameStrindex", json!(f.filename_strindex)),
                    ])
                })
                .collect(),
        ),
        ("linkTable", json!([{}])),
        ("stringTable", json!(d.string_table)),
        (
            "attributeTable",
            d.attribute_table
                .iter()
                .map(|a| {
                    object(vec![
                        ("keyStrindex", json!(a.key_strindex)),
                        ("value", a.value.as_ref().map_or(Value::Null, any_json)),
                    ])
                })
                .collect(),
        ),
        (
            "stackTable",
            d.stack_table
                .iter()
                .map(|s| object(vec![("locationIndices", json!(s.location_indices))]))
                .collect(),
        ),
    ]);
    serde_json::to_vec(&json!({
        "resourceProfiles": resource_profiles,
        "dictionary": dictionary,
    }))
    .expect("JSON of values")
}

/// A Go CPU pprof of one process's samples, as `runtime/pprof` writes it
/// (not compressed): `samples/count` and `cpu/nanoseconds`, the batch's
/// period, one mapping for the executable, a location and function per
/// frame.
fn go_pprof(batch: &Batch, view: &View<'_>, process: &Process<'_>, ts: i64) -> Vec<u8> {
    let mut strings = Strings::new();
    let period = batch.period_ns as i64;
    let mut profile = pprof::Profile {
        sample_type: vec![
            pprof::ValueType {
                r#type: strings.get("samples"),
                unit: strings.get("count"),
            },
            pprof::ValueType {
                r#type: strings.get("cpu"),
                unit: strings.get("nanoseconds"),
            },
        ],
        period_type: Some(pprof::ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        }),
        period,
        time_nanos: ts,
        duration_nanos: INTERVAL_NS as i64,
        mapping: vec![pprof::Mapping {
            id: 1,
            memory_start: 0x40_0000,
            memory_limit: 0x80_0000,
            filename: strings.get(&format!("/usr/bin/{}", process.label(label_names::PROCESS))),
            build_id: strings.get(&build_id(process.label(label_names::PROCESS))),
            has_functions: true,
            ..pprof::Mapping::default()
        }],
        ..pprof::Profile::default()
    };
    let mut locations: HashMap<FrameId, u64> = HashMap::new();
    for &(stack, count) in &process.rows {
        let mut location_id = Vec::new();
        for frame in view.stacks[&stack].iter().rev() {
            let id = *locations.entry(*frame).or_insert_with(|| {
                let id = profile.location.len() as u64 + 1;
                profile.function.push(pprof::Function {
                    id,
                    name: strings.get(&name_of(view.frames[frame])),
                    ..pprof::Function::default()
                });
                profile.location.push(pprof::Location {
                    id,
                    mapping_id: 1,
                    address: 0x40_1000 + 16 * id,
                    line: vec![pprof::Line {
                        function_id: id,
                        ..pprof::Line::default()
                    }],
                    ..pprof::Location::default()
                });
                id
            });
            location_id.push(id);
        }
        profile.sample.push(pprof::Sample {
            location_id,
            value: vec![count as i64, count as i64 * period],
            label: Vec::new(),
        });
    }
    profile.string_table = strings.table;
    profile.encode_to_vec()
}

/// Gzip, at the default level (Go's `compress/gzip` default, which
/// `runtime/pprof` and the collector's exporters use).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("writing to memory");
    e.finish().expect("writing to memory")
}

/// Decompresses a gzip body, as the gateway does for `Content-Encoding:
/// gzip`.
pub fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() * 4);
    flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

/// One Pyroscope `/ingest` request: its query, content type and body.
#[derive(Debug, Clone)]
pub struct IngestRequest {
    /// The query string's parameters.
    pub query: IngestQuery,
    /// `multipart/form-data; boundary=…`.
    pub content_type: String,
    /// The multipart body.
    pub body: Vec<u8>,
}

/// The `/ingest` requests pyroscope-go would send for `batch`'s samples:
/// one per process (module docs).
pub fn ingest_requests(batch: &Batch) -> Vec<IngestRequest> {
    let view = View::of(batch);
    let ts = batch.samples.first().map_or(0, |s| s.timestamp_ns);
    processes(batch, &view)
        .iter()
        .map(|process| {
            let profile = gzip(&go_pprof(batch, &view, process, ts));
            let mut body = Vec::with_capacity(profile.len() + 256);
            body.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"profile\"; \
                     filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(&profile);
            body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
            IngestRequest {
                query: IngestQuery {
                    name: Some(format!(
                        "{}{{host={},pid={}}}",
                        process.label(label_names::PROCESS),
                        process.label(label_names::HOST),
                        process.label(label_names::PID)
                    )),
                    from: Some(ts.to_string()),
                    until: Some((ts + INTERVAL_NS as i64).to_string()),
                    format: None,
                    sample_rate: Some((1_000_000_000 / batch.period_ns).to_string()),
                    spy_name: Some("gospy".into()),
                    units: Some("samples".into()),
                    aggregation_type: Some("sum".into()),
                },
                content_type: format!("multipart/form-data; boundary={BOUNDARY}"),
                body,
            }
        })
        .collect()
}

/// The `push.v1.PusherService/Push` bodies for `batch`'s samples, one per
/// process, gzip-compressed (module docs).
pub fn push_requests(batch: &Batch) -> Vec<Vec<u8>> {
    let view = View::of(batch);
    let ts = batch.samples.first().map_or(0, |s| s.timestamp_ns);
    processes(batch, &view)
        .iter()
        .enumerate()
        .map(|(i, process)| {
            let pair = |name: &str, value: &str| LabelPair {
                name: name.into(),
                value: value.into(),
            };
            let request = PushRequest {
                series: vec![RawProfileSeries {
                    labels: vec![
                        pair("__name__", "process_cpu"),
                        pair("service_name", process.label(label_names::PROCESS)),
                        pair("host", process.label(label_names::HOST)),
                        pair("pid", process.label(label_names::PID)),
                    ],
                    samples: vec![RawSample {
                        raw_profile: go_pprof(batch, &view, process, ts),
                        id: format!("{ts:x}-{i}"),
                    }],
                }],
            };
            gzip(&request.encode_to_vec())
        })
        .collect()
}

/// Samples by (host, pid, stack's function names root first): what must
/// come out of every protocol the same.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StackCounts(BTreeMap<(String, String, Vec<String>), u64>);

impl StackCounts {
    /// Adds `batch`'s samples.
    pub fn add(&mut self, batch: &Batch) {
        let view = View::of(batch);
        for s in &batch.samples {
            let labels = view.labels[&s.labels];
            let key = (
                labels.get(label_names::HOST).unwrap_or("").to_owned(),
                labels.get(label_names::PID).unwrap_or("").to_owned(),
                view.names(s.stack),
            );
            *self.0.entry(key).or_default() += s.count;
        }
    }

    /// The samples counted.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// How many keys differ from `other`'s, and one that does.
    pub fn differences(&self, other: &StackCounts) -> (usize, Option<String>) {
        let mut n = 0;
        let mut first = None;
        let keys = self
            .0
            .keys()
            .chain(other.0.keys().filter(|k| !self.0.contains_key(*k)));
        for key in keys {
            let (a, b) = (self.0.get(key), other.0.get(key));
            if a != b {
                n += 1;
                first.get_or_insert_with(|| {
                    format!(
                        "host {} pid {} stack {}: {a:?} vs {b:?}",
                        key.0,
                        key.1,
                        key.2.join(";")
                    )
                });
            }
        }
        (n, first)
    }
}

#[cfg(test)]
mod tests {
    use kiln_formats::otlp::{OtlpOptions, import, import_json};
    use kiln_formats::pyroscope::{PushEncoding, PyroscopeOptions, import_ingest, import_push};
    use rand::SeedableRng;

    use super::*;
    use crate::synth::{Fleet, StackPopulation};

    const START_NS: i64 = 1_800_000_000_000_000_000;

    fn batches() -> Vec<Batch> {
        let population = StackPopulation::new(300, 1.1, 1);
        let fleet = Fleet::of_agents(3, 200);
        let mut rng = StdRng::seed_from_u64(2);
        (0..3)
            .flat_map(|h| (0..2).map(move |i| (h, i)))
            .map(|(h, i)| fleet.batch(&population, h, i, START_NS, &mut rng))
            .collect()
    }

    fn expected(batches: &[Batch]) -> StackCounts {
        let mut counts = StackCounts::default();
        batches.iter().for_each(|b| counts.add(b));
        counts
    }

    #[track_caller]
    fn same(got: &StackCounts, want: &StackCounts) {
        assert_eq!(got.total(), want.total());
        assert_eq!(got.differences(want), (0, None));
    }

    #[test]
    fn otlp_protobuf_and_json_keep_every_sample_by_host_pid_and_stack() {
        let batches = batches();
        let options = OtlpOptions { now_ns: START_NS };
        let mut rng = StdRng::seed_from_u64(3);
        let (mut proto, mut json) = (StackCounts::default(), StackCounts::default());
        for batch in &batches {
            let request = otlp_request(batch, &mut rng);
            let body = gunzip(&gzip(&request.encode_to_vec())).unwrap();
            let imported = import(&body, &options).unwrap();
            assert_eq!(imported.rejected_profiles, 0, "{:?}", imported.problems);
            assert_eq!(imported.warnings, Vec::<String>::new());
            assert_eq!(imported.samples, batch.sample_count());
            imported.batches.iter().for_each(|b| proto.add(b));
            let imported = import_json(&otlp_json(&request), &options).unwrap();
            assert_eq!(imported.rejected_profiles, 0, "{:?}", imported.problems);
            assert_eq!(imported.warnings, Vec::<String>::new());
            imported.batches.iter().for_each(|b| json.add(b));
            // Each event is timed: labels from the resource and the sample.
            let labels = &imported.batches[0].label_sets[0].labels;
            for name in ["host", "process", "pid", "thread"] {
                assert!(labels.get(name).is_some(), "{name} in {labels:?}");
            }
        }
        let want = expected(&batches);
        same(&proto, &want);
        same(&json, &want);
    }

    #[test]
    fn pyroscope_ingest_and_push_keep_every_sample_by_host_pid_and_stack() {
        let batches = batches();
        let options = PyroscopeOptions { now_ns: START_NS };
        let (mut ingest, mut push) = (StackCounts::default(), StackCounts::default());
        for batch in &batches {
            for request in ingest_requests(batch) {
                let imported = import_ingest(
                    &request.query,
                    Some(&request.content_type),
                    &request.body,
                    &options,
                )
                .unwrap();
                assert_eq!(imported.skipped, Vec::<String>::new());
                imported.batches.iter().for_each(|b| ingest.add(b));
            }
            for body in push_requests(batch) {
                let imported =
                    import_push(&gunzip(&body).unwrap(), PushEncoding::Proto, &options).unwrap();
                assert_eq!(imported.skipped, Vec::<String>::new());
                imported.batches.iter().for_each(|b| push.add(b));
            }
        }
        let want = expected(&batches);
        same(&ingest, &want);
        same(&push, &want);
    }
}
