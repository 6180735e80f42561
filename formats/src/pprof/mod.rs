//! pprof profiles (`profile.proto`), gzip-compressed as pprof writes them,
//! or not.
//!
//! - **Count.** A sample counts the value of the sample type named
//!   `samples` or `count`; without one, the value of the first sample type
//!   (pprof's convention puts the count first).
//! - **Period.** When the count is in `nanoseconds` (a CPU profile that
//!   records only time), a count is one nanosecond: the batch's period is 1.
//!   Otherwise, when the profile's period type is `cpu` or its unit is
//!   `nanoseconds` (Go's CPU profiles: `cpu/nanoseconds`, period 10 ms),
//!   the period is the profile's; else [`ImportOptions::default_period_ns`].
//! - **Stacks.** A sample's locations are leaf first; each location's lines
//!   are innermost first (the last line is the function the others were
//!   inlined into). Both are reversed to put the stack root first. A line
//!   is a frame named after its function (its `name`, else its
//!   `system_name`), with the function's file, the line's number, and the
//!   mapping's file name as module; a location without lines is a frame
//!   named `0x<address>`. Frames of a kernel mapping are kernel frames.
//!   Stacks deeper than 4096 frames keep their 4095 leaf-most frames under
//!   a `[truncated]` frame of kind [`FrameKind::Truncated`].
//! - **Labels.** A sample's string labels, then the options' labels. Numeric
//!   labels (allocation sizes and the like) are left out: one per value
//!   would make a label set per sample.
//! - **Time.** `time_nanos`, or [`ImportOptions::now_ns`] when it is 0;
//!   spread over [`ImportOptions::time_window`] when one is given.
//! - **Kinds.** Frames are of [`ImportOptions::frame_kind`] (native unless
//!   the sender says what ran), those of a kernel mapping kernel frames.

mod limits;
pub mod proto;

use std::collections::HashMap;
use std::io::Read;

use flate2::read::MultiGzDecoder;
use kiln_model::{Frame, FrameKind, LabelSet};
use prost::Message;

use crate::builder::ImportBuilder;
use crate::error::ImportError;
use crate::limits::MAX_DECOMPRESSED_BYTES;
use crate::module;
use crate::options::{ImportOptions, Imported};
use crate::stack::{self, line_frame};
use proto::{Function, Location, Mapping, Profile};

/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Imports a pprof profile.
pub(crate) fn import(input: &[u8], options: &ImportOptions) -> Result<Imported, ImportError> {
    let mut budget = MAX_DECOMPRESSED_BYTES;
    let profile = decode(input, &mut budget)?;
    let tables = Tables::new(&profile)?;
    let count_value = count_value(&profile, &tables)?;
    let period_ns = if count_value.unit == "nanoseconds" {
        1
    } else {
        period_ns(&profile, &tables).unwrap_or(options.default_period_ns)
    };
    import_weighted(&profile, &tables, options, count_value.index, period_ns)
}

/// Decodes a pprof profile, gzip-compressed or not, decompressing at most
/// `budget` bytes (what is decompressed is taken off it: a sender of
/// several profiles shares one budget), and counting what decoding would
/// build before building any of it.
pub(crate) fn decode(input: &[u8], budget: &mut u64) -> Result<Profile, ImportError> {
    let decompressed;
    let bytes = if input.starts_with(&GZIP_MAGIC) {
        decompressed = gunzip(input, *budget)?;
        *budget -= decompressed.len() as u64;
        &decompressed[..]
    } else {
        input
    };
    limits::check(bytes)?;
    Profile::decode(bytes).map_err(ImportError::PprofDecode)
}

/// Decompresses `input`, refusing more than `limit` bytes of output.
fn gunzip(input: &[u8], limit: u64) -> Result<Vec<u8>, ImportError> {
    let mut out = Vec::new();
    MultiGzDecoder::new(input)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(ImportError::Gzip)?;
    if out.len() as u64 > limit {
        return Err(ImportError::TooLarge);
    }
    Ok(out)
}

/// A profile's sample types, `(type, unit)`, and its period type and
/// period, as named in its string table.
pub(crate) struct Types<'p> {
    /// Each sample value's type and unit, in order.
    pub values: Vec<(&'p str, &'p str)>,
    /// The period's type and unit (empty without one), and the period.
    pub period: (&'p str, &'p str, i64),
}

/// The sample and period types of `profile`.
pub(crate) fn types(profile: &Profile) -> Result<Types<'_>, ImportError> {
    let tables = Tables::new(profile)?;
    let values = count_values(profile, &tables)?
        .into_iter()
        .map(|v| (v.name, v.unit))
        .collect();
    let period = match profile.period_type {
        None => ("", "", profile.period),
        Some(t) => (
            tables.string(t.r#type, || "period type".to_owned())?,
            tables.string(t.unit, || "period unit".to_owned())?,
            profile.period,
        ),
    };
    Ok(Types { values, period })
}

/// Imports a decoded profile, each sample counting its value `index`,
/// standing for `period_ns` each.
pub(crate) fn import_value(
    profile: &Profile,
    options: &ImportOptions,
    index: usize,
    period_ns: u64,
) -> Result<Imported, ImportError> {
    let tables = Tables::new(profile)?;
    import_weighted(profile, &tables, options, index, period_ns)
}

/// Imports a decoded profile: samples count their value `index`.
fn import_weighted(
    profile: &Profile,
    tables: &Tables<'_>,
    options: &ImportOptions,
    index: usize,
    period_ns: u64,
) -> Result<Imported, ImportError> {
    let value_type = || {
        profile
            .sample_type
            .get(index)
            .and_then(|t| tables.string(t.r#type, String::new).ok())
            .unwrap_or("")
            .to_owned()
    };
    let timestamp_ns = match profile.time_nanos {
        0 => options.now_ns,
        t => t,
    };

    let location_frames = tables.location_frames(options.frame_kind)?;
    let mut out = ImportBuilder::new(options, period_ns);
    let mut frames = Vec::new();
    for (i, sample) in profile.sample.iter().enumerate() {
        if sample.value.len() != profile.sample_type.len() {
            return Err(ImportError::PprofValueCount {
                sample: i,
                values: sample.value.len(),
                types: profile.sample_type.len(),
            });
        }
        let value = sample.value[index];
        let count = u64::try_from(value).map_err(|_| ImportError::PprofNegativeCount {
            sample: i,
            value_type: value_type(),
            value,
        })?;
        stack(i, sample, &location_frames, &mut frames)?;
        let labels = sample_labels(i, sample, tables, options.label_renames)?;
        out.add_labeled(timestamp_ns, &frames, labels, count)?;
    }
    out.finish()
}

/// Puts the frames of `sample`'s stack in `frames`, root first (see
/// [`stack::leaf_first`]).
fn stack(
    i: usize,
    sample: &proto::Sample,
    location_frames: &HashMap<u64, Vec<Frame>>,
    frames: &mut Vec<Frame>,
) -> Result<(), ImportError> {
    stack::leaf_first(
        sample.location_id.iter().map(|&id| {
            location_frames
                .get(&id)
                .map(Vec::as_slice)
                .ok_or(ImportError::PprofUnknownLocation { sample: i, id })
        }),
        frames,
    )
}

/// The sample value that is the count.
struct CountValue<'p> {
    /// Its index in each sample's values.
    index: usize,
    /// Its type's name.
    name: &'p str,
    /// Its unit.
    unit: &'p str,
}

/// The sample type named `samples` or `count`, else the first one.
fn count_value<'p>(profile: &Profile, tables: &Tables<'p>) -> Result<CountValue<'p>, ImportError> {
    let mut types = count_values(profile, tables)?;
    let at = types
        .iter()
        .position(|t| t.name == "samples" || t.name == "count")
        .unwrap_or(0);
    Ok(types.swap_remove(at))
}

/// Every sample type, in order; an error without one.
fn count_values<'p>(
    profile: &Profile,
    tables: &Tables<'p>,
) -> Result<Vec<CountValue<'p>>, ImportError> {
    if profile.sample_type.is_empty() {
        return Err(ImportError::PprofNoSampleTypes);
    }
    let mut types = Vec::with_capacity(profile.sample_type.len());
    for (i, value_type) in profile.sample_type.iter().enumerate() {
        types.push(CountValue {
            index: i,
            name: tables.string(value_type.r#type, || format!("sample type {i} type"))?,
            unit: tables.string(value_type.unit, || format!("sample type {i} unit"))?,
        });
    }
    Ok(types)
}

/// The profile's period in nanoseconds, when its period type says it is a
/// CPU time or in nanoseconds.
fn period_ns(profile: &Profile, tables: &Tables<'_>) -> Option<u64> {
    let period_type = profile.period_type?;
    let name = tables.string(period_type.r#type, String::new).ok()?;
    let unit = tables.string(period_type.unit, String::new).ok()?;
    if name != "cpu" && unit != "nanoseconds" {
        return None;
    }
    u64::try_from(profile.period).ok().filter(|&p| p > 0)
}

/// A sample's string labels, renamed by `renames` (`(from, to)`; to `""`:
/// left out).
fn sample_labels(
    i: usize,
    sample: &proto::Sample,
    tables: &Tables<'_>,
    renames: &[(&str, &str)],
) -> Result<LabelSet, ImportError> {
    let mut labels = LabelSet::new();
    for (j, label) in sample.label.iter().enumerate() {
        if label.str == 0 {
            continue;
        }
        let key = tables.string(label.key, || format!("sample {i} label {j} key"))?;
        let value = tables.string(label.str, || format!("sample {i} label {j} value"))?;
        if key.is_empty() {
            return Err(ImportError::PprofEmptyLabelKey { sample: i });
        }
        let key = renames
            .iter()
            .find(|(from, _)| *from == key)
            .map_or(key, |(_, to)| *to);
        if !key.is_empty() {
            labels.insert(key, value);
        }
    }
    Ok(labels)
}

/// The profile's strings, and its functions, mappings and locations by id.
struct Tables<'p> {
    strings: &'p [String],
    functions: HashMap<u64, &'p Function>,
    mappings: HashMap<u64, &'p Mapping>,
    locations: &'p [Location],
}

impl<'p> Tables<'p> {
    fn new(profile: &'p Profile) -> Result<Self, ImportError> {
        Ok(Self {
            strings: &profile.string_table,
            functions: by_id("function", &profile.function, |f| f.id)?,
            mappings: by_id("mapping", &profile.mapping, |m| m.id)?,
            locations: &profile.location,
        })
    }

    /// String `index`; `field` names what refers to it, for the error.
    fn string(&self, index: i64, field: impl FnOnce() -> String) -> Result<&'p str, ImportError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.strings.get(i))
            .map(String::as_str)
            .ok_or_else(|| ImportError::PprofBadString {
                field: field(),
                index,
                len: self.strings.len(),
            })
    }

    /// Every location's frames, root first, by location id; frames not of
    /// a kernel mapping are of `kind`.
    fn location_frames(&self, kind: FrameKind) -> Result<HashMap<u64, Vec<Frame>>, ImportError> {
        let mut all = HashMap::with_capacity(self.locations.len());
        for location in self.locations {
            if location.id == 0 || all.contains_key(&location.id) {
                return Err(ImportError::PprofBadId {
                    what: "location",
                    id: location.id,
                });
            }
            all.insert(location.id, self.frames_of(location, kind)?);
        }
        Ok(all)
    }

    fn frames_of(&self, location: &Location, kind: FrameKind) -> Result<Vec<Frame>, ImportError> {
        let mapping_file = match location.mapping_id {
            0 => "",
            id => {
                let mapping = self
                    .mappings
                    .get(&id)
                    .ok_or(ImportError::PprofUnknownMapping {
                        location: location.id,
                        id,
                    })?;
                self.string(mapping.filename, || format!("mapping id {id} filename"))?
            }
        };
        let kind = if !mapping_file.is_empty() && module::is_kernel(mapping_file) {
            FrameKind::Kernel
        } else {
            kind
        };
        let module = Some(module::basename(mapping_file))
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        if location.line.is_empty() {
            return Ok(vec![Frame::Named {
                kind,
                function: format!("{:#x}", location.address),
                module,
                file: None,
                line: 0,
            }]);
        }
        let mut frames = Vec::with_capacity(location.line.len());
        // Innermost first in the profile; the caller comes first in a stack.
        for line in location.line.iter().rev() {
            let function =
                self.functions
                    .get(&line.function_id)
                    .ok_or(ImportError::PprofUnknownFunction {
                        location: location.id,
                        id: line.function_id,
                    })?;
            let fid = function.id;
            let mut name = self.string(function.name, || format!("function id {fid} name"))?;
            if name.is_empty() {
                name = self.string(function.system_name, || {
                    format!("function id {fid} system name")
                })?;
            }
            let file = self.string(function.filename, || format!("function id {fid} filename"))?;
            frames.push(line_frame(
                kind,
                name,
                location.address,
                module.clone(),
                file,
                line.line,
            ));
        }
        Ok(frames)
    }
}

/// `items` by id; ids must be nonzero and unique.
fn by_id<'p, T>(
    what: &'static str,
    items: &'p [T],
    id: impl Fn(&T) -> u64,
) -> Result<HashMap<u64, &'p T>, ImportError> {
    let mut map = HashMap::with_capacity(items.len());
    for item in items {
        let id = id(item);
        if id == 0 || map.insert(id, item).is_some() {
            return Err(ImportError::PprofBadId { what, id });
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).expect("gzip into memory");
        encoder.finish().expect("gzip into memory")
    }

    /// Guards the decompression-bomb limit, with a small one.
    #[test]
    fn gunzip_stops_at_the_limit() {
        let zeros = gzip(&[0u8; 4096]);
        assert_eq!(gunzip(&zeros, 4096).unwrap().len(), 4096);
        assert!(matches!(gunzip(&zeros, 4095), Err(ImportError::TooLarge)));
        assert_eq!(
            ImportError::TooLarge.to_string(),
            "pprof: gzip data decompresses to more than 256 MiB"
        );
    }

    #[test]
    fn concatenated_gzip_members_are_read_whole() {
        let mut two = gzip(b"ab");
        two.extend(gzip(b"cd"));
        assert_eq!(gunzip(&two, 100).unwrap(), b"abcd");
    }
}
