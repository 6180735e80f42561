//! Pyroscope's push API → Kiln batches: what Pyroscope's SDKs send.
//!
//! - [`import_ingest`]: `POST /ingest?name=APP{k=v,…}&from&until&format&sampleRate&spyName&units&aggregationType`,
//!   the older API that pyroscope-go (v1.5.0 included) and the older
//!   SDKs use. The body is a `multipart/form-data` pprof (part `profile`,
//!   and `sample_type_config` for types other than CPU, `multipart.rs`), a
//!   pprof (`format=pprof`, gzip-compressed or not), folded stacks
//!   (`format=folded`, `groups`, absent or anything unlisted) or stacks
//!   one per line (`format=lines`). Pyroscope's binary `trie`/`tree`, JFR
//!   and speedscope are refused, naming what to send instead.
//! - [`import_push`]: `POST /push.v1.PusherService/Push`, the Connect RPC
//!   of pyroscope-io 1.x and pyroscope-rs 2.x: a `push.v1.PushRequest`
//!   (`push.rs`) of series, each a label set and raw pprof profiles.
//!
//! **Labels** (`name.rs`): the application name is `service`, tags and
//! series labels are kept as named but for the SDKs' bookkeeping
//! (`__session_id__`, `otel.scope.*`, …); `thread_name` is `thread`,
//! `thread_id` is `tid`. **Frames** are of the kind `spyName` or
//! `process.runtime.name` says (Python, Go, Ruby, …; native otherwise).
//! **Time**: each profile's weight is spread over the seconds of the
//! window it covers (`from`–`until`, or the pprof's own time and
//! duration), as the agent stamps its samples.
//!
//! **Types** (`types.rs`): CPU profiles are CPU time, as the agent's
//! samples; heap, allocation, mutex, block, goroutine and wall-clock
//! values are kept under their `sample_type` label (`alloc_space`,
//! `mutex_duration`, …, as the SDK's `sample_type_config` names them),
//! which a query reads only when it names the type. Snapshots (heap in
//! use, goroutines) are stamped once, at the window's end, so a query
//! takes each label set's latest reading.

mod error;
pub mod multipart;
mod name;
pub mod push;
mod time;
mod types;

use kiln_model::{Batch, FrameKind};
use serde::Deserialize;

pub use error::PyroscopeError;

use crate::options::{DEFAULT_PERIOD_NS, ImportOptions, Imported};
use crate::{ImportError, collapsed, pprof, text};
use name::Series;
use types::SampleTypeConfig;

/// Most pprof bytes one request may decompress to, over all its
/// profiles.
pub const MAX_DECOMPRESSED_BYTES: u64 = 256 << 20;

/// Samples per second an SDK samples at when it does not say.
const DEFAULT_SAMPLE_RATE: u64 = 100;

/// The batch source of profiles without an application name.
const DEFAULT_SOURCE: &str = "pyroscope";

/// `/ingest`'s query parameters, as Pyroscope names them; each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct IngestQuery {
    /// `APP{key=value,…}`: the application, and tags.
    pub name: Option<String>,
    /// Start of the window the profile covers.
    pub from: Option<String>,
    /// Its end.
    pub until: Option<String>,
    /// `pprof`, `folded`, `lines`, … (see the module docs).
    pub format: Option<String>,
    /// Samples per second (folded and lines: the period).
    #[serde(rename = "sampleRate")]
    pub sample_rate: Option<String>,
    /// The profiler: `gospy`, `pyspy`, … (the frames' kind).
    #[serde(rename = "spyName")]
    pub spy_name: Option<String>,
    /// Folded and lines: the unit of the counts (`samples` for CPU).
    pub units: Option<String>,
    /// `sum` or `average` (folded and lines: an average is a snapshot).
    #[serde(rename = "aggregationType")]
    pub aggregation_type: Option<String>,
}

/// How a Push request is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushEncoding {
    /// `application/proto`.
    Proto,
    /// `application/json`.
    Json,
}

/// How a conversion stamps what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyroscopeOptions {
    /// Now, in nanoseconds since the Unix epoch: the batches' `sent_at_ns`
    /// and the time of profiles that say none.
    pub now_ns: i64,
}

/// What a request converted to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PyroscopeImported {
    /// The batches, ready to publish: one per profile and value type kept.
    pub batches: Vec<Batch>,
    /// The weights kept, summed (sample counts, or CPU nanoseconds).
    pub samples: u64,
    /// Sample rows of all batches (what ingest quotas meter).
    pub sample_rows: usize,
    /// Profiles in the request.
    pub profiles: usize,
    /// Profiles left out, and why: `series 1 sample 0 (pprof): no
    /// samples`.
    pub skipped: Vec<String>,
}

impl PyroscopeImported {
    fn keep(
        &mut self,
        imported: Result<Imported, ImportError>,
        what: &str,
    ) -> Result<(), PyroscopeError> {
        match imported {
            Ok(imported) => {
                self.samples = self.samples.saturating_add(imported.samples);
                self.sample_rows += imported.batch.samples.len();
                self.batches.push(imported.batch);
                Ok(())
            }
            // An idle program's profile has no samples: nothing to keep,
            // and nothing wrong.
            Err(ImportError::NoSamples | ImportError::Empty) => {
                self.skipped.push(format!("{what}: no samples"));
                Ok(())
            }
            Err(source) => Err(PyroscopeError::Profile {
                what: what.to_owned(),
                source,
            }),
        }
    }
}

/// Converts an `/ingest` request: its query, `Content-Type` and body
/// (already decompressed from its `Content-Encoding`).
///
/// # Errors
///
/// A [`PyroscopeError`] naming what is wrong: the name, a time, the
/// multipart body, the profile; [`PyroscopeError::is_unsupported`] for a
/// format Kiln does not read.
pub fn import_ingest(
    query: &IngestQuery,
    content_type: Option<&str>,
    body: &[u8],
    options: &PyroscopeOptions,
) -> Result<PyroscopeImported, PyroscopeError> {
    let series = name::parse(query.name.as_deref().unwrap_or(""))?;
    let now = options.now_ns;
    let from = time::parse("from", query.from.as_deref().unwrap_or(""), now)?;
    let until = time::parse("until", query.until.as_deref().unwrap_or(""), now)?;
    // A window that ends before it starts is a moment: its start.
    let window = Some((from, until.max(from)));
    let spy_kind = query.spy_name.as_deref().and_then(types::spy_kind);
    let kind = series
        .runtime_kind
        .or(spy_kind)
        .unwrap_or(FrameKind::Native);
    let sample_rate = match query.sample_rate.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_SAMPLE_RATE,
        Some(rate) => rate
            .parse::<u64>()
            .ok()
            .filter(|&r| r > 0)
            .ok_or_else(|| PyroscopeError::SampleRate(rate.to_owned()))?,
    };
    let content_type = content_type.unwrap_or("");
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let format = query.format.as_deref().unwrap_or("").to_ascii_lowercase();
    let mut out = PyroscopeImported::default();
    if essence == "multipart/form-data" {
        out.profiles = 1;
        let parts = multipart::parts(content_type, body)?;
        if parts.iter().any(|p| p.name == "prev_profile") {
            return Err(PyroscopeError::PrevProfile);
        }
        let profile = parts.iter().find(|p| p.name == "profile").ok_or_else(|| {
            PyroscopeError::NoProfilePart {
                parts: parts
                    .iter()
                    .map(|p| format!("{:?}", p.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        })?;
        let config = match parts.iter().find(|p| p.name == "sample_type_config") {
            None => SampleTypeConfig::default(),
            Some(part) => {
                serde_json::from_slice(part.body).map_err(PyroscopeError::SampleTypeConfig)?
            }
        };
        let pprofs = Pprofs {
            series: &series,
            kind,
            config: &config,
            options,
        };
        let what = "multipart part profile (pprof)";
        pprofs.import(
            profile.body,
            window,
            &mut { MAX_DECOMPRESSED_BYTES },
            what,
            &mut out,
        )?;
        return Ok(out);
    }
    if essence.starts_with("binary/octet-stream+") || matches!(format.as_str(), "trie" | "tree") {
        return Err(PyroscopeError::Unsupported(
            "Pyroscope's binary trie and tree formats are not read by Kiln: send \
             format=pprof or format=folded"
                .to_owned(),
        ));
    }
    match format.as_str() {
        "jfr" => {
            return Err(PyroscopeError::Unsupported(
                "JFR is not read by Kiln: have pyroscope-java send collapsed stacks instead \
                 (PYROSCOPE_FORMAT=collapsed, or Config.Builder.setFormat(Format.COLLAPSED)), \
                 or profile the JVM with kiln-agent"
                    .to_owned(),
            ));
        }
        "speedscope" => {
            return Err(PyroscopeError::Unsupported(
                "speedscope is not read by Kiln's Pyroscope ingest: send format=pprof or \
                 format=folded, or import the file with kiln import"
                    .to_owned(),
            ));
        }
        "pprof" => {
            out.profiles = 1;
            let pprofs = Pprofs {
                series: &series,
                kind,
                config: &SampleTypeConfig::default(),
                options,
            };
            pprofs.import(
                body,
                window,
                &mut { MAX_DECOMPRESSED_BYTES },
                "pprof",
                &mut out,
            )?;
            return Ok(out);
        }
        _ => {}
    }
    // Folded stacks or lines: the name's suffix and `units` say what the
    // counts are.
    out.profiles = 1;
    let lines = format == "lines";
    let what = if lines { "lines" } else { "folded stacks" };
    let units = query.units.as_deref().unwrap_or("samples");
    let profile_type = series.profile_type.as_deref();
    let sample_period_ns = (1_000_000_000 / sample_rate).max(1);
    let mut import_options = import_options(&series, kind, window, options);
    import_options.default_period_ns = sample_period_ns;
    // The name's suffix, else the units, say what the counts are: CPU
    // samples, wall-clock samples (also of the sample rate's period), or
    // another type in its own unit.
    let typed = match (profile_type, units) {
        (t, "" | "samples") if types::is_cpu_or_unknown(t) => None,
        (Some(t), _) if !types::is_cpu_or_unknown(Some(t)) => Some(t),
        (_, units) => Some(units),
    };
    if let Some(name) = typed.and_then(kiln_model::sample_type_value) {
        if name != "wall" {
            import_options.default_period_ns = 1;
        }
        let gauge = kiln_model::is_gauge_sample_type(&name)
            || query.aggregation_type.as_deref() == Some("average");
        import_options.time_window = snapshot_window(window, gauge);
        import_options
            .labels
            .insert(kiln_model::label_names::SAMPLE_TYPE, name);
    }
    let text = text::as_text(body).map_err(|source| PyroscopeError::Profile {
        what: what.to_owned(),
        source,
    })?;
    let imported = if lines {
        collapsed::import_lines(text, &import_options)
    } else {
        collapsed::import(text, &import_options)
    };
    out.keep(imported, what)?;
    Ok(out)
}

/// Converts a `push.v1.PusherService/Push` request's body (already
/// decompressed from its `Content-Encoding`).
///
/// # Errors
///
/// A [`PyroscopeError`]: a body that is not a `PushRequest`, past a
/// limit, or a raw profile that is not a pprof.
pub fn import_push(
    body: &[u8],
    encoding: PushEncoding,
    options: &PyroscopeOptions,
) -> Result<PyroscopeImported, PyroscopeError> {
    let request = match encoding {
        PushEncoding::Proto => push::decode(body)?,
        PushEncoding::Json => push::decode_json(body)?,
    };
    let mut out = PyroscopeImported::default();
    let mut budget = MAX_DECOMPRESSED_BYTES;
    let config = SampleTypeConfig::default();
    for (i, raw_series) in request.series.iter().enumerate() {
        let mut series = Series::default();
        for label in &raw_series.labels {
            series.add(label.name.trim(), label.value.trim());
        }
        let pprofs = Pprofs {
            series: &series,
            kind: series.runtime_kind.unwrap_or(FrameKind::Native),
            config: &config,
            options,
        };
        for (j, sample) in raw_series.samples.iter().enumerate() {
            out.profiles += 1;
            let what = format!("series {i} sample {j} (pprof)");
            pprofs.import(&sample.raw_profile, None, &mut budget, &what, &mut out)?;
        }
    }
    Ok(out)
}

/// The password of an HTTP basic auth `Authorization` header value,
/// `Basic base64(user:password)`, when it has a non-empty one: how
/// Pyroscope's SDKs send a credential (`BasicAuthPassword`,
/// `basic_auth_password`), which Kiln takes as the API key. The user is
/// not returned: Kiln ignores it.
pub fn basic_auth_password(header: &str) -> Option<String> {
    use base64::Engine;
    let encoded = header.strip_prefix("Basic ")?.trim();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (_user, password) = decoded.split_once(':')?;
    let password = password.trim();
    (!password.is_empty()).then(|| password.to_owned())
}

/// The import options of a profile of `series`.
fn import_options(
    series: &Series,
    kind: FrameKind,
    window: Option<(i64, i64)>,
    options: &PyroscopeOptions,
) -> ImportOptions {
    ImportOptions {
        labels: series.labels.clone(),
        source: series
            .labels
            .get(kiln_model::label_names::SERVICE)
            .unwrap_or(DEFAULT_SOURCE)
            .to_owned(),
        frame_kind: kind,
        time_window: window,
        label_renames: name::SAMPLE_LABEL_RENAMES,
        default_period_ns: DEFAULT_PERIOD_NS,
        ..ImportOptions::new(options.now_ns)
    }
}

/// The window a profile's weight is spread over: all of `window`, or for
/// a snapshot (`gauge`) only its end, so that every stack of one reading
/// shares the stamp a query of the gauge takes the latest of.
fn snapshot_window(window: Option<(i64, i64)>, gauge: bool) -> Option<(i64, i64)> {
    match (window, gauge) {
        (Some((_, end)), true) => Some((end, end)),
        (window, _) => window,
    }
}

/// What reading a request's pprofs shares: whose they are, how to stamp
/// them, and how much they may decompress to.
struct Pprofs<'a> {
    series: &'a Series,
    kind: FrameKind,
    config: &'a SampleTypeConfig,
    options: &'a PyroscopeOptions,
}

impl Pprofs<'_> {
    /// Reads one pprof into `out`: its CPU time, and each other value
    /// type under its `sample_type`. Without a `window`, the profile's own
    /// time and duration are its window.
    fn import(
        &self,
        bytes: &[u8],
        window: Option<(i64, i64)>,
        budget: &mut u64,
        what: &str,
        out: &mut PyroscopeImported,
    ) -> Result<(), PyroscopeError> {
        let failed = |source| PyroscopeError::Profile {
            what: what.to_owned(),
            source,
        };
        let profile = pprof::decode(bytes, budget).map_err(failed)?;
        if profile.sample.is_empty() {
            out.skipped.push(format!("{what}: no samples"));
            return Ok(());
        }
        let types = pprof::types(&profile).map_err(failed)?;
        let picked = types::pick(&types, self.config);
        let window = window.or_else(|| {
            (profile.time_nanos > 0).then(|| {
                let start = profile.time_nanos;
                (start, start.saturating_add(profile.duration_nanos.max(0)))
            })
        });
        let options = import_options(self.series, self.kind, window, self.options);
        if let Some((index, period_ns)) = picked.cpu {
            out.keep(
                pprof::import_value(&profile, &options, index, period_ns),
                what,
            )?;
        }
        for typed in picked.typed {
            let mut options = options.clone();
            options.time_window = snapshot_window(window, typed.gauge);
            options
                .labels
                .insert(kiln_model::label_names::SAMPLE_TYPE, typed.sample_type);
            out.keep(
                pprof::import_value(&profile, &options, typed.index, 1),
                what,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_passwords() {
        // base64("kiln:kiln_abc")
        assert_eq!(
            basic_auth_password("Basic a2lsbjpraWxuX2FiYw==").as_deref(),
            Some("kiln_abc")
        );
        // base64("kiln:"), base64("nocolon")
        assert_eq!(basic_auth_password("Basic a2lsbjo="), None);
        assert_eq!(basic_auth_password("Basic bm9jb2xvbg=="), None);
        assert_eq!(basic_auth_password("Bearer x"), None);
        assert_eq!(basic_auth_password("Basic !!"), None);
    }
}
