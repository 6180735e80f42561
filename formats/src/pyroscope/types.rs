//! What a Pyroscope profile is: the kind of its frames (from `spyName` or
//! `process.runtime.name`), and whether it is CPU time, the one type Kiln
//! stores for now.
//!
//! Kiln's store has no sample types other than CPU time yet (design
//! milestone M6): a query sums every sample as CPU. So only CPU profiles
//! are kept; heap, mutex, block, goroutine and wall-clock profiles are
//! answered 200 and left out (the SDKs log every non-200 as an error, and
//! pyroscope-go sends heap profiles by default), each named in
//! [`super::PyroscopeImported::skipped`].

use std::collections::HashMap;

use kiln_model::FrameKind;
use serde::Deserialize;

use crate::pprof::Types;

/// The frame kind of a Pyroscope `spyName`.
pub(crate) fn spy_kind(spy: &str) -> Option<FrameKind> {
    Some(match spy {
        "pyspy" => FrameKind::Python,
        "gospy" => FrameKind::Go,
        "rbspy" => FrameKind::Ruby,
        "phpspy" => FrameKind::Php,
        "dotnetspy" => FrameKind::Dotnet,
        "nodespy" => FrameKind::V8,
        "javaspy" => FrameKind::Jvm,
        _ => return None,
    })
}

/// The frame kind of an OpenTelemetry `process.runtime.name`, as the
/// newer SDKs label their series.
pub(crate) fn runtime_kind(runtime: &str) -> Option<FrameKind> {
    Some(match runtime.to_ascii_lowercase().as_str() {
        "cpython" | "python" | "pypy" => FrameKind::Python,
        "go" => FrameKind::Go,
        "ruby" => FrameKind::Ruby,
        "php" => FrameKind::Php,
        "dotnet" | ".net" => FrameKind::Dotnet,
        "nodejs" | "node" => FrameKind::V8,
        "java" | "jvm" => FrameKind::Jvm,
        _ => return None,
    })
}

/// Pyroscope's `sample_type_config` part: per sample type, how the SDK
/// wants it shown. Only `display-name` matters to Kiln (it renames a
/// type, `contentions` → `mutex_count`).
#[derive(Debug, Default, Deserialize)]
#[serde(transparent)]
pub(crate) struct SampleTypeConfig(HashMap<String, TypeConfig>);

#[derive(Debug, Default, Deserialize)]
struct TypeConfig {
    #[serde(rename = "display-name")]
    display_name: Option<String>,
}

impl SampleTypeConfig {
    /// The name a sample type is shown by.
    fn name<'a>(&'a self, sample_type: &'a str) -> &'a str {
        self.0
            .get(sample_type)
            .and_then(|c| c.display_name.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or(sample_type)
    }
}

/// How a pprof's samples are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pick {
    /// CPU time: each sample counts its value `index`, each standing for
    /// `period_ns`.
    Cpu { index: usize, period_ns: u64 },
    /// Not CPU time: left out, named as it is (`alloc_objects,
    /// alloc_space`).
    Other(String),
}

/// Whether a pprof of `types` is CPU time, and which value counts:
///
/// - a `samples` or `count` type beside a `cpu` period type: sample
///   counts of that period (Go's CPU profiles, `samples/count` and
///   `cpu/nanoseconds` with a 10 ms `cpu/nanoseconds` period);
/// - else a `cpu` type in nanoseconds: CPU nanoseconds, period 1
///   (pyroscope-io's py-spy and stack-sampler profiles);
/// - anything else is another kind of profile (heap, mutex, block,
///   goroutines, wall clock).
pub(crate) fn pick(types: &Types<'_>, config: &SampleTypeConfig) -> Pick {
    let names: Vec<&str> = types.values.iter().map(|(t, _)| config.name(t)).collect();
    let (period_type, _, period) = types.period;
    if period_type == "cpu"
        && let Some(index) = names.iter().position(|n| *n == "samples" || *n == "count")
        && let Ok(period_ns) = u64::try_from(period)
        && period_ns > 0
    {
        return Pick::Cpu { index, period_ns };
    }
    if let Some(index) = types
        .values
        .iter()
        .zip(&names)
        .position(|((_, unit), name)| *name == "cpu" && *unit == "nanoseconds")
    {
        return Pick::Cpu {
            index,
            period_ns: 1,
        };
    }
    Pick::Other(names.join(", "))
}

/// Whether a profile type named by an application name's suffix or a Push
/// series' `__name__` is CPU time (or says nothing: read the pprof's own
/// types then).
pub(crate) fn is_cpu_or_unknown(profile_type: Option<&str>) -> bool {
    matches!(profile_type, None | Some("cpu" | "itimer" | "process_cpu"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types<'a>(values: &[(&'a str, &'a str)], period: (&'a str, &'a str, i64)) -> Types<'a> {
        Types {
            values: values.to_vec(),
            period,
        }
    }

    #[test]
    fn cpu_profiles_are_picked_and_others_named() {
        let none = SampleTypeConfig::default();
        let go_cpu = types(
            &[("samples", "count"), ("cpu", "nanoseconds")],
            ("cpu", "nanoseconds", 10_000_000),
        );
        assert_eq!(
            pick(&go_cpu, &none),
            Pick::Cpu {
                index: 0,
                period_ns: 10_000_000
            }
        );
        let py_cpu = types(
            &[("cpu", "nanoseconds")],
            ("cpu", "nanoseconds", 10_000_000),
        );
        assert_eq!(
            pick(&py_cpu, &none),
            Pick::Cpu {
                index: 0,
                period_ns: 1
            }
        );
        let sampler = types(
            &[("cpu", "nanoseconds"), ("wall", "nanoseconds")],
            ("cpu", "nanoseconds", 10_000_000),
        );
        assert_eq!(
            pick(&sampler, &none),
            Pick::Cpu {
                index: 0,
                period_ns: 1
            }
        );
        let heap = types(
            &[("alloc_objects", "count"), ("alloc_space", "bytes")],
            ("space", "bytes", 524288),
        );
        assert_eq!(
            pick(&heap, &none),
            Pick::Other("alloc_objects, alloc_space".into())
        );
        let mutex = types(
            &[("contentions", "count"), ("delay", "nanoseconds")],
            ("contentions", "count", 1),
        );
        let config: SampleTypeConfig = serde_json::from_str(
            r#"{"contentions":{"units":"lock_samples","display-name":"mutex_count"},
                "delay":{"units":"lock_nanoseconds","display-name":"mutex_duration"}}"#,
        )
        .unwrap();
        assert_eq!(
            pick(&mutex, &config),
            Pick::Other("mutex_count, mutex_duration".into())
        );
    }

    #[test]
    fn kinds_by_spy_and_runtime() {
        assert_eq!(spy_kind("gospy"), Some(FrameKind::Go));
        assert_eq!(spy_kind("pyspy"), Some(FrameKind::Python));
        assert_eq!(spy_kind("ebpfspy"), None);
        assert_eq!(runtime_kind("cpython"), Some(FrameKind::Python));
        assert_eq!(runtime_kind("go"), Some(FrameKind::Go));
    }
}
