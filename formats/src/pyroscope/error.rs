//! Why a Pyroscope request was refused. Nothing of a refused request is
//! kept; each message names what is wrong and, where there is one, what to
//! send instead.

use super::multipart::MultipartError;
use crate::ImportError;

/// Why a whole Pyroscope request was refused: the sender's error, so
/// retrying the same request cannot succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PyroscopeError {
    /// `name` is not `APP{key=value,…}`.
    #[error("name {name:?}: {problem}")]
    Name {
        /// The name as sent, shortened when long.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `from` or `until` is not a time.
    #[error("{param}: {problem}")]
    Time {
        /// `from` or `until`.
        param: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A `sampleRate` that is not a positive whole number.
    #[error("sampleRate {0:?} is not a positive whole number of samples per second")]
    SampleRate(String),
    /// A format Kiln does not read (answered 415).
    #[error("{0}")]
    Unsupported(String),
    /// A multipart body that cannot be split into parts.
    #[error("multipart body: {0}")]
    Multipart(#[from] MultipartError),
    /// A multipart body without its `profile` part.
    #[error(
        "multipart body has no part named \"profile\" (parts: {parts}); pyroscope-go sends the \
         pprof in a form-data part named profile"
    )]
    NoProfilePart {
        /// The names of the parts it has.
        parts: String,
    },
    /// A `prev_profile` part: a cumulative profile from an old SDK.
    #[error(
        "multipart body has a prev_profile part: it comes from an old pyroscope-go that sent \
         cumulative profiles; upgrade it (v1.5.0 sends none)"
    )]
    PrevProfile,
    /// The `sample_type_config` part is not Pyroscope's JSON.
    #[error(
        "multipart part sample_type_config is not JSON of {{type: {{units, aggregation, display-name}}}}: {0}"
    )]
    SampleTypeConfig(#[source] serde_json::Error),
    /// The profile itself (pprof, folded stacks) could not be read.
    #[error("{what}: {source}")]
    Profile {
        /// Which profile: `pprof`, `folded stacks`, `series 0 sample 1 (pprof)`.
        what: String,
        /// Why.
        #[source]
        source: ImportError,
    },
    /// The Push body is not a `push.v1.PushRequest`.
    #[error("not a valid push.v1.PushRequest (protobuf): {0}")]
    PushDecode(#[source] prost::DecodeError),
    /// The Push body is not the JSON of a `push.v1.PushRequest`.
    #[error("not a valid push.v1.PushRequest (JSON): {0}")]
    PushJson(#[source] serde_json::Error),
    /// A raw profile in a JSON Push body is not base64.
    #[error("series {series} sample {sample}: rawProfile is not base64")]
    PushBase64 {
        /// The series' index, from 0.
        series: usize,
        /// The sample's index in it, from 0.
        sample: usize,
    },
    /// A Push request holds more of something than one request may.
    #[error("the PushRequest has more than {limit} {what}; send smaller requests")]
    TooMany {
        /// What: `series`, `samples`, `labels in one series`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
}

impl PyroscopeError {
    /// Whether the request asked for a format Kiln does not read (HTTP
    /// 415), rather than being malformed (400).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, PyroscopeError::Unsupported(_))
    }

    /// Whether the request decompresses to more than Kiln reads at once
    /// (HTTP 413).
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            PyroscopeError::Profile {
                source: ImportError::TooLarge,
                ..
            }
        )
    }
}
