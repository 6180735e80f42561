//! The answers built from merged counts and resolved stacks.

use std::collections::{BTreeMap, HashMap};

use kiln_model::FrameKind;
use kiln_model::flamewire::{FlameFrame, FlameMeta, Flamewire, FlamewireBuilder};
use serde::Serialize;

use super::QueryRange;
use super::aggregator::Partial;
use super::resolve::Resolved;

/// Average CPU nanoseconds per sample (0 when there are none).
fn ns_per_count(partial: &Partial) -> u64 {
    match partial.total.samples {
        0 => 0,
        n => (partial.total.cpu_ns / n as u128) as u64,
    }
}

pub(crate) fn flamegraph(range: &QueryRange, partial: &Partial, resolved: &Resolved) -> Flamewire {
    let mut builder = FlamewireBuilder::new();
    let mut indices = Vec::new();
    for (stack, &count) in &partial.stacks {
        indices.clear();
        for label in &resolved[stack] {
            indices.push(builder.intern(FlameFrame {
                kind: label.kind,
                name: &label.name,
                module: label.module.as_deref(),
                file: label.file.as_deref(),
                line: label.line,
            }));
        }
        builder.add_stack(&indices, count);
    }
    builder.finish(FlameMeta {
        from_ns: range.from_ns,
        to_ns: range.to_ns,
        ns_per_count: ns_per_count(partial),
    })
}

/// One row of the top-functions table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopFunction {
    /// Function name.
    pub name: String,
    /// Binary or module.
    pub module: Option<String>,
    /// Kind of code.
    pub kind: FrameKind,
    /// Samples in the function itself.
    pub self_samples: u64,
    /// Samples in the function and what it called (recursion counted once).
    pub total_samples: u64,
    /// `self_samples` in cores over the range.
    pub self_cores: f64,
    /// `total_samples` in cores over the range.
    pub total_cores: f64,
}

pub(crate) fn top_functions(
    range: &QueryRange,
    partial: &Partial,
    resolved: &Resolved,
    limit: usize,
) -> Vec<TopFunction> {
    type Key<'a> = (&'a str, Option<&'a str>, FrameKind);
    let mut rows: HashMap<Key<'_>, (u64, u64)> = HashMap::new();
    let mut seen: Vec<Key<'_>> = Vec::new();
    for (stack, &count) in &partial.stacks {
        let frames = &resolved[stack];
        seen.clear();
        for f in frames {
            let key = (f.name.as_str(), f.module.as_deref(), f.kind);
            if !seen.contains(&key) {
                seen.push(key);
                rows.entry(key).or_default().1 += count;
            }
        }
        if let Some(leaf) = frames.last() {
            rows.entry((leaf.name.as_str(), leaf.module.as_deref(), leaf.kind))
                .or_default()
                .0 += count;
        }
    }
    let cores =
        |samples: u64| samples as f64 * ns_per_count(partial) as f64 / range.duration_ns() as f64;
    let mut out: Vec<TopFunction> = rows
        .into_iter()
        .map(
            |((name, module, kind), (self_samples, total_samples))| TopFunction {
                name: name.to_owned(),
                module: module.map(str::to_owned),
                kind,
                self_samples,
                total_samples,
                self_cores: cores(self_samples),
                total_cores: cores(total_samples),
            },
        )
        .collect();
    out.sort_by(|a, b| {
        (b.self_samples, b.total_samples)
            .cmp(&(a.self_samples, a.total_samples))
            .then_with(|| a.name.cmp(&b.name))
    });
    out.truncate(limit);
    out
}

/// CPU over time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// Start of the first point, ns since the epoch.
    pub from_ns: i64,
    /// End of the range.
    pub to_ns: i64,
    /// Width of each point.
    pub step_ns: i64,
    /// One point per step, empty steps included.
    pub points: Vec<TimelinePoint>,
}

/// One step of a [`Timeline`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// Start of the step.
    pub t_ns: i64,
    /// Samples in it.
    pub samples: u64,
    /// Average cores busy: CPU time ÷ step width.
    pub cores: f64,
}

pub(crate) fn timeline(range: &QueryRange, step_ns: i64, partial: &Partial) -> Timeline {
    let steps = (range.duration_ns() + step_ns - 1) / step_ns;
    let points = (0..steps)
        .map(|i| {
            let tally = partial.buckets.get(&i).copied().unwrap_or_default();
            let start = range.from_ns + i * step_ns;
            let width = (range.to_ns.min(start + step_ns) - start).max(1);
            TimelinePoint {
                t_ns: start,
                samples: tally.samples,
                cores: tally.cpu_ns as f64 / width as f64,
            }
        })
        .collect();
    Timeline {
        from_ns: range.from_ns,
        to_ns: range.to_ns,
        step_ns,
        points,
    }
}

/// Label name → value → samples.
pub type LabelValues = BTreeMap<String, BTreeMap<String, u64>>;

pub(crate) fn label_values(partial: &Partial) -> LabelValues {
    let mut out = LabelValues::new();
    for (labels, count) in partial.label_sets.values() {
        for (name, value) in labels.iter() {
            *out.entry(name.to_owned())
                .or_default()
                .entry(value.to_owned())
                .or_default() += count;
        }
    }
    out
}
