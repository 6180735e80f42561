//! A decoded request → Kiln batches, one profile at a time: a profile
//! with a problem is refused alone, the others are kept.
//!
//! Each profile is read twice: once to check it whole and count what it
//! would add (so that nothing of a refused profile reaches a batch, and a
//! batch is finished before a profile would take it past its limits),
//! then to add its samples. Frames of each location, mappings' file ids
//! and stacks' depths are worked out once per request and shared by its
//! profiles.

use std::collections::HashMap;
use std::sync::Arc;

use kiln_model::{Batch, Executable, Frame, FrameKind, LabelSet, label_names as names};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::profiles::v1development::{Profile, Sample};

use super::attributes::{self, Raw};
use super::dictionary::Dictionary;
use super::error::{OtlpError, ProfileProblem};
use super::frames::{self, LocationFrames, MappingInfo};
use super::limits::MAX_CONVERTED_BYTES;
use super::warnings::Warnings;
use super::{OtlpImported, OtlpOptions};
use crate::builder::{Entries, ImportBuilder};
use crate::options::DEFAULT_PERIOD_NS;
use crate::{stack, weights};

/// The batch source of resources without `host.name`.
const DEFAULT_SOURCE: &str = "otlp";

/// The frame of a sample with an empty stack (stack index 0), so that its
/// weight still counts in totals.
const NO_STACK: &str = "[no stack]";

/// Why a profile was not converted: its own problem, or one that ends the
/// whole request.
enum Failure {
    Profile(ProfileProblem),
    Request(OtlpError),
}

impl From<ProfileProblem> for Failure {
    fn from(p: ProfileProblem) -> Self {
        Failure::Profile(p)
    }
}

/// How a profile's samples weigh and are labelled.
struct SampleType {
    period_ns: u64,
    /// A label every sample gets (off-CPU samples' `device_kind`, other
    /// types' `sample_type`).
    extra: Option<(&'static str, String)>,
    /// Whether the samples are a snapshot (heap in use): all are then
    /// stamped at the profile's end, one reading per label set.
    gauge: bool,
}

/// A stack, checked.
#[derive(Clone)]
struct StackInfo {
    /// Its location indices, leaf first (index 0 left out: "none").
    locations: Arc<[i32]>,
    /// Frames once put together (at most `MAX_STACK_DEPTH`).
    depth: usize,
    /// Executables its address frames point into.
    executables: Arc<[Executable]>,
}

/// A profile checked and counted by the first pass.
struct Checked {
    sample_type: SampleType,
    /// Label sets, by the sample attribute indices they come from.
    label_sets: Vec<LabelSet>,
    /// Each sample's label set.
    sample_labels: Vec<u32>,
    entries: Entries,
    total: u64,
    executables: Vec<Executable>,
}

pub(super) fn convert(
    request: &ExportProfilesServiceRequest,
    options: &OtlpOptions,
    warnings: Warnings,
) -> Result<OtlpImported, OtlpError> {
    let dict = Dictionary::new(request.dictionary.as_ref());
    let mut c = Converter {
        dict,
        now_ns: options.now_ns,
        mappings: vec![None; dict.mappings.len()],
        locations: vec![None; dict.locations.len()],
        stacks: vec![None; dict.stacks.len()],
        converted_bytes: 0,
        warnings,
        open: Vec::new(),
        open_at: HashMap::new(),
        batches: Vec::new(),
    };
    let mut out = OtlpImported::default();
    for (r, resource_profiles) in request.resource_profiles.iter().enumerate() {
        let resource_path = format!("resourceProfiles[{r}]");
        let mut resource_raw = Raw::new();
        let resource_labels = match &resource_profiles.resource {
            Some(resource) => attributes::add_own(
                &mut resource_raw,
                &c.dict,
                &resource.attributes,
                &|| format!("{resource_path}.resource"),
                &mut c.warnings,
            ),
            None => Ok(()),
        };
        let source = resource_raw
            .get("host.name")
            .map_or(DEFAULT_SOURCE, String::as_str)
            .to_owned();
        for (s, scope_profiles) in resource_profiles.scope_profiles.iter().enumerate() {
            let scope_path = format!("{resource_path}.scopeProfiles[{s}]");
            let mut scope_raw = resource_raw.clone();
            let scope_labels = resource_labels
                .clone()
                .and_then(|()| match &scope_profiles.scope {
                    Some(scope) => attributes::add_own(
                        &mut scope_raw,
                        &c.dict,
                        &scope.attributes,
                        &|| format!("{scope_path}.scope"),
                        &mut c.warnings,
                    ),
                    None => Ok(()),
                });
            for (p, profile) in scope_profiles.profiles.iter().enumerate() {
                out.profiles += 1;
                let path = format!("{scope_path}.profiles[{p}]");
                let converted = match &scope_labels {
                    Err(problem) => Err(Failure::Profile(problem.clone())),
                    Ok(()) => c.profile(&source, &scope_raw, profile, &path, &mut out),
                };
                match converted {
                    Ok(()) => {}
                    Err(Failure::Profile(problem)) => {
                        out.rejected_profiles += 1;
                        if out.problems.len() < MAX_PROBLEMS {
                            out.problems.push(format!("{path}: {problem}"));
                        }
                    }
                    Err(Failure::Request(e)) => return Err(e),
                }
            }
        }
    }
    if out.profiles == 0 {
        return Err(OtlpError::NoProfiles);
    }
    let (batches, warnings) = c.finish();
    out.batches = batches;
    out.sample_rows = out.batches.iter().map(|b| b.samples.len()).sum();
    out.warnings = warnings.into_vec();
    Ok(out)
}

/// Problems kept for the answer; the rest are only counted.
const MAX_PROBLEMS: usize = 8;

struct Converter<'r> {
    dict: Dictionary<'r>,
    now_ns: i64,
    mappings: Vec<Option<Arc<MappingInfo>>>,
    locations: Vec<Option<Arc<LocationFrames>>>,
    stacks: Vec<Option<StackInfo>>,
    /// Bytes of frame names and label sets made so far.
    converted_bytes: usize,
    warnings: Warnings,
    /// Batches being filled, by (source, period).
    open: Vec<ImportBuilder>,
    open_at: HashMap<(String, u64), usize>,
    /// Batches finished because they were full.
    batches: Vec<Batch>,
}

impl Converter<'_> {
    /// Converts one profile into the open batches, or refuses it whole.
    fn profile(
        &mut self,
        source: &str,
        scope_raw: &Raw,
        profile: &Profile,
        path: &str,
        out: &mut OtlpImported,
    ) -> Result<(), Failure> {
        let checked = self.check(scope_raw, profile, path)?;
        let period_ns = checked.sample_type.period_ns;
        let key = (source.to_owned(), period_ns);
        let now_ns = self.now_ns;
        let fresh = || ImportBuilder::for_batch(source, now_ns, period_ns, LabelSet::new());
        if !fresh().fits(checked.entries, checked.total, 1) {
            return Err(ProfileProblem::TooManyEntries.into());
        }
        let at = match self.open_at.get(&key) {
            Some(&at) => at,
            None => {
                self.open.push(fresh());
                self.open_at.insert(key, self.open.len() - 1);
                self.open.len() - 1
            }
        };
        // Batches hold several profiles up to half their limits, so that
        // a worker's decode stays far within what it accepts.
        if !self.open[at].is_empty() && !self.open[at].fits(checked.entries, checked.total, 2) {
            let full = std::mem::replace(&mut self.open[at], fresh());
            if let Ok(imported) = full.finish() {
                self.batches.push(imported.batch);
            }
        }
        self.add(at, profile, &checked)?;
        out.samples = out.samples.saturating_add(checked.total);
        Ok(())
    }

    /// The first pass: every index, value and timestamp checked, the label
    /// sets made, what the profile adds counted.
    fn check(
        &mut self,
        scope_raw: &Raw,
        profile: &Profile,
        path: &str,
    ) -> Result<Checked, Failure> {
        let sample_type = self.sample_type(profile, path)?;
        let mut raw = scope_raw.clone();
        attributes::add_indexed(
            &mut raw,
            &self.dict,
            &profile.attribute_indices,
            &|| path.to_owned(),
            &mut self.warnings,
        )?;
        let mut by_attributes: HashMap<&[i32], u32> = HashMap::new();
        let mut label_sets = Vec::new();
        let mut sample_labels = Vec::with_capacity(profile.samples.len());
        let mut distinct_stacks: HashMap<i32, ()> = HashMap::new();
        let mut entries = Entries::default();
        let mut total = 0u64;
        let mut executables: Vec<Executable> = Vec::new();
        let mut without_weight = 0usize;
        for (i, sample) in profile.samples.iter().enumerate() {
            let labels = match by_attributes.get(sample.attribute_indices.as_slice()) {
                Some(&at) => at,
                None => {
                    let mut raw = raw.clone();
                    attributes::add_indexed(
                        &mut raw,
                        &self.dict,
                        &sample.attribute_indices,
                        &|| format!("samples[{i}]"),
                        &mut self.warnings,
                    )?;
                    let extra = sample_type.extra.as_ref().map(|(n, v)| (*n, v.as_str()));
                    let set = attributes::labels(&raw, extra, &mut self.warnings);
                    self.spend(attributes::bytes_of(&set))?;
                    label_sets.push(set);
                    let at = (label_sets.len() - 1) as u32;
                    by_attributes.insert(&sample.attribute_indices, at);
                    at
                }
            };
            sample_labels.push(labels);
            let stack = self.stack(sample.stack_index, i)?;
            if distinct_stacks.insert(sample.stack_index, ()).is_none() {
                entries.stacks += 1;
                entries.frames = entries.frames.saturating_add(stack.depth);
                entries.stack_frames = entries.stack_frames.saturating_add(stack.depth);
                for e in stack.executables.iter() {
                    if !executables.iter().any(|x| x.file_id == e.file_id) {
                        executables.push(e.clone());
                    }
                }
            }
            let mut rows = 0usize;
            let weighed = weigh(
                self.now_ns,
                profile,
                sample_type.gauge,
                i,
                sample,
                |_, count| {
                    rows += 1;
                    total = total
                        .checked_add(count)
                        .ok_or(ProfileProblem::CountOverflow)?;
                    Ok(())
                },
            )?;
            if !weighed {
                without_weight += 1;
            }
            entries.samples = entries.samples.saturating_add(rows);
        }
        if without_weight > 0 {
            self.warnings.once(format!(
                "{path}: {without_weight} samples have neither values nor timestamps: left out"
            ));
        }
        entries.label_sets = label_sets.len();
        Ok(Checked {
            sample_type,
            label_sets,
            sample_labels,
            entries,
            total,
            executables,
        })
    }

    /// The second pass: the checked profile's samples into batch `at`.
    fn add(&mut self, at: usize, profile: &Profile, checked: &Checked) -> Result<(), Failure> {
        let mut frames: Vec<Frame> = Vec::new();
        let mut frames_of: Option<i32> = None;
        for (i, sample) in profile.samples.iter().enumerate() {
            if frames_of != Some(sample.stack_index) {
                self.stack_frames(sample.stack_index, i, &mut frames)?;
                frames_of = Some(sample.stack_index);
            }
            let labels = &checked.label_sets[checked.sample_labels[i] as usize];
            let builder = &mut self.open[at];
            let mut added = Ok(());
            weigh(
                self.now_ns,
                profile,
                checked.sample_type.gauge,
                i,
                sample,
                |t, count| {
                    if added.is_ok() {
                        // Checked to fit before: an error here would be a bug
                        // in the count, and is the profile's refusal.
                        added = builder
                            .add_labeled_ref(t, &frames, labels, count)
                            .map_err(|_| ProfileProblem::TooManyEntries);
                    }
                    Ok(())
                },
            )?;
            added?;
        }
        for e in &checked.executables {
            self.open[at].add_executable(e.clone());
        }
        Ok(())
    }

    /// How the profile's samples weigh: CPU time (sample counts of a CPU
    /// period, or CPU nanoseconds), off-CPU nanoseconds, or any other type
    /// (wall time, allocations, heap in use, probe events…) under its
    /// `sample_type`.
    fn sample_type(&mut self, profile: &Profile, path: &str) -> Result<SampleType, Failure> {
        let strings =
            |t: Option<&opentelemetry_proto::tonic::profiles::v1development::ValueType>,
             field: &str|
             -> Result<(&str, &str), ProfileProblem> {
                let Some(t) = t else { return Ok(("", "")) };
                Ok((
                    self.dict
                        .string(t.type_strindex, || format!("{field}.typeStrindex"))?,
                    self.dict
                        .string(t.unit_strindex, || format!("{field}.unitStrindex"))?,
                ))
            };
        let (type_, unit) = strings(profile.sample_type.as_ref(), "sampleType")?;
        match (type_, unit) {
            ("samples" | "count", "count") => {
                let period = strings(profile.period_type.as_ref(), "periodType")?;
                let period_ns = match (period, u64::try_from(profile.period)) {
                    (("cpu", "nanoseconds"), Ok(p)) if p > 0 => p,
                    _ => {
                        self.warnings.once(format!(
                            "{path} has no cpu/nanoseconds period; taken as 100 Hz"
                        ));
                        DEFAULT_PERIOD_NS
                    }
                };
                Ok(SampleType {
                    period_ns,
                    extra: None,
                    gauge: false,
                })
            }
            ("cpu", "nanoseconds") => Ok(SampleType {
                period_ns: 1,
                extra: None,
                gauge: false,
            }),
            ("off_cpu", "nanoseconds") => Ok(SampleType {
                period_ns: 1,
                extra: Some((names::DEVICE_KIND, names::OFF_CPU.to_owned())),
                gauge: false,
            }),
            (type_, unit) => match kiln_model::sample_type_value(type_) {
                Some(value) => Ok(SampleType {
                    period_ns: 1,
                    gauge: kiln_model::is_gauge_sample_type(&value),
                    extra: Some((names::SAMPLE_TYPE, value)),
                }),
                None => Err(ProfileProblem::UnnamedType {
                    type_: type_.to_owned(),
                    unit: unit.to_owned(),
                }
                .into()),
            },
        }
    }

    /// Stack `index`, checked (its locations' frames made and cached).
    fn stack(&mut self, index: i32, sample: usize) -> Result<StackInfo, Failure> {
        if let Some(Some(info)) = usize::try_from(index).ok().and_then(|i| self.stacks.get(i)) {
            return Ok(info.clone());
        }
        let stack = self
            .dict
            .stack(index, || format!("samples[{sample}].stackIndex"))?;
        let locations: Arc<[i32]> = stack
            .location_indices
            .iter()
            .copied()
            .filter(|&l| l != 0)
            .collect();
        let mut depths = Vec::with_capacity(locations.len());
        let mut executables: Vec<Executable> = Vec::new();
        for (j, &l) in locations.iter().enumerate() {
            let frames = self.location(l, || {
                format!("dictionary.stackTable[{index}].locationIndices[{j}]")
            })?;
            depths.push(frames.frames.len());
            if let Some(e) = &frames.executable
                && !executables.iter().any(|x| x.file_id == e.file_id)
            {
                executables.push(e.clone());
            }
        }
        let info = StackInfo {
            depth: stack::depth(depths).max(1),
            locations,
            executables: executables.into(),
        };
        self.stacks[index as usize] = Some(info.clone());
        Ok(info)
    }

    /// The frames of stack `index` (checked by [`Self::stack`]), root first.
    fn stack_frames(
        &mut self,
        index: i32,
        sample: usize,
        frames: &mut Vec<Frame>,
    ) -> Result<(), Failure> {
        let info = self.stack(index, sample)?;
        if info.locations.is_empty() {
            frames.clear();
            frames.push(Frame::named(FrameKind::Native, NO_STACK));
            return Ok(());
        }
        let cached: Vec<Arc<LocationFrames>> = info
            .locations
            .iter()
            .map(|&l| {
                self.locations[l as usize]
                    .clone()
                    .expect("checked by stack()")
            })
            .collect();
        stack::leaf_first::<()>(cached.iter().map(|l| Ok(&l.frames[..])), frames)
            .map_err(|()| Failure::Profile(ProfileProblem::TooManyEntries))
    }

    /// Location `index`'s frames, made once per request.
    fn location(
        &mut self,
        index: i32,
        field: impl Fn() -> String,
    ) -> Result<Arc<LocationFrames>, Failure> {
        let location = self.dict.location(index, &field)?;
        if let Some(frames) = &self.locations[index as usize] {
            return Ok(frames.clone());
        }
        let mapping = match location.mapping_index {
            0 => None,
            m => Some(self.mapping(m, || {
                format!("dictionary.locationTable[{index}].mappingIndex")
            })?),
        };
        let frames = Arc::new(frames::location_frames(
            &self.dict,
            index,
            location,
            mapping.as_deref(),
            &mut self.warnings,
        )?);
        self.spend(frames.bytes)?;
        self.locations[index as usize] = Some(frames.clone());
        Ok(frames)
    }

    fn mapping(
        &mut self,
        index: i32,
        field: impl FnOnce() -> String,
    ) -> Result<Arc<MappingInfo>, Failure> {
        self.dict.mapping(index, field)?;
        if let Some(info) = &self.mappings[index as usize] {
            return Ok(info.clone());
        }
        let info = Arc::new(frames::mapping_info(&self.dict, index, &mut self.warnings)?);
        self.mappings[index as usize] = Some(info.clone());
        Ok(info)
    }

    /// Counts `bytes` of names and labels made against the request's
    /// budget.
    fn spend(&mut self, bytes: usize) -> Result<(), Failure> {
        self.converted_bytes = self.converted_bytes.saturating_add(bytes);
        if self.converted_bytes > MAX_CONVERTED_BYTES {
            return Err(Failure::Request(OtlpError::TooLarge));
        }
        Ok(())
    }

    /// Every batch, full ones first, then the open ones in the order they
    /// were opened.
    fn finish(self) -> (Vec<Batch>, Warnings) {
        let mut batches = self.batches;
        batches.extend(
            self.open
                .into_iter()
                .filter(|b| !b.is_empty())
                .filter_map(|b| b.finish().ok())
                .map(|imported| imported.batch),
        );
        (batches, self.warnings)
    }
}

/// Calls `out` with each (stamp, weight) of sample `i`, following OTLP's
/// rules: values and timestamps both set pair up by index; timestamps
/// alone weigh one each; values alone are summed and spread over the
/// profile's window (or put at `now_ns` without one). Zero weights are
/// left out. Returns whether the sample had any weight at all.
fn weigh(
    now_ns: i64,
    profile: &Profile,
    gauge: bool,
    i: usize,
    sample: &Sample,
    mut out: impl FnMut(i64, u64) -> Result<(), ProfileProblem>,
) -> Result<bool, ProfileProblem> {
    if gauge {
        return weigh_snapshot(now_ns, profile, i, sample, out);
    }
    let value = |v: i64| {
        u64::try_from(v).map_err(|_| ProfileProblem::NegativeValue {
            sample: i,
            value: v,
        })
    };
    let time = |t: u64| i64::try_from(t).unwrap_or(i64::MAX);
    // Timed events are summed per second at their mean time, so that a
    // second split between two requests is two rows, not one replaced.
    let mut timed = |events: Vec<(i64, u64)>| {
        let mut result = Ok(());
        weights::by_second_at_mean(events, |t, w| {
            if result.is_ok() {
                result = out(t, w);
            }
        })
        .map_err(|_| ProfileProblem::CountOverflow)?;
        result
    };
    match (
        sample.values.is_empty(),
        sample.timestamps_unix_nano.is_empty(),
    ) {
        (true, true) => Ok(false),
        (false, false) => {
            if sample.values.len() != sample.timestamps_unix_nano.len() {
                return Err(ProfileProblem::ValueCount {
                    sample: i,
                    values: sample.values.len(),
                    timestamps: sample.timestamps_unix_nano.len(),
                });
            }
            let events = sample
                .values
                .iter()
                .zip(&sample.timestamps_unix_nano)
                .map(|(&v, &t)| Ok((time(t), value(v)?)))
                .collect::<Result<Vec<_>, ProfileProblem>>()?;
            timed(events)?;
            Ok(true)
        }
        (true, false) => {
            timed(
                sample
                    .timestamps_unix_nano
                    .iter()
                    .map(|&t| (time(t), 1))
                    .collect(),
            )?;
            Ok(true)
        }
        (false, true) => {
            let mut sum = 0u64;
            for &v in &sample.values {
                sum = sum
                    .checked_add(value(v)?)
                    .ok_or(ProfileProblem::CountOverflow)?;
            }
            let mut result = Ok(());
            match profile.time_unix_nano {
                0 => {
                    if sum > 0 {
                        result = out(weights::stamp(now_ns), sum);
                    }
                }
                start => weights::spread(
                    i64::try_from(start).unwrap_or(i64::MAX),
                    profile.duration_nano,
                    sum,
                    |t, w| {
                        if result.is_ok() {
                            result = out(t, w);
                        }
                    },
                ),
            }
            result.map(|()| true)
        }
    }
}

/// Calls `out` once with sample `i`'s weight as a snapshot (heap in use,
/// goroutines alive): its values summed (its timestamps counted when it
/// has none), at the profile's end (its time when it has no duration, or
/// `now_ns` without either), so that every stack of one reading shares the
/// stamp a query of the gauge takes the latest of.
fn weigh_snapshot(
    now_ns: i64,
    profile: &Profile,
    i: usize,
    sample: &Sample,
    mut out: impl FnMut(i64, u64) -> Result<(), ProfileProblem>,
) -> Result<bool, ProfileProblem> {
    let weight = if sample.values.is_empty() {
        sample.timestamps_unix_nano.len() as u64
    } else {
        let mut sum = 0u64;
        for &v in &sample.values {
            let v = u64::try_from(v).map_err(|_| ProfileProblem::NegativeValue {
                sample: i,
                value: v,
            })?;
            sum = sum.checked_add(v).ok_or(ProfileProblem::CountOverflow)?;
        }
        sum
    };
    if sample.values.is_empty() && sample.timestamps_unix_nano.is_empty() {
        return Ok(false);
    }
    let at = match profile.time_unix_nano {
        0 => now_ns,
        start => i64::try_from(start.saturating_add(profile.duration_nano)).unwrap_or(i64::MAX),
    };
    if weight > 0 {
        out(at, weight)?;
    }
    Ok(true)
}
