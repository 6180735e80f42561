//! OpenTelemetry attributes → Kiln labels.
//!
//! A sample's labels are its resource's attributes, then its scope's, its
//! profile's and its own, a later one winning over an earlier one of the
//! same key. The keys Kiln has a name of its own for are renamed (so that
//! OTLP, the agent and imports filter alike: `host`, `process`, `pid`, …),
//! a few that would only multiply label sets or repeat another are
//! dropped, and every other key is kept as sent.

use std::collections::BTreeMap;

use kiln_model::{LabelSet, MAX_LABELS, label_names as names};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

use super::dictionary::Dictionary;
use super::error::ProfileProblem;
use super::warnings::Warnings;

/// OpenTelemetry attribute → Kiln label name.
const RENAMED: [(&str, &str); 11] = [
    ("host.name", names::HOST),
    ("service.name", names::SERVICE),
    ("container.id", names::CONTAINER),
    ("container.name", names::CONTAINER_NAME),
    ("k8s.container.name", names::CONTAINER_NAME),
    ("k8s.pod.name", names::POD),
    ("k8s.namespace.name", names::NAMESPACE),
    ("process.pid", names::PID),
    ("process.executable.name", names::PROCESS),
    ("thread.name", names::THREAD),
    ("thread.id", names::TID),
];

/// Attributes that are no labels: a label set per CPU shows nothing Kiln
/// shows; the path repeats `process`; build ids and frame types describe
/// mappings and locations, not samples.
const DROPPED: [&str; 4] = [
    "cpu.logical_number",
    "process.executable.path",
    "profile.frame.type",
    "process.runtime.description",
];

/// The location attribute naming a frame's type (semantic conventions).
pub(super) const FRAME_TYPE: &str = "profile.frame.type";

/// Attributes by their OpenTelemetry key, values as label text; a later
/// insert wins.
pub(super) type Raw = BTreeMap<String, String>;

/// Adds a resource's or scope's attributes to `raw`.
pub(super) fn add_own(
    raw: &mut Raw,
    dict: &Dictionary<'_>,
    attributes: &[KeyValue],
    field: &dyn Fn() -> String,
    warnings: &mut Warnings,
) -> Result<(), ProfileProblem> {
    for (i, kv) in attributes.iter().enumerate() {
        let at = || format!("{}.attributes[{i}]", field());
        let key = dict.key_of(kv, at)?;
        insert(raw, dict, key, kv.value.as_ref(), &at, warnings)?;
    }
    Ok(())
}

/// Adds the attribute-table entries `indices` to `raw`.
pub(super) fn add_indexed(
    raw: &mut Raw,
    dict: &Dictionary<'_>,
    indices: &[i32],
    field: &dyn Fn() -> String,
    warnings: &mut Warnings,
) -> Result<(), ProfileProblem> {
    for (i, &index) in indices.iter().enumerate() {
        let at = || format!("{}.attributeIndices[{i}]", field());
        if let Some((key, value)) = dict.attribute(index, at)? {
            insert(raw, dict, key, value, &at, warnings)?;
        }
    }
    Ok(())
}

fn insert(
    raw: &mut Raw,
    dict: &Dictionary<'_>,
    key: &str,
    value: Option<&AnyValue>,
    field: &dyn Fn() -> String,
    warnings: &mut Warnings,
) -> Result<(), ProfileProblem> {
    if key.is_empty() || DROPPED.contains(&key) || key.starts_with("process.executable.build_id.") {
        return Ok(());
    }
    let text = match value.and_then(|v| v.value.as_ref()) {
        None => None,
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        Some(any_value::Value::StringValueStrindex(_)) => {
            dict.string_value(value, field)?.map(str::to_owned)
        }
        Some(any_value::Value::IntValue(n)) => Some(n.to_string()),
        Some(any_value::Value::BoolValue(b)) => Some(b.to_string()),
        // Rust's Display of a float is its shortest round-trip form.
        Some(any_value::Value::DoubleValue(d)) => Some(d.to_string()),
        Some(
            any_value::Value::ArrayValue(_)
            | any_value::Value::KvlistValue(_)
            | any_value::Value::BytesValue(_),
        ) => {
            warnings.once(format!(
                "attribute {key:?} is an array, key-value list or bytes: not kept as a label"
            ));
            None
        }
    };
    match text.filter(|t| !t.is_empty()) {
        Some(text) => raw.insert(key.to_owned(), text),
        // An empty value says nothing; it also unsets an earlier one.
        None => raw.remove(key),
    };
    Ok(())
}

/// The label set of `raw`: renamed, and cut to [`MAX_LABELS`] (the
/// renamed labels first, then by name), with a warning for what was left
/// out.
pub(super) fn labels(raw: &Raw, extra: Option<(&str, &str)>, warnings: &mut Warnings) -> LabelSet {
    let mut renamed: Vec<(&str, &str)> = Vec::new();
    let mut kept: Vec<(&str, &str)> = Vec::new();
    for (key, value) in raw {
        match RENAMED.iter().find(|(otel, _)| otel == key) {
            Some((_, name)) => renamed.push((name, value)),
            None => kept.push((key, value)),
        }
    }
    let mut set = LabelSet::new();
    let extra = extra.into_iter();
    let all = extra.chain(renamed).chain(kept);
    let mut dropped = 0usize;
    for (name, value) in all {
        if set.get(name).is_some() {
            // Two attributes of one Kiln name (container.name and
            // k8s.container.name): the later one, in key order, wins.
            set.insert(name, value);
        } else if set.len() < MAX_LABELS {
            set.insert(name, value);
        } else {
            dropped += 1;
        }
    }
    if dropped > 0 {
        warnings.once(format!(
            "samples with more than {MAX_LABELS} attributes: {dropped} left out"
        ));
    }
    set
}

/// Bytes a label set costs: what [`super::limits::MAX_CONVERTED_BYTES`]
/// counts.
pub(super) fn bytes_of(labels: &LabelSet) -> usize {
    labels.iter().map(|(n, v)| n.len() + v.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_are_renamed_and_the_rest_kept() {
        let mut raw = Raw::new();
        for (k, v) in [
            ("host.name", "web-1"),
            ("k8s.deployment.name", "api"),
            ("thread.name", "worker"),
        ] {
            raw.insert(k.into(), v.into());
        }
        let mut warnings = Warnings::default();
        let set = labels(&raw, Some(("device_kind", "off_cpu")), &mut warnings);
        let pairs: Vec<_> = set.iter().collect();
        assert_eq!(
            pairs,
            [
                ("device_kind", "off_cpu"),
                ("host", "web-1"),
                ("k8s.deployment.name", "api"),
                ("thread", "worker"),
            ]
        );
    }

    #[test]
    fn past_the_label_limit_renamed_ones_are_kept_first() {
        let mut raw = Raw::new();
        for i in 0..100 {
            raw.insert(format!("a{i:03}"), "x".into());
        }
        raw.insert("service.name".into(), "svc".into());
        let mut warnings = Warnings::default();
        let set = labels(&raw, None, &mut warnings);
        assert_eq!(set.len(), MAX_LABELS);
        assert_eq!(set.get("service"), Some("svc"));
        assert_eq!(warnings.len(), 1);
    }
}
