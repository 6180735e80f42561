//! The answers built from merged counts and resolved stacks.

use std::hash::Hash;
use std::sync::Arc;

use kiln_model::flamewire::{FlameFrame, FlameMeta, Flamewire, FlamewireBuilder};
use kiln_model::{FrameId, FrameKind, LabelValues, Timeline, TimelinePoint, TopFunction};

use super::aggregator::{Partial, add_count};
use super::resolve::{FrameLabel, Resolved};
use super::{Granularity, QueryRange};
use crate::fast_hash::FastMap;

/// Average CPU nanoseconds per sample (0 when there are none).
fn ns_per_count(partial: &Partial) -> u64 {
    match partial.total.samples {
        0 => 0,
        n => u64::try_from(partial.total.cpu_ns / u128::from(n)).unwrap_or(u64::MAX),
    }
}

/// The factor every count of a flamegraph is divided by so that their sum,
/// the root's total, fits the graph's `u64` totals: 1 for any real
/// profile. Stored counts are whatever agents sent (up to 2^64 - 1 each),
/// and a sum that wrapped made the graph's totals inconsistent, so every
/// flamegraph of the range failed with a 500. Scaled, the graph keeps
/// every stack's share, and `ns_per_count` grows by the same factor so
/// that CPU time stays right.
fn count_scale(partial: &Partial) -> u64 {
    let sum: u128 = partial.stacks.values().map(|&n| u128::from(n)).sum();
    // sum < 2^64 * stacks, so the quotient is at most the stack count.
    u64::try_from(sum.div_ceil(u128::from(u64::MAX))).map_or(u64::MAX, |k| k.max(1))
}

pub(crate) fn flamegraph(
    range: &QueryRange,
    partial: &Partial,
    resolved: &Resolved,
    granularity: Granularity,
) -> Flamewire {
    let scale = count_scale(partial);
    if scale > 1 {
        tracing::warn!(
            scale,
            "sample counts of the range sum past 2^64; the flamegraph's counts are divided \
             by the scale (stored counts that large come from a faulty or hostile sender)"
        );
    }
    let stacks = partial
        .stacks
        .iter()
        .map(|(stack, &count)| (resolved.frames(stack), count / scale))
        // Stacks scaled down to nothing are left out (unscaled, a stored
        // count of 0 keeps its nodes, as it always did).
        .filter(|(_, count)| scale == 1 || *count > 0);
    flamegraph_of(
        stacks,
        |frame| resolved.labels(frame),
        FlameMeta {
            from_ns: range.from_ns,
            to_ns: range.to_ns,
            ns_per_count: ns_per_count(partial).saturating_mul(scale),
        },
        granularity,
    )
}

/// The flamegraph of stacks of frames (root first, with their sample
/// counts) whose labels `labels` gives, as the query API builds it: the
/// server passes frame ids and the resolver's labels.
///
/// Each distinct frame's labels are interned once, and its interned
/// indices remembered: a million-node graph interns the strings of tens of
/// thousands of frames, and every frame of every stack costs one lookup by
/// key. Equal labels of distinct frames still merge (the builder interns
/// by content).
///
/// With [`Granularity::Function`] (the default of the API) nodes are
/// functions, not lines: the frames of one function at different lines (a
/// Python function's statements, a native function's call sites) are one
/// node, as a reader of a flamegraph expects, so the line is left out of
/// the node (its file stays). [`Granularity::Line`] keeps one node per
/// line.
pub fn flamegraph_of<'a, K>(
    stacks: impl IntoIterator<Item = (&'a [K], u64)>,
    labels: impl Fn(&K) -> &'a [Arc<FrameLabel>],
    meta: FlameMeta,
    granularity: Granularity,
) -> Flamewire
where
    K: Copy + Eq + Hash + 'a,
{
    let mut builder = FlamewireBuilder::new();
    // Each frame's interned labels: a range of `chains`.
    let mut interned: FastMap<K, (usize, usize)> = FastMap::default();
    let mut chains: Vec<u32> = Vec::new();
    let mut indices = Vec::new();
    for (frames, count) in stacks {
        indices.clear();
        for frame in frames {
            let (start, end) = *interned.entry(*frame).or_insert_with(|| {
                let start = chains.len();
                for label in labels(frame) {
                    chains.push(builder.intern(FlameFrame {
                        kind: label.kind,
                        name: &label.name,
                        module: label.module.as_deref(),
                        file: label.file.as_deref(),
                        line: match granularity {
                            Granularity::Function => 0,
                            Granularity::Line => label.line,
                        },
                    }));
                }
                (start, chains.len())
            });
            indices.extend_from_slice(&chains[start..end]);
        }
        builder.add_stack(&indices, count);
    }
    builder.finish(meta)
}

pub(crate) fn top_functions(
    range: &QueryRange,
    partial: &Partial,
    resolved: &Resolved,
    limit: usize,
) -> Vec<TopFunction> {
    type Key<'a> = (&'a str, Option<&'a str>, FrameKind);
    /// A function's figures, and the last stack that counted in `total`.
    struct Row<'a> {
        key: Key<'a>,
        self_samples: u64,
        total_samples: u64,
        last_stack: usize,
    }
    // Each frame's rows (one per inline level), found once per distinct
    // frame: a frame of a stack costs one lookup by id, not a string hash,
    // and recursion is counted once per stack by remembering the last
    // stack that counted, not by searching the stack's frames seen so far.
    let mut rows_of_frame: FastMap<FrameId, (usize, usize)> = FastMap::default();
    let mut frame_rows: Vec<usize> = Vec::new();
    let mut row_of_key: FastMap<Key<'_>, usize> = FastMap::default();
    let mut rows: Vec<Row<'_>> = Vec::new();
    for (n, (stack, &count)) in partial.stacks.iter().enumerate() {
        let mut leaf = None;
        for frame in resolved.frames(stack) {
            let (start, end) = *rows_of_frame.entry(*frame).or_insert_with(|| {
                let start = frame_rows.len();
                for f in resolved.labels(frame) {
                    let key = (f.name.as_str(), f.module.as_deref(), f.kind);
                    let row = *row_of_key.entry(key).or_insert_with(|| {
                        rows.push(Row {
                            key,
                            self_samples: 0,
                            total_samples: 0,
                            last_stack: usize::MAX,
                        });
                        rows.len() - 1
                    });
                    frame_rows.push(row);
                }
                (start, frame_rows.len())
            });
            for &row in &frame_rows[start..end] {
                let r = &mut rows[row];
                if r.last_stack != n {
                    r.last_stack = n;
                    add_count(&mut r.total_samples, count);
                }
                leaf = Some(row);
            }
        }
        if let Some(row) = leaf {
            add_count(&mut rows[row].self_samples, count);
        }
    }
    let cores =
        |samples: u64| samples as f64 * ns_per_count(partial) as f64 / range.duration_ns() as f64;
    let mut out: Vec<TopFunction> = rows
        .into_iter()
        .map(|row| {
            let (name, module, kind) = row.key;
            TopFunction {
                name: name.to_owned(),
                module: module.map(str::to_owned),
                kind,
                self_samples: row.self_samples,
                total_samples: row.total_samples,
                self_cores: cores(row.self_samples),
                total_cores: cores(row.total_samples),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (b.self_samples, b.total_samples)
            .cmp(&(a.self_samples, a.total_samples))
            .then_with(|| a.name.cmp(&b.name))
    });
    out.truncate(limit);
    out
}

/// The timeline of `range` in steps of `step_ns` (> 0): as many points as
/// steps, so the caller bounds `duration / step` (the API allows 10,000).
pub(crate) fn timeline(range: &QueryRange, step_ns: i64, partial: &Partial) -> Timeline {
    let step_ns = step_ns.max(1);
    // Both positive, so the unsigned division is exact.
    let steps = (range.duration_ns() as u64).div_ceil(step_ns as u64) as i64;
    let points = (0..steps)
        .map(|i| {
            let tally = partial.buckets.get(&i).copied().unwrap_or_default();
            let idle = partial.idle_buckets.get(&i).copied().unwrap_or_default();
            let start = range.from_ns.saturating_add(i.saturating_mul(step_ns));
            let width = (range.to_ns.min(start.saturating_add(step_ns)) - start).max(1) as f64;
            let busy_ns = tally.cpu_ns.saturating_sub(idle.cpu_ns);
            TimelinePoint {
                t_ns: start,
                samples: tally.samples,
                cores: busy_ns as f64 / width,
                idle_cores: idle.cpu_ns as f64 / width,
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

pub(crate) fn label_values(partial: &Partial) -> LabelValues {
    let mut out = LabelValues::new();
    for (labels, count) in partial.label_sets.values() {
        for (name, value) in labels.iter() {
            let sum = out
                .entry(name.to_owned())
                .or_default()
                .entry(value.to_owned())
                .or_default();
            add_count(sum, *count);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use kiln_model::StackId;
    use kiln_model::flamewire::read;
    use kiln_storage::Scope;

    use super::*;
    use crate::query::Tally;

    fn label(name: &str) -> Arc<FrameLabel> {
        Arc::new(FrameLabel {
            kind: FrameKind::Native,
            name: name.to_owned(),
            module: None,
            file: None,
            line: 0,
        })
    }

    fn range() -> QueryRange {
        QueryRange {
            scope: Scope::new("t", "p").unwrap(),
            from_ns: 0,
            to_ns: 1_000,
            filters: vec![],
        }
    }

    /// Stack 1: `main → walk → walk (another line) → [helper → leaf]`, the
    /// last frame an address whose symbols inline `leaf` into `helper` (3
    /// samples); stack 2: `main → walk` (2 samples), its `main` a frame of
    /// its own with the same label as stack 1's.
    fn recursive_stacks() -> (Partial, Resolved) {
        let walk = label("walk");
        let walk_again = Arc::new(FrameLabel {
            line: 9,
            ..(*walk).clone()
        });
        let mut resolved = Resolved::default();
        for (id, labels) in [
            (1, vec![label("main")]),
            (2, vec![walk]),
            (3, vec![walk_again]),
            (4, vec![label("helper"), label("leaf")]),
            (5, vec![label("main")]),
        ] {
            resolved.labels.insert(FrameId(id), labels.into());
        }
        let mut partial = Partial::default();
        for (id, frames, count) in [(1, &[1, 2, 3, 4][..], 3), (2, &[5, 2][..], 2)] {
            partial.stacks.insert(StackId(id), count);
            let frames: Arc<[FrameId]> = frames.iter().map(|&f| FrameId(f)).collect();
            resolved.stacks.insert(StackId(id), frames);
        }
        partial.total = Tally {
            samples: 5,
            cpu_ns: 5_000,
        };
        (partial, resolved)
    }

    /// Guards top's bookkeeping: a recursive function counts a stack once
    /// in its total, and labels that differ only in the line (distinct
    /// `Arc`s) are one function.
    #[test]
    fn top_counts_recursion_once_per_stack() {
        let (partial, resolved) = recursive_stacks();
        let top = top_functions(&range(), &partial, &resolved, 10);
        let row = |name: &str| {
            let r = top.iter().find(|r| r.name == name).unwrap();
            (r.self_samples, r.total_samples)
        };
        assert_eq!(top.len(), 4);
        assert_eq!(row("leaf"), (3, 3));
        assert_eq!(row("helper"), (0, 3));
        assert_eq!(row("walk"), (2, 5));
        assert_eq!(row("main"), (0, 5));
        assert_eq!(top[0].name, "leaf");
        assert!((top[0].self_cores - 3.0).abs() < 1e-9);
    }

    /// Guards issue 18's 500: stacks whose counts sum past 2^64 still make
    /// a readable flamegraph (each stack's share kept, CPU time kept by
    /// `ns_per_count`), and top and labels saturate instead of wrapping.
    #[test]
    fn counts_summing_past_u64_give_an_answer() {
        let big = 1u64 << 63;
        let (mut partial, resolved) = recursive_stacks();
        partial.stacks.insert(StackId(1), big);
        partial.stacks.insert(StackId(2), big);
        partial.total = Tally {
            samples: u64::MAX,
            cpu_ns: 2 * u128::from(big) * 10,
        };
        let bytes = flamegraph(&range(), &partial, &resolved, Granularity::Function).to_bytes();
        read(&bytes, |g| {
            // Halved: 2^62 each, 2^63 at the root.
            assert_eq!(g.node(0).total, big);
            assert_eq!(g.node(1).total, big);
            assert_eq!(g.node(5).self_count, big / 2);
            assert_eq!(g.meta().ns_per_count, 2 * 10);
        })
        .unwrap();

        let top = top_functions(&range(), &partial, &resolved, 10);
        let main = top.iter().find(|r| r.name == "main").unwrap();
        assert_eq!(main.total_samples, u64::MAX);
        let leaf = top.iter().find(|r| r.name == "leaf").unwrap();
        assert_eq!(leaf.self_samples, big);

        let labels = Arc::new(kiln_model::LabelSet::new().with("host", "a"));
        partial
            .label_sets
            .insert(kiln_model::LabelSetId(1), (labels.clone(), big));
        partial
            .label_sets
            .insert(kiln_model::LabelSetId(2), (labels, big));
        assert_eq!(label_values(&partial)["host"]["a"], u64::MAX);
    }

    /// Busy and idle cores come apart: idle samples are not busy time.
    #[test]
    fn timeline_keeps_idle_apart_from_busy() {
        let mut partial = Partial::default();
        let second = 1_000_000_000;
        partial.buckets.insert(
            0,
            Tally {
                samples: 30,
                cpu_ns: 3 * second,
            },
        );
        partial.idle_buckets.insert(
            0,
            Tally {
                samples: 10,
                cpu_ns: second,
            },
        );
        let one_second = QueryRange {
            from_ns: 0,
            to_ns: 1_000_000_000,
            ..range()
        };
        let t = timeline(&one_second, 1_000_000_000, &partial);
        assert_eq!(t.points[0].cores, 2.0);
        assert_eq!(t.points[0].idle_cores, 1.0);
        assert_eq!(t.points[0].samples, 30);
    }

    /// A timeline's steps never overflow, whatever the range.
    #[test]
    fn timeline_of_an_extreme_range() {
        let partial = Partial::default();
        let wide = QueryRange {
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            ..range()
        };
        let t = timeline(&wide, i64::MAX / 4, &partial);
        assert_eq!(t.points.len(), 5);
        assert!(t.points.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
    }

    /// Frames are interned once each, yet distinct frames with equal
    /// labels are one node, lines keep frames apart, and an inline chain
    /// becomes one node per level.
    #[test]
    fn flamegraph_merges_equal_labels_of_distinct_frames() {
        let (partial, resolved) = recursive_stacks();
        let bytes = flamegraph(&range(), &partial, &resolved, Granularity::Function).to_bytes();
        read(&bytes, |g| {
            let names: Vec<&str> = (0..g.node_count()).map(|i| g.node_name(i)).collect();
            assert_eq!(names, ["all", "main", "walk", "walk", "helper", "leaf"]);
            assert_eq!(g.node(1).total, 5);
            assert_eq!(g.node(2).self_count, 2);
            assert_eq!(g.node(5).self_count, 3);
            assert_eq!(g.meta().ns_per_count, 1_000);
        })
        .unwrap();
    }

    // Guards function granularity: one function's frames at two lines,
    // side by side under the same caller, are one node.
    #[test]
    fn flamegraph_nodes_are_functions_not_lines() {
        let parse = |line| {
            Arc::new(FrameLabel {
                kind: FrameKind::Python,
                name: "parse".into(),
                module: None,
                file: Some("app.py".into()),
                line,
            })
        };
        let mut resolved = Resolved::default();
        for (id, labels) in [
            (1, vec![label("main")]),
            (2, vec![parse(12)]),
            (3, vec![parse(17)]),
        ] {
            resolved.labels.insert(FrameId(id), labels.into());
        }
        let mut partial = Partial::default();
        for (id, frames, count) in [(1, &[1, 2][..], 377), (2, &[1, 3][..], 70)] {
            partial.stacks.insert(StackId(id), count);
            let frames: Arc<[FrameId]> = frames.iter().map(|&f| FrameId(f)).collect();
            resolved.stacks.insert(StackId(id), frames);
        }
        let bytes = flamegraph(&range(), &partial, &resolved, Granularity::Function).to_bytes();
        read(&bytes, |g| {
            let names: Vec<&str> = (0..g.node_count()).map(|i| g.node_name(i)).collect();
            assert_eq!(names, ["all", "main", "parse"]);
            assert_eq!(g.node(2).self_count, 447);
        })
        .unwrap();
    }
}
