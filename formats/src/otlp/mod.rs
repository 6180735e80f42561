//! OTLP profiles (`opentelemetry.proto.collector.profiles.v1development`)
//! → Kiln batches: what the OpenTelemetry eBPF profiler and collectors
//! send to `POST /v1development/profiles`.
//!
//! The messages are the OpenTelemetry project's own (crate
//! `opentelemetry-proto`, protos 1.10.0), re-exported as [`proto`].
//! [`import_json`] reads OTLP/JSON by transcoding it to protobuf first
//! (`json.rs`, following `schema.rs`), then as [`import`] does.
//! [`import`] checks a request on the wire first (`limits.rs`: every count
//! bounded before prost allocates), reads 1.9.0's `Sample` numbering too
//! (`layout.rs`), decodes it, and converts it profile by profile
//! (`convert.rs`): a profile with a problem is refused alone, with a
//! reason, and the others are kept; that is OTLP's partial success.
//!
//! - **Stacks.** A sample's stack is `dictionary.stackTable[stackIndex]`,
//!   its locations leaf first; a location with several lines is a call
//!   and the functions inlined into it, a frame each. Stack 0 (empty) is
//!   one `[no stack]` frame, so totals stay right.
//! - **Frames** (`frames.rs`) by `profile.frame.type`: native code without
//!   lines is an address in its mapping's file (the file id from
//!   `process.executable.build_id.gnu`), named later by Kiln's symbolizer;
//!   kernel frames are named `[kernel.kallsyms]` or `[module]` as the agent
//!   names them; `go`, `cpython`, `jvm`, `v8js`, `ruby`, `php`, `dotnet`,
//!   `perl`, `beam` keep the producer's names with their kind;
//!   `abort-marker` is a `[unwinding aborted]` truncation marker.
//! - **Labels** (`attributes.rs`): resource, scope, profile and sample
//!   attributes, renamed where Kiln has a name (`host.name` → `host`,
//!   `service.name` → `service`, `process.executable.name` → `process`,
//!   `thread.name` → `thread`, `k8s.pod.name` → `pod`, …).
//! - **Weights.** CPU sample counts (`samples`/`count`, the period from a
//!   `cpu`/`nanoseconds` period type), CPU nanoseconds, and off-CPU
//!   nanoseconds (`device_kind=off_cpu`); other profile types are refused
//!   for now. Each timestamp's event lands in its second.
//! - **Batches.** One per (host, period), a fresh one whenever one would
//!   pass half of a batch's limits.

mod attributes;
mod convert;
mod dictionary;
mod error;
mod frames;
mod json;
mod layout;
mod limits;
mod schema;
mod warnings;

use kiln_model::Batch;
use prost::Message;

pub use error::{OtlpError, ProfileProblem};
pub use json::MAX_OUTPUT as MAX_JSON_TRANSCODED;
pub(crate) use json::base64;
pub use layout::downgrade_to_v1_9;
pub use limits::Layout;

use proto::collector::{ExportProfilesPartialSuccess, ExportProfilesServiceRequest};
use warnings::Warnings;

/// The OTLP messages Kiln reads and answers with.
pub mod proto {
    /// `ExportProfilesServiceRequest`, its response and partial success.
    pub use opentelemetry_proto::tonic::collector::profiles::v1development as collector;
    /// `AnyValue`, `KeyValue`, `InstrumentationScope`.
    pub use opentelemetry_proto::tonic::common::v1 as common;
    /// Profiles, samples and the dictionary's tables.
    pub use opentelemetry_proto::tonic::profiles::v1development as profiles;
    /// `Resource`.
    pub use opentelemetry_proto::tonic::resource::v1 as resource;
}

/// The note a converted 1.9.0 request is answered with.
const V1_9_NOTE: &str = "this request uses the OTLP profiles layout of opentelemetry-proto \
     1.9.0 (Sample.values = 2: pdata <= v1.53.0, collector <= v0.147.0, eBPF profiler <= \
     v0.0.202610); Kiln converted it; 1.10.0 and later are read as is";

/// Longest `error_message` of a partial success.
const MAX_MESSAGE: usize = 2048;

/// How a conversion stamps what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpOptions {
    /// Now, in nanoseconds since the Unix epoch: the batches' `sent_at_ns`,
    /// and the time of samples with neither timestamps nor a profile time.
    pub now_ns: i64,
}

/// What a request converted to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpImported {
    /// The batches, ready to publish.
    pub batches: Vec<Batch>,
    /// The weights kept, summed (sample counts, or nanoseconds).
    pub samples: u64,
    /// Sample rows of all batches (what ingest quotas meter).
    pub sample_rows: usize,
    /// Profiles in the request.
    pub profiles: usize,
    /// Profiles refused.
    pub rejected_profiles: usize,
    /// Why, for the first few refused: `resourceProfiles[0]…profiles[2]:
    /// samples[17].stackIndex is 40, but dictionary.stackTable has 3
    /// entries`.
    pub problems: Vec<String>,
    /// What the sender should know though nothing was refused for it.
    pub warnings: Vec<String>,
    /// The layout the request used.
    pub layout: Layout,
}

impl OtlpImported {
    /// The response's `partial_success`: absent when everything was kept
    /// without a warning; else the refused profiles (`rejected_profiles`,
    /// and why in `error_message`), or only the warnings.
    pub fn partial_success(&self) -> Option<ExportProfilesPartialSuccess> {
        let message = if self.rejected_profiles > 0 {
            let mut m = format!(
                "{} of {} profiles rejected: {}",
                self.rejected_profiles,
                self.profiles,
                self.problems.join("; ")
            );
            if self.rejected_profiles > self.problems.len() {
                m.push_str(&format!(
                    "; and {} more",
                    self.rejected_profiles - self.problems.len()
                ));
            }
            m
        } else if !self.warnings.is_empty() {
            self.warnings.join("; ")
        } else {
            return None;
        };
        Some(ExportProfilesPartialSuccess {
            rejected_profiles: self.rejected_profiles as i64,
            error_message: cut(message, MAX_MESSAGE),
        })
    }
}

/// `text` cut to at most `max` bytes on a character boundary, ending in
/// `…` when cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// Converts an `ExportProfilesServiceRequest` in protobuf (1.10.0's
/// layout, or 1.9.0's) into batches.
///
/// # Errors
///
/// An [`OtlpError`] when the request as a whole cannot be read: empty,
/// not protobuf, past a limit, or without profiles. A problem of one
/// profile refuses only that profile ([`OtlpImported::rejected_profiles`]).
pub fn import(bytes: &[u8], options: &OtlpOptions) -> Result<OtlpImported, OtlpError> {
    if bytes.is_empty() {
        return Err(OtlpError::Empty);
    }
    let counts = limits::check(bytes)?;
    let layout = counts.layout();
    let upgraded;
    let bytes = match layout {
        Layout::V1_10 => bytes,
        Layout::V1_9 => {
            upgraded = layout::upgrade_v1_9(bytes);
            &upgraded[..]
        }
    };
    let request = ExportProfilesServiceRequest::decode(bytes).map_err(OtlpError::Decode)?;
    let mut warnings = Warnings::default();
    if layout == Layout::V1_9 {
        warnings.once(V1_9_NOTE.to_owned());
    }
    let mut imported = convert::convert(&request, options, warnings)?;
    imported.layout = layout;
    Ok(imported)
}

/// Converts an `ExportProfilesServiceRequest` in OTLP/JSON into batches:
/// transcoded to protobuf (at most [`MAX_JSON_TRANSCODED`] bytes), then
/// read as [`import`] reads protobuf.
///
/// # Errors
///
/// As [`import`], and [`OtlpError::Json`] (naming the field's path) for
/// JSON that is not such a request, [`OtlpError::JsonTooLarge`] past the
/// limit.
pub fn import_json(bytes: &[u8], options: &OtlpOptions) -> Result<OtlpImported, OtlpError> {
    import(&transcode_json(bytes)?, options)
}

/// The protobuf encoding of the OTLP/JSON request `bytes` (for tests and
/// fuzzing; [`import_json`] converts it).
///
/// # Errors
///
/// As [`import_json`]'s JSON errors, and [`OtlpError::Empty`].
pub fn transcode_json(bytes: &[u8]) -> Result<Vec<u8>, OtlpError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(OtlpError::Empty);
    }
    json::transcode(bytes, json::MAX_OUTPUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let m = cut("é".repeat(2000), MAX_MESSAGE);
        assert!(m.len() <= MAX_MESSAGE && m.ends_with('…'));
        assert_eq!(cut("short".into(), 10), "short");
    }
}
