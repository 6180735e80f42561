//! OTLP profiles requests for the end-to-end tests (`otlp.rs`,
//! `distributed.rs`): built with the `opentelemetry-proto` messages, and
//! a gRPC client of `ProfilesService/Export`.

#![allow(
    dead_code,
    reason = "each test file uses a different part of the harness"
)]

use kiln_formats::otlp::proto::collector::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use kiln_formats::otlp::proto::common::{AnyValue, KeyValue, any_value};
use kiln_formats::otlp::proto::profiles::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use kiln_formats::otlp::proto::resource::Resource;
use prost::Message;

/// Now, in nanoseconds since the Unix epoch.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

pub(crate) fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

/// A request of one CPU profile from `service` on `host`: `stacks`, each
/// its Go functions root first and its number of events, one timestamp
/// per event, on thread `thread`. Stack index `bad_stack` (when given)
/// is one past the table: its profile is refused.
pub(crate) fn request(
    host: &str,
    service: &str,
    thread: &str,
    profiles: &[&[(&[&str], u64)]],
    bad_profile: Option<usize>,
) -> ExportProfilesServiceRequest {
    let mut d = ProfilesDictionary {
        mapping_table: vec![Mapping::default()],
        location_table: vec![Location::default()],
        function_table: vec![Function::default()],
        link_table: vec![Default::default()],
        string_table: vec![String::new()],
        attribute_table: vec![KeyValueAndUnit::default()],
        stack_table: vec![Stack::default()],
    };
    let s = |d: &mut ProfilesDictionary, text: &str| -> i32 {
        let i = d
            .string_table
            .iter()
            .position(|x| x == text)
            .unwrap_or_else(|| {
                d.string_table.push(text.into());
                d.string_table.len() - 1
            });
        i as i32
    };
    let go = s(&mut d, "go");
    let frame_type = s(&mut d, "profile.frame.type");
    d.attribute_table.push(KeyValueAndUnit {
        key_strindex: frame_type,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValueStrindex(go)),
        }),
        unit_strindex: 0,
    });
    let thread_key = s(&mut d, "thread.name");
    d.attribute_table.push(KeyValueAndUnit {
        key_strindex: thread_key,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(thread.into())),
        }),
        unit_strindex: 0,
    });
    let (go_attribute, thread_attribute) = (1, 2);
    let file = s(&mut d, "main.go");
    let samples_t = s(&mut d, "samples");
    let count_t = s(&mut d, "count");
    let cpu_t = s(&mut d, "cpu");
    let ns_t = s(&mut d, "nanoseconds");
    // Events in the past minute, on whole seconds.
    let t0 = (now_ns() as u64 / 1_000_000_000 - 60) * 1_000_000_000;
    let mut out = Vec::new();
    for (p, stacks) in profiles.iter().enumerate() {
        let mut samples = Vec::new();
        for (stack, events) in stacks.iter() {
            let mut locations = Vec::new();
            for name in stack.iter().rev() {
                let name_strindex = s(&mut d, name);
                d.function_table.push(Function {
                    name_strindex,
                    system_name_strindex: 0,
                    filename_strindex: file,
                    start_line: 0,
                });
                d.location_table.push(Location {
                    mapping_index: 0,
                    address: 0,
                    lines: vec![Line {
                        function_index: (d.function_table.len() - 1) as i32,
                        line: 0,
                        column: 0,
                    }],
                    attribute_indices: vec![go_attribute],
                });
                locations.push((d.location_table.len() - 1) as i32);
            }
            d.stack_table.push(Stack {
                location_indices: locations,
            });
            let stack_index = if bad_profile == Some(p) {
                1000
            } else {
                (d.stack_table.len() - 1) as i32
            };
            samples.push(Sample {
                stack_index,
                attribute_indices: vec![thread_attribute],
                link_index: 0,
                values: vec![],
                timestamps_unix_nano: (0..*events).map(|i| t0 + i * 100_000_000).collect(),
            });
        }
        out.push(Profile {
            sample_type: Some(ValueType {
                type_strindex: samples_t,
                unit_strindex: count_t,
            }),
            period_type: Some(ValueType {
                type_strindex: cpu_t,
                unit_strindex: ns_t,
            }),
            period: 50_000_000,
            time_unix_nano: t0,
            duration_nano: 5_000_000_000,
            samples,
            ..Profile::default()
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![
                    string_kv("host.name", host),
                    string_kv("service.name", service),
                ],
                ..Resource::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: out,
                ..ScopeProfiles::default()
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(d),
    }
}

/// The gRPC method's path.
const EXPORT: &str = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// Calls Export on the gRPC listener at `addr` with `message` (an
/// `ExportProfilesServiceRequest`, or any message standing in for a
/// malformed one), compressed with `compression`, with `key` as bearer.
pub(crate) fn grpc_export_to<M: Message + Send + Sync + 'static>(
    addr: std::net::SocketAddr,
    key: Option<&str>,
    message: M,
    compression: Option<tonic::codec::CompressionEncoding>,
) -> Result<ExportProfilesServiceResponse, tonic::Status> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("connect to the gRPC listener");
        let mut grpc = tonic::client::Grpc::new(channel);
        if let Some(compression) = compression {
            grpc = grpc.send_compressed(compression);
        }
        grpc.ready().await.expect("the channel is ready");
        let mut request = tonic::Request::new(message);
        if let Some(key) = key {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {key}").parse().unwrap());
        }
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT);
        let codec = tonic_prost::ProstCodec::<M, ExportProfilesServiceResponse>::default();
        grpc.unary(request, path, codec)
            .await
            .map(tonic::Response::into_inner)
    })
}
