//! Pyroscope's application names and labels: `APP{key=value,…}` as
//! `/ingest`'s `name` carries them (Pyroscope's `segment.ParseKey`: no
//! escaping, so a value holds no `,` or `}`; keys and values trimmed), and
//! the label pairs of a Push series; both become Kiln labels.

use kiln_model::{FrameKind, LabelSet, label_names as names};

use super::error::PyroscopeError;
use super::types;
use crate::error::snippet;

/// Longest application name taken.
const MAX_APP_NAME: usize = 1024;

/// Pyroscope's profile types, as the last `.`-separated part of an
/// application name gives them (`my.app.cpu`): such a suffix is the
/// profile's type, not part of the name.
const PROFILE_TYPES: &[&str] = &[
    "cpu",
    "itimer",
    "wall",
    "alloc_objects",
    "alloc_space",
    "inuse_objects",
    "inuse_space",
    "goroutines",
    "mutex_count",
    "mutex_duration",
    "block_count",
    "block_duration",
    "lock_count",
    "lock_duration",
    "alloc_in_new_tlab_objects",
    "alloc_in_new_tlab_bytes",
    "alloc_outside_tlab_objects",
    "alloc_outside_tlab_bytes",
    "live",
    "exceptions",
    "seconds",
    "bytes",
];

/// Pyroscope's label names that Kiln names otherwise (pprof sample labels
/// of pyroscope-io's `report_thread_name`/`report_thread_id`), and those
/// left out (`""`): a span's id would make a label set per request.
pub(crate) const SAMPLE_LABEL_RENAMES: &[(&str, &str)] = &[
    ("thread_name", names::THREAD),
    ("thread_id", names::TID),
    ("span_id", ""),
];

/// What a request's name and labels say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Series {
    /// The labels every sample gets: `service` (the application) and the
    /// sender's tags.
    pub labels: LabelSet,
    /// The profile type the name's suffix or `__name__` gives (`cpu`,
    /// `process_cpu`, `memory`, `alloc_space`, …), when one does.
    pub profile_type: Option<String>,
    /// The frame kind `process.runtime.name` gives, when it does.
    pub runtime_kind: Option<FrameKind>,
}

impl Series {
    /// Adds the sender's label `name`=`value`, as Kiln names it: the
    /// application (`service_name`) as `service`, `__name__` as the
    /// profile type, `process.runtime.name` as the frame kind; the SDKs'
    /// bookkeeping (`__session_id__` and other `__` names, `otel.scope.*`,
    /// `process.runtime.version`, `pyroscope_spy`) left out; the rest
    /// kept as named.
    pub(crate) fn add(&mut self, name: &str, value: &str) {
        match name {
            "service_name" => self.labels.insert(names::SERVICE, value),
            "__name__" => self.profile_type = Some(value.to_owned()),
            "process.runtime.name" => self.runtime_kind = types::runtime_kind(value),
            "thread_name" => self.labels.insert(names::THREAD, value),
            "thread_id" => self.labels.insert(names::TID, value),
            "otel.scope.name"
            | "otel.scope.version"
            | "process.runtime.version"
            | "pyroscope_spy" => {}
            _ if name.starts_with("__") => {}
            _ => self.labels.insert(name, value),
        }
    }
}

/// Reads `/ingest`'s `name`: `APP`, `APP{}`, or `APP{key=value,…}`, with
/// blanks around names and values ignored. A last `.`-separated part of
/// `APP` that is a Pyroscope profile type is the profile type (`app.cpu`);
/// any other is part of the name (`my.app`).
pub(crate) fn parse(name: &str) -> Result<Series, PyroscopeError> {
    let bad = |problem: &str| PyroscopeError::Name {
        name: snippet(name),
        problem: problem.to_owned(),
    };
    let (app, tags) = match name.split_once('{') {
        None => (name, None),
        Some((app, rest)) => {
            let (tags, after) = rest
                .split_once('}')
                .ok_or_else(|| bad("the \"{\" of its labels is never closed by \"}\""))?;
            if !after.trim().is_empty() {
                return Err(bad("text after the \"}\" that closes its labels"));
            }
            (app, Some(tags))
        }
    };
    let mut app = app.trim();
    if app.contains('}') {
        return Err(bad("a \"}\" without a \"{\" before it"));
    }
    let mut series = Series::default();
    if let Some((rest, suffix)) = app.rsplit_once('.')
        && PROFILE_TYPES.contains(&suffix)
    {
        app = rest;
        series.profile_type = Some(suffix.to_owned());
    }
    if app.len() > MAX_APP_NAME {
        return Err(bad(&format!(
            "the application name is longer than {MAX_APP_NAME} bytes"
        )));
    }
    for (i, tag) in tags.into_iter().flat_map(|t| t.split(',')).enumerate() {
        if tag.trim().is_empty() {
            continue;
        }
        let (key, value) = tag
            .split_once('=')
            .ok_or_else(|| bad(&format!("label {} ({:?}) has no \"=\"", i + 1, tag.trim())))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(bad(&format!("label {} has an empty name", i + 1)));
        }
        series.add(key, value.trim());
    }
    if !app.is_empty() {
        series.labels.insert(names::SERVICE, app);
    } else if series.labels.get(names::SERVICE).is_none() {
        return Err(bad("no application name (APP{key=value,…})"));
    }
    Ok(series)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(series: &Series) -> Vec<(&str, &str)> {
        series.labels.iter().collect()
    }

    #[test]
    fn names_tags_and_profile_types() {
        let s = parse("a.b.cpu{x=1, y = 2 }").unwrap();
        assert_eq!(labels(&s), [("service", "a.b"), ("x", "1"), ("y", "2")]);
        assert_eq!(s.profile_type.as_deref(), Some("cpu"));
        let s = parse("my.app").unwrap();
        assert_eq!(labels(&s), [("service", "my.app")]);
        assert_eq!(s.profile_type, None);
        let s = parse(" app {} ").unwrap();
        assert_eq!(labels(&s), [("service", "app")]);
        let s = parse("app.alloc_space{,a=,}").unwrap();
        assert_eq!(labels(&s), [("a", ""), ("service", "app")]);
        assert_eq!(s.profile_type.as_deref(), Some("alloc_space"));
    }

    /// What pyroscope-go v1.5.0 puts in its names.
    #[test]
    fn sdk_bookkeeping_is_left_out() {
        let s = parse(
            "kiln-go{__session_id__=6f2c,otel.scope.name=com.grafana.pyroscope/go,\
             otel.scope.version=1.5.0,process.runtime.name=go,process.runtime.version=go1.26,\
             env=test,thread_name=main}",
        )
        .unwrap();
        assert_eq!(
            labels(&s),
            [("env", "test"), ("service", "kiln-go"), ("thread", "main")]
        );
        assert_eq!(s.runtime_kind, Some(FrameKind::Go));
    }

    #[test]
    fn bad_names_say_why() {
        let msg = |name| parse(name).unwrap_err().to_string();
        assert_eq!(
            msg("app{a=1"),
            "name \"app{a=1\": the \"{\" of its labels is never closed by \"}\""
        );
        assert!(msg("app{a}").contains("label 1 (\"a\") has no \"=\""));
        assert!(msg("app{=1}").contains("label 1 has an empty name"));
        assert!(msg("app{a=1}x").contains("text after"));
        assert!(msg("{a=1}").contains("no application name"));
        assert!(msg("").contains("no application name"));
        assert!(msg("a}").contains("without a"));
        assert!(msg(&"x".repeat(2000)).contains("longer than 1024"));
        // The application may come from the labels instead.
        let s = parse("{service_name=svc}").unwrap();
        assert_eq!(labels(&s), [("service", "svc")]);
    }
}
