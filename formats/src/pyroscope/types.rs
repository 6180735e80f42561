//! What a Pyroscope profile is: the kind of its frames (from `spyName` or
//! `process.runtime.name`), and what its values weigh: CPU time, or
//! another type (heap, allocations, lock waits, goroutines, wall time)
//! kept under its `sample_type` label, which queries read only when they
//! name it ([`kiln_model::sample_type_value`]).

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
    /// `sum` or `average`: an average is a snapshot (goroutines, heap in
    /// use), a gauge.
    aggregation: Option<String>,
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

    /// Whether the SDK says the type is averaged, not summed.
    fn averaged(&self, sample_type: &str) -> bool {
        self.0
            .get(sample_type)
            .and_then(|c| c.aggregation.as_deref())
            == Some("average")
    }
}

/// How a pprof's samples are read: its CPU time, when it has any, and
/// each of its other value types.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Picked {
    /// CPU time: each sample counts its value at this index, each standing
    /// for this many nanoseconds.
    pub cpu: Option<(usize, u64)>,
    /// The other types, each kept under its `sample_type`.
    pub typed: Vec<Typed>,
}

/// A value type other than CPU time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Typed {
    /// The value's index in each sample.
    pub index: usize,
    /// The `sample_type` label's value (the SDK's display name).
    pub sample_type: String,
    /// Whether it is a snapshot (heap in use, goroutines): stamped once.
    pub gauge: bool,
}

/// What each value of a pprof of `types` weighs:
///
/// - CPU: a `samples` or `count` type beside a `cpu` period type (Go's
///   CPU profiles, `samples/count` and `cpu/nanoseconds` with a 10 ms
///   period: the samples count, and the `cpu` column, the same time in
///   nanoseconds, is not kept twice); else a `cpu` type in nanoseconds,
///   period 1 (pyroscope-io's profiles);
/// - every other value type (heap, mutex, block, goroutines, wall time)
///   under its `sample_type`, named as `sample_type_config` shows it.
pub(crate) fn pick(types: &Types<'_>, config: &SampleTypeConfig) -> Picked {
    let names: Vec<&str> = types.values.iter().map(|(t, _)| config.name(t)).collect();
    let (period_type, _, period) = types.period;
    let cpu_ns = types
        .values
        .iter()
        .zip(&names)
        .position(|((_, unit), name)| *name == "cpu" && *unit == "nanoseconds");
    let counted = names
        .iter()
        .position(|n| *n == "samples" || *n == "count")
        .filter(|_| period_type == "cpu")
        .zip(u64::try_from(period).ok().filter(|&p| p > 0));
    let cpu = counted.or(cpu_ns.map(|index| (index, 1)));
    let typed = names
        .iter()
        .enumerate()
        .filter(|&(index, _)| {
            Some(index) != cpu.map(|(i, _)| i) && !(cpu.is_some() && Some(index) == cpu_ns)
        })
        .filter_map(|(index, name)| {
            let sample_type = kiln_model::sample_type_value(name)?;
            let gauge = kiln_model::is_gauge_sample_type(&sample_type)
                || config.averaged(types.values[index].0);
            Some(Typed {
                index,
                sample_type,
                gauge,
            })
        })
        .collect();
    Picked { cpu, typed }
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

    fn typed(index: usize, sample_type: &str, gauge: bool) -> Typed {
        Typed {
            index,
            sample_type: sample_type.into(),
            gauge,
        }
    }

    #[test]
    fn cpu_and_every_other_type_are_picked() {
        let none = SampleTypeConfig::default();
        let go_cpu = types(
            &[("samples", "count"), ("cpu", "nanoseconds")],
            ("cpu", "nanoseconds", 10_000_000),
        );
        assert_eq!(
            pick(&go_cpu, &none),
            Picked {
                cpu: Some((0, 10_000_000)),
                typed: vec![],
            }
        );
        let py_cpu = types(
            &[("cpu", "nanoseconds")],
            ("cpu", "nanoseconds", 10_000_000),
        );
        assert_eq!(pick(&py_cpu, &none).cpu, Some((0, 1)));
        let sampler = types(
            &[("cpu", "nanoseconds"), ("wall", "nanoseconds")],
            ("cpu", "nanoseconds", 10_000_000),
        );
        assert_eq!(
            pick(&sampler, &none),
            Picked {
                cpu: Some((0, 1)),
                typed: vec![typed(1, "wall", false)],
            }
        );
        let heap = types(
            &[
                ("alloc_objects", "count"),
                ("alloc_space", "bytes"),
                ("inuse_objects", "count"),
                ("inuse_space", "bytes"),
            ],
            ("space", "bytes", 524288),
        );
        assert_eq!(
            pick(&heap, &none),
            Picked {
                cpu: None,
                typed: vec![
                    typed(0, "alloc_objects", false),
                    typed(1, "alloc_space", false),
                    typed(2, "inuse_objects", true),
                    typed(3, "inuse_space", true),
                ],
            }
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
            pick(&mutex, &config).typed,
            [
                typed(0, "mutex_count", false),
                typed(1, "mutex_duration", false)
            ]
        );
        let goroutines = types(&[("goroutine", "count")], ("goroutine", "count", 1));
        let averaged: SampleTypeConfig =
            serde_json::from_str(r#"{"goroutine":{"units":"goroutines","aggregation":"average"}}"#)
                .unwrap();
        assert_eq!(
            pick(&goroutines, &averaged).typed,
            [typed(0, "goroutine", true)]
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
