//! Pyroscope's `push.v1.PusherService/Push` request (Connect RPC), what
//! pyroscope-io 1.x and pyroscope-rs 2.x send: the three messages of
//! `api/push/v1/push.proto` (and `types.v1.LabelPair`), hand-written as
//! `pprof/proto.rs` is, counted on the wire before prost decodes them;
//! and its Connect JSON form.

use prost::Message;
use serde::Deserialize;

use super::error::PyroscopeError;
use crate::wire::{Field, Value, walk};

/// Most series in one request (one per profile type and label set).
pub const MAX_SERIES: usize = 256;
/// Most raw profiles in one request, over all its series.
pub const MAX_SAMPLES: usize = 256;
/// Most labels of one series.
pub const MAX_SERIES_LABELS: usize = 128;

/// `push.v1.PushRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct PushRequest {
    /// One series per profile type and label set.
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

/// `push.v1.RawProfileSeries`.
#[derive(Clone, PartialEq, Message)]
pub struct RawProfileSeries {
    /// The series' labels: `__name__`, `service_name`, tags.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    /// Its profiles.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `types.v1.LabelPair`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    /// The label's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `push.v1.RawSample`.
#[derive(Clone, PartialEq, Message)]
pub struct RawSample {
    /// A pprof profile, gzip-compressed or not.
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    /// The sender's id for it (a UUID).
    #[prost(string, tag = "2")]
    pub id: String,
}

/// `push.v1.PushResponse`: empty.
#[derive(Clone, PartialEq, Message)]
pub struct PushResponse {}

/// Decodes a protobuf `PushRequest`, refusing one past the limits before
/// prost builds anything.
pub(crate) fn decode(bytes: &[u8]) -> Result<PushRequest, PyroscopeError> {
    let (mut series, mut samples) = (0, 0);
    let _malformed = walk(bytes, |Field { number, value, .. }| {
        let (1, Value::Bytes(one)) = (number, value) else {
            return Ok(());
        };
        series += 1;
        if series > MAX_SERIES {
            return Err(too_many("series", MAX_SERIES));
        }
        let mut labels = 0;
        let _malformed = walk(one, |Field { number, value, .. }| {
            match (number, value) {
                (1, Value::Bytes(_)) => labels += 1,
                (2, Value::Bytes(_)) => samples += 1,
                _ => {}
            }
            if labels > MAX_SERIES_LABELS {
                return Err(too_many("labels in one series", MAX_SERIES_LABELS));
            }
            if samples > MAX_SAMPLES {
                return Err(too_many("samples (raw profiles)", MAX_SAMPLES));
            }
            Ok(())
        })?;
        Ok(())
    })?;
    PushRequest::decode(bytes).map_err(PyroscopeError::PushDecode)
}

fn too_many(what: &'static str, limit: usize) -> PyroscopeError {
    PyroscopeError::TooMany { what, limit }
}

/// A `PushRequest` in Connect's JSON (protojson: `rawProfile` base64, the
/// proto names accepted too).
#[derive(Deserialize)]
struct JsonRequest {
    #[serde(default)]
    series: Vec<JsonSeries>,
}

#[derive(Deserialize)]
struct JsonSeries {
    #[serde(default)]
    labels: Vec<JsonLabel>,
    #[serde(default)]
    samples: Vec<JsonSample>,
}

#[derive(Deserialize)]
struct JsonLabel {
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct JsonSample {
    #[serde(default, rename = "rawProfile", alias = "raw_profile")]
    raw_profile: String,
    #[serde(default, rename = "ID", alias = "id")]
    id: String,
}

/// Decodes a JSON `PushRequest`, within the same limits.
pub(crate) fn decode_json(bytes: &[u8]) -> Result<PushRequest, PyroscopeError> {
    let request: JsonRequest = serde_json::from_slice(bytes).map_err(PyroscopeError::PushJson)?;
    if request.series.len() > MAX_SERIES {
        return Err(too_many("series", MAX_SERIES));
    }
    if request
        .series
        .iter()
        .map(|s| s.samples.len())
        .sum::<usize>()
        > MAX_SAMPLES
    {
        return Err(too_many("samples (raw profiles)", MAX_SAMPLES));
    }
    if request
        .series
        .iter()
        .any(|s| s.labels.len() > MAX_SERIES_LABELS)
    {
        return Err(too_many("labels in one series", MAX_SERIES_LABELS));
    }
    let mut series = Vec::with_capacity(request.series.len());
    for (i, s) in request.series.into_iter().enumerate() {
        let mut samples = Vec::with_capacity(s.samples.len());
        for (j, sample) in s.samples.into_iter().enumerate() {
            // Either base64 alphabet, padded or not, as protojson reads.
            let raw_profile =
                crate::otlp::base64(&sample.raw_profile).ok_or(PyroscopeError::PushBase64 {
                    series: i,
                    sample: j,
                })?;
            samples.push(RawSample {
                raw_profile,
                id: sample.id,
            });
        }
        series.push(RawProfileSeries {
            labels: s
                .labels
                .into_iter()
                .map(|l| LabelPair {
                    name: l.name,
                    value: l.value,
                })
                .collect(),
            samples,
        });
    }
    Ok(PushRequest { series })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(series: usize, samples: usize, labels: usize) -> Vec<u8> {
        let one = RawProfileSeries {
            labels: vec![
                LabelPair {
                    name: "a".into(),
                    value: "b".into()
                };
                labels
            ],
            samples: vec![
                RawSample {
                    raw_profile: vec![1],
                    id: String::new()
                };
                samples
            ],
        };
        PushRequest {
            series: vec![one; series],
        }
        .encode_to_vec()
    }

    #[test]
    fn limits_are_counted_before_decoding() {
        assert_eq!(decode(&request(256, 1, 128)).unwrap().series.len(), 256);
        let e = |b: &[u8]| decode(b).unwrap_err().to_string();
        assert_eq!(
            e(&request(257, 0, 0)),
            "the PushRequest has more than 256 series; send smaller requests"
        );
        assert!(e(&request(1, 1, 129)).contains("128 labels in one series"));
        assert!(e(&request(2, 129, 0)).contains("256 samples"));
        assert!(e(b"\x0a\x05\x01").contains("not a valid push.v1.PushRequest"));
    }

    #[test]
    fn json_reads_as_connect_writes_it() {
        let r = decode_json(
            br#"{"series":[{"labels":[{"name":"service_name","value":"app"}],
                "samples":[{"rawProfile":"AQID","ID":"x"},{"raw_profile":"-_8"}]}]}"#,
        )
        .unwrap();
        assert_eq!(r.series[0].labels[0].value, "app");
        assert_eq!(r.series[0].samples[0].raw_profile, [1, 2, 3]);
        assert_eq!(r.series[0].samples[0].id, "x");
        assert_eq!(r.series[0].samples[1].raw_profile, [0xfb, 0xff]);
        let e = decode_json(br#"{"series":[{"samples":[{"rawProfile":"!"}]}]}"#).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("series 0 sample 0: rawProfile is not base64")
        );
        assert!(decode_json(b"[").is_err());
    }
}
