//! The GPU view: a range's kernels (launches, time, PC samples), one
//! kernel's sampled SASS instructions with their stall reasons, and GPU
//! time per kernel over time as a Perfetto (Chrome JSON) trace.
//!
//! All three read the GPU samples the agent stores (`gpu-lib`'s `fold`):
//! `<launching stack> → gpu_kernel` weighing ns or launches, and
//! `<launching stack> → gpu_kernel → gpu_instruction → gpu_stall` weighing
//! PC samples. Each unit is its own `gpu_weight` label value, so each is
//! gathered apart (a filter on that label), through the same scans,
//! admission and symbol resolution as a flamegraph; the launching stacks
//! are summed over here, since the view is per kernel.

use std::collections::{BTreeMap, HashMap};

use actix::{Context, Handler, Message};
use kiln_model::{
    FrameKind, GpuInstructionRow, GpuInstructions, GpuKernelRow, GpuKernels, GpuStallCount,
    GpuWeight, parse_instruction_frame,
};
use serde_json::{Value, json};

use super::abandon::Abandonable;
use super::aggregator::{Partial, Want};
use super::resolve::{FrameLabel, Resolved};
use super::{Cluster, QueryCoordinator, QueryError, QueryRange};

/// Kernels a trace draws when none is chosen: the ones with the most time.
pub const TRACE_KERNELS: usize = 16;

/// Every kernel of a range ([`GpuKernels`]).
#[derive(Debug, Message)]
#[rtype(result = "Result<GpuKernels, QueryError>")]
pub struct GpuKernelsQuery(pub QueryRange);

/// One kernel's instructions and stall reasons ([`GpuInstructions`]).
#[derive(Debug, Message)]
#[rtype(result = "Result<GpuInstructions, QueryError>")]
pub struct GpuInstructionsQuery {
    /// What to aggregate.
    pub range: QueryRange,
    /// The kernel, as [`GpuKernelRow::name`] gives it.
    pub kernel: String,
}

/// GPU time per kernel and step, as a Chrome JSON trace.
#[derive(Debug, Message)]
#[rtype(result = "Result<Value, QueryError>")]
pub struct GpuTraceQuery {
    /// What to aggregate.
    pub range: QueryRange,
    /// Width of one step.
    pub step_ns: i64,
    /// Only this kernel; `None`: the [`TRACE_KERNELS`] with the most time.
    pub kernel: Option<String>,
}

/// Where a GPU stack ends: its kernel, and for a PC sample its instruction
/// and stall reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GpuPath<'a> {
    pub kernel: Option<&'a str>,
    pub instruction: Option<&'a FrameLabel>,
    pub stall: Option<&'a str>,
}

impl<'a> GpuPath<'a> {
    /// Reads a stack's labels, root first.
    pub(crate) fn of(labels: impl IntoIterator<Item = &'a FrameLabel>) -> Self {
        let mut path = GpuPath::default();
        for label in labels {
            match label.kind {
                FrameKind::GpuKernel => path.kernel = Some(&label.name),
                FrameKind::GpuInstruction => path.instruction = Some(label),
                FrameKind::GpuStall => path.stall = Some(&label.name),
                _ => {}
            }
        }
        path
    }
}

impl Cluster {
    /// The range's samples of one GPU unit, with their stacks resolved.
    async fn gather_gpu(
        &self,
        range: &QueryRange,
        unit: GpuWeight,
        want: Want,
    ) -> Result<(Partial, Resolved), QueryError> {
        let mut range = range.clone();
        range.filters.retain(|(name, _)| name != GpuWeight::LABEL);
        range
            .filters
            .push((GpuWeight::LABEL.to_owned(), unit.as_str().to_owned()));
        let partial = self.gather(&range, want).await?;
        let resolved = self
            .resolver
            .resolve(range.scope.tenant(), partial.stacks.keys().copied())
            .await?;
        Ok((partial, resolved))
    }
}

/// Each stack of `partial` as its GPU path and count.
fn paths<'a>(
    partial: &'a Partial,
    resolved: &'a Resolved,
) -> impl Iterator<Item = (GpuPath<'a>, u64)> + 'a {
    partial
        .stacks
        .iter()
        .map(|(stack, &count)| (path_of(resolved, stack), count))
}

fn path_of<'a>(resolved: &'a Resolved, stack: &kiln_model::StackId) -> GpuPath<'a> {
    GpuPath::of(
        resolved
            .frames(stack)
            .iter()
            .flat_map(|frame| resolved.labels(frame))
            .map(|label| &**label),
    )
}

impl Handler<GpuKernelsQuery> for QueryCoordinator {
    type Result = Abandonable<Result<GpuKernels, QueryError>>;

    fn handle(
        &mut self,
        GpuKernelsQuery(range): GpuKernelsQuery,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let want = Want::default();
            let (time, launches, samples) = futures_util::try_join!(
                cluster.gather_gpu(&range, GpuWeight::Nanoseconds, want),
                cluster.gather_gpu(&range, GpuWeight::Launches, want),
                cluster.gather_gpu(&range, GpuWeight::Samples, want),
            )?;
            Ok(kernels(
                paths(&time.0, &time.1),
                paths(&launches.0, &launches.1),
                paths(&samples.0, &samples.1),
            ))
        })
    }
}

impl Handler<GpuInstructionsQuery> for QueryCoordinator {
    type Result = Abandonable<Result<GpuInstructions, QueryError>>;

    fn handle(&mut self, q: GpuInstructionsQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let (partial, resolved) = cluster
                .gather_gpu(&q.range, GpuWeight::Samples, Want::default())
                .await?;
            Ok(instructions(&q.kernel, paths(&partial, &resolved)))
        })
    }
}

impl Handler<GpuTraceQuery> for QueryCoordinator {
    type Result = Abandonable<Result<Value, QueryError>>;

    fn handle(&mut self, q: GpuTraceQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let step_ns = q.step_ns.max(1);
            let want = Want {
                timeline: Some((q.range.from_ns, step_ns)),
                stack_buckets: true,
                ..Want::default()
            };
            let (partial, resolved) = cluster
                .gather_gpu(&q.range, GpuWeight::Nanoseconds, want)
                .await?;
            let steps = partial
                .stack_buckets
                .iter()
                .map(|(&(bucket, stack), &ns)| (bucket, path_of(&resolved, &stack), ns));
            Ok(trace(&q.range, step_ns, q.kernel.as_deref(), steps))
        })
    }
}

/// The kernel table: time, launches and PC samples summed per kernel over
/// every launching stack, most time first.
pub(crate) fn kernels<'a>(
    time: impl IntoIterator<Item = (GpuPath<'a>, u64)>,
    launches: impl IntoIterator<Item = (GpuPath<'a>, u64)>,
    samples: impl IntoIterator<Item = (GpuPath<'a>, u64)>,
) -> GpuKernels {
    #[derive(Default)]
    struct Sums {
        ns: u64,
        launches: u64,
        samples: u64,
    }
    let mut sums: HashMap<&str, Sums> = HashMap::new();
    let mut add = |paths: &mut dyn Iterator<Item = (GpuPath<'a>, u64)>,
                   field: fn(&mut Sums) -> &mut u64| {
        for (path, count) in paths {
            if let Some(kernel) = path.kernel {
                let sum = field(sums.entry(kernel).or_default());
                *sum = sum.saturating_add(count);
            }
        }
    };
    add(&mut time.into_iter(), |s| &mut s.ns);
    add(&mut launches.into_iter(), |s| &mut s.launches);
    add(&mut samples.into_iter(), |s| &mut s.samples);
    let total_ns = sums.values().fold(0u64, |a, s| a.saturating_add(s.ns));
    let total_pc_samples = sums.values().fold(0u64, |a, s| a.saturating_add(s.samples));
    let mut kernels: Vec<GpuKernelRow> = sums
        .into_iter()
        .map(|(name, s)| GpuKernelRow {
            name: name.to_owned(),
            demangled: demangled(name),
            launches: s.launches,
            total_ns: s.ns,
            mean_ns: s.ns.checked_div(s.launches).unwrap_or(0),
            gpu_time_share: share(s.ns, total_ns),
            pc_samples: s.samples,
        })
        .collect();
    kernels.sort_by(|a, b| {
        (b.total_ns, b.pc_samples)
            .cmp(&(a.total_ns, a.pc_samples))
            .then_with(|| a.name.cmp(&b.name))
    });
    GpuKernels {
        total_ns,
        total_pc_samples,
        kernels,
    }
}

/// One kernel's PC samples per instruction (address order) and stall
/// reason (most first).
pub(crate) fn instructions<'a>(
    kernel: &str,
    samples: impl IntoIterator<Item = (GpuPath<'a>, u64)>,
) -> GpuInstructions {
    // (cubin, offset) → (text, stall → samples).
    type Rows<'a> = BTreeMap<(Option<&'a str>, u64), (Option<String>, HashMap<&'a str, u64>)>;
    let mut rows: Rows<'a> = BTreeMap::new();
    let mut stalls: HashMap<&str, u64> = HashMap::new();
    for (path, count) in samples {
        if path.kernel != Some(kernel) {
            continue;
        }
        let stall = path.stall.unwrap_or("unknown");
        let stall_sum = stalls.entry(stall).or_default();
        *stall_sum = stall_sum.saturating_add(count);
        let Some(label) = path.instruction else {
            continue;
        };
        let Some((offset, text)) = parse_instruction_frame(&label.name) else {
            continue;
        };
        let row = rows
            .entry((label.module.as_deref(), offset))
            .or_insert_with(|| (text, HashMap::new()));
        let sum = row.1.entry(stall).or_default();
        *sum = sum.saturating_add(count);
    }
    let instructions = rows
        .into_iter()
        .map(|((cubin, offset), (text, stalls))| {
            let stalls = by_count(stalls);
            GpuInstructionRow {
                offset,
                text,
                cubin: cubin.map(str::to_owned),
                samples: stalls.iter().fold(0u64, |a, s| a.saturating_add(s.samples)),
                stalls,
            }
        })
        .collect();
    let stalls = by_count(stalls);
    GpuInstructions {
        kernel: kernel.to_owned(),
        total_samples: stalls.iter().fold(0u64, |a, s| a.saturating_add(s.samples)),
        stalls,
        instructions,
    }
}

/// A Chrome JSON trace (what ui.perfetto.dev and chrome://tracing open) of
/// GPU time per kernel: one counter track per kernel, its value at each
/// step the GPUs it kept busy on average (GPU-seconds per second), every
/// step of the range written so that a step without the kernel reads 0.
pub(crate) fn trace<'a>(
    range: &QueryRange,
    step_ns: i64,
    only: Option<&str>,
    steps: impl IntoIterator<Item = (i64, GpuPath<'a>, u64)>,
) -> Value {
    let mut per_kernel: HashMap<&str, BTreeMap<i64, u64>> = HashMap::new();
    for (bucket, path, ns) in steps {
        let Some(kernel) = path.kernel.filter(|k| only.is_none_or(|o| o == *k)) else {
            continue;
        };
        let sum = per_kernel
            .entry(kernel)
            .or_default()
            .entry(bucket)
            .or_default();
        *sum = sum.saturating_add(ns);
    }
    let mut kernels: Vec<(&str, BTreeMap<i64, u64>)> = per_kernel.into_iter().collect();
    let total = |steps: &BTreeMap<i64, u64>| steps.values().fold(0u64, |a, n| a.saturating_add(*n));
    kernels.sort_by(|a, b| total(&b.1).cmp(&total(&a.1)).then(a.0.cmp(b.0)));
    kernels.truncate(TRACE_KERNELS);
    let step_count = (range.to_ns.saturating_sub(range.from_ns) / step_ns.max(1)).max(0) + 1;
    let mut events = vec![json!({
        "name": "process_name",
        "ph": "M",
        "pid": 1,
        "args": { "name": "Kiln: GPU time per kernel (GPUs busy)" },
    })];
    for (kernel, steps) in &kernels {
        let name = demangled(kernel).unwrap_or_else(|| (*kernel).to_owned());
        for bucket in 0..step_count {
            let ns = steps.get(&bucket).copied().unwrap_or(0);
            let at_ns = range.from_ns.saturating_add(bucket.saturating_mul(step_ns));
            events.push(json!({
                "name": name,
                "ph": "C",
                "pid": 1,
                "ts": at_ns as f64 / 1e3,
                "args": { "gpus": ns as f64 / step_ns as f64 },
            }));
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

fn by_count(counts: HashMap<&str, u64>) -> Vec<GpuStallCount> {
    let mut out: Vec<GpuStallCount> = counts
        .into_iter()
        .map(|(reason, samples)| GpuStallCount {
            reason: reason.to_owned(),
            samples,
        })
        .collect();
    out.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.reason.cmp(&b.reason))
    });
    out
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A C++ kernel's name demangled (`_Z4gemmPfi` → `gemm(float*, int)`);
/// `None` for a name that is not mangled.
fn demangled(name: &str) -> Option<String> {
    kiln_symbolizer_workers::demangle(name).filter(|d| d != name)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kiln_storage::Scope;

    use super::*;

    fn label(kind: FrameKind, name: &str, module: Option<&str>) -> Arc<FrameLabel> {
        Arc::new(FrameLabel {
            kind,
            name: name.to_owned(),
            module: module.map(str::to_owned),
            file: None,
            line: 0,
        })
    }

    /// A launching CPU frame, then the GPU frames named.
    fn stack(gpu: &[(FrameKind, &str)]) -> Vec<Arc<FrameLabel>> {
        let mut labels = vec![label(FrameKind::Native, "train_step", Some("app"))];
        for &(kind, name) in gpu {
            let module = (kind == FrameKind::GpuInstruction).then_some("cubin:00000000000000ab");
            labels.push(label(kind, name, module));
        }
        labels
    }

    fn path(labels: &[Arc<FrameLabel>]) -> GpuPath<'_> {
        GpuPath::of(labels.iter().map(|l| &**l))
    }

    const GEMM: &str = "_Z4gemmPfS_i";

    #[test]
    fn kernel_rows_sum_every_launching_stack() {
        use FrameKind::{GpuInstruction as I, GpuKernel as K, GpuStall as S};
        let gemm = stack(&[(K, GEMM)]);
        let relu = stack(&[(K, "relu_kernel")]);
        let mut elsewhere = gemm.clone();
        elsewhere[0] = label(FrameKind::Native, "eval", Some("app"));
        let sampled = stack(&[
            (K, GEMM),
            (I, "+0x90 LDG.E R2, [R2]"),
            (S, "long_scoreboard"),
        ]);
        let time = [
            (path(&gemm), 600),
            (path(&elsewhere), 300),
            (path(&relu), 100),
        ];
        let launches = [(path(&gemm), 2), (path(&elsewhere), 1), (path(&relu), 4)];
        let samples = [(path(&sampled), 7)];
        let table = kernels(time, launches, samples);
        assert_eq!(table.total_ns, 1000);
        assert_eq!(table.total_pc_samples, 7);
        let first = &table.kernels[0];
        assert_eq!(first.name, GEMM);
        assert_eq!(
            first.demangled.as_deref(),
            Some("gemm(float*, float*, int)")
        );
        assert_eq!(
            (first.launches, first.total_ns, first.mean_ns),
            (3, 900, 300)
        );
        assert!((first.gpu_time_share - 0.9).abs() < 1e-9);
        assert_eq!(first.pc_samples, 7);
        let second = &table.kernels[1];
        assert_eq!(second.name, "relu_kernel");
        assert_eq!(second.demangled, None);
        assert_eq!(
            (second.launches, second.mean_ns, second.pc_samples),
            (4, 25, 0)
        );
    }

    #[test]
    fn instructions_in_address_order_with_their_stalls() {
        use FrameKind::{GpuInstruction as I, GpuKernel as K, GpuStall as S};
        let at = |offset: &str, stall: &str| stack(&[(K, GEMM), (I, offset), (S, stall)]);
        let stacks = [
            (at("+0x1a0 FFMA R4, R2, R3, R4", "math_pipe_throttle"), 2),
            (at("+0x90 LDG.E R2, [R2]", "long_scoreboard"), 10),
            (at("+0x90 LDG.E R2, [R2]", "selected"), 3),
            (at("+0x1a0 FFMA R4, R2, R3, R4", "long_scoreboard"), 1),
            (stack(&[(K, "other"), (I, "+0x90"), (S, "barrier")]), 50),
        ];
        let view = instructions(GEMM, stacks.iter().map(|(s, n)| (path(s), *n)));
        assert_eq!(view.total_samples, 16);
        assert_eq!(
            view.stalls[0],
            GpuStallCount {
                reason: "long_scoreboard".into(),
                samples: 11
            }
        );
        let offsets: Vec<u64> = view.instructions.iter().map(|i| i.offset).collect();
        assert_eq!(offsets, [0x90, 0x1a0]);
        let ldg = &view.instructions[0];
        assert_eq!(ldg.text.as_deref(), Some("LDG.E R2, [R2]"));
        assert_eq!(ldg.cubin.as_deref(), Some("cubin:00000000000000ab"));
        assert_eq!(ldg.samples, 13);
        assert_eq!(ldg.stalls[0].reason, "long_scoreboard");
        assert_eq!(view.instructions[1].samples, 3);
    }

    #[test]
    fn trace_has_a_counter_per_kernel_at_every_step() {
        use FrameKind::GpuKernel as K;
        let range = QueryRange {
            scope: Scope::new("acme", "web").unwrap(),
            from_ns: 10_000_000_000,
            to_ns: 13_000_000_000,
            filters: Vec::new(),
        };
        let gemm = stack(&[(K, GEMM)]);
        let relu = stack(&[(K, "relu_kernel")]);
        let steps = [
            (0, path(&gemm), 500_000_000),
            (2, path(&gemm), 1_000_000_000),
            (1, path(&relu), 1),
        ];
        let all = trace(&range, 1_000_000_000, None, steps);
        let events = all["traceEvents"].as_array().unwrap();
        let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
        // 4 steps (the range's 3 and its end) for each of 2 kernels.
        assert_eq!(counters.len(), 8);
        let gemm_points: Vec<(f64, f64)> = counters
            .iter()
            .filter(|e| e["name"] == "gemm(float*, float*, int)")
            .map(|e| {
                (
                    e["ts"].as_f64().unwrap(),
                    e["args"]["gpus"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            gemm_points,
            [(1e7, 0.5), (1.1e7, 0.0), (1.2e7, 1.0), (1.3e7, 0.0)]
        );

        let one = trace(&range, 1_000_000_000, Some("relu_kernel"), steps);
        let names: std::collections::BTreeSet<&str> = one["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "C")
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["relu_kernel"]);
    }
}
