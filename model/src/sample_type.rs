//! Weights other than CPU time: the `sample_type` label.
//!
//! Kiln's own samples are CPU time (or off-CPU time, or GPU weights, each
//! with its own label). Profiles from other producers (OTLP, Pyroscope's
//! SDKs) also weigh allocations, heap in use, lock waits, wall time,
//! goroutines. Such a sample carries `sample_type=<type>`, and a query
//! reads it only when it filters on `sample_type`: summed with CPU samples
//! it would draw bytes and nanoseconds of waiting as CPU. CPU samples never
//! carry the label, so CPU from every source merges in one flamegraph.

use crate::GpuWeight;
use crate::label_names::SAMPLE_TYPE;

/// The most bytes of a `sample_type` value; a longer producer's name is
/// cut (it is a label value like any other).
pub const MAX_SAMPLE_TYPE_LEN: usize = 64;

/// The `sample_type` value of a producer's type name: lowercase, with
/// `-`, `.`, `/` and spaces as `_` (`alloc-space` and `alloc_space` are one
/// type), cut to [`MAX_SAMPLE_TYPE_LEN`] bytes; `None` for an empty name.
pub fn sample_type_value(name: &str) -> Option<String> {
    let mut value: String = name
        .trim()
        .chars()
        .map(|c| match c {
            '-' | '.' | '/' | ' ' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    if value.len() > MAX_SAMPLE_TYPE_LEN {
        let mut end = MAX_SAMPLE_TYPE_LEN;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
    (!value.is_empty()).then_some(value)
}

/// Whether samples of `sample_type` are snapshots (heap in use,
/// goroutines alive) rather than events: a range then holds each label
/// set's latest reading, not the sum of every one (an hour of 10 s heap
/// snapshots read as 360 heaps).
pub fn is_gauge_sample_type(sample_type: &str) -> bool {
    matches!(
        sample_type,
        "inuse_objects" | "inuse_space" | "goroutine" | "goroutines" | "live_bytes"
    )
}

/// Whether a query filtering on `filters` reads gauges: it names a gauge
/// sample type, or GPU device memory live at snapshots' ends.
pub fn filters_read_a_gauge<'a>(filters: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    filters.into_iter().any(|(name, value)| {
        (name == SAMPLE_TYPE && is_gauge_sample_type(value))
            || (name == GpuWeight::LABEL && value == GpuWeight::LiveBytes.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_normalized_and_bounded() {
        assert_eq!(
            sample_type_value(" Alloc-Space ").as_deref(),
            Some("alloc_space")
        );
        assert_eq!(sample_type_value("wall").as_deref(), Some("wall"));
        assert_eq!(sample_type_value("  "), None);
        let long = "é".repeat(40);
        let cut = sample_type_value(&long).unwrap();
        assert!(cut.len() <= MAX_SAMPLE_TYPE_LEN && cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn gauges_are_snapshots() {
        assert!(is_gauge_sample_type("inuse_space"));
        assert!(is_gauge_sample_type("goroutine"));
        assert!(!is_gauge_sample_type("alloc_space"));
        assert!(!is_gauge_sample_type("wall"));
        assert!(filters_read_a_gauge([("sample_type", "inuse_objects")]));
        assert!(filters_read_a_gauge([("gpu_weight", "live_bytes")]));
        assert!(!filters_read_a_gauge([
            ("sample_type", "alloc_space"),
            ("host", "a")
        ]));
    }
}
