//! `Aggregator`: scans one partition (an hour of one tenant's project) and
//! sums its samples per stack, per time bucket and per label set, or one
//! metric's points per series and step (`metrics`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use actix::{Actor, Context, Handler, Message};
use kiln_model::{GpuWeight, LabelSet, LabelSetId, NANOS_PER_HOUR, StackId};
use kiln_storage::{ProfileStore, Resolution, StoreError, StoredSample};

use super::QueryRange;
use super::abandon::Abandonable;
use super::cache::BoundedCache;
use super::metrics::{MetricPartial, MetricScan, run_metric_scan};
use crate::telemetry::CacheCounters;

/// What a scan adds up besides per-stack counts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Want {
    /// Bucket samples by time: (origin, step) in nanoseconds.
    pub timeline: Option<(i64, i64)>,
    /// Count samples per label set.
    pub label_sets: bool,
    /// With `timeline`, also count each stack's samples per time bucket
    /// (the GPU trace: a kernel's time per step).
    pub stack_buckets: bool,
}

/// Scans a sub-range that lies within one storage partition.
#[derive(Debug, Message)]
#[rtype(result = "Result<Partial, StoreError>")]
pub(crate) struct Scan {
    pub range: QueryRange,
    pub want: Want,
    /// What the scan reads.
    pub source: Source,
}

/// What a scan reads: the samples of its range, or the rollup of the
/// window its range is. The coordinator picks a rollup only for a whole
/// window whose rollup is current, for a query it answers exactly
/// ([`Want::rollup_answers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Samples,
    Rollup(Resolution),
}

impl Want {
    /// Whether rollups can give what this asks for exactly, for
    /// `filters`: label sets, stacks per bucket and gauges need each
    /// sample's own labels and time; a filter on a per-instance label
    /// needs the labels rollups drop. (A timeline also needs each window
    /// within one of its buckets: [`Want::one_bucket`].)
    pub(crate) fn rollup_answers(&self, filters: &[(String, String)]) -> bool {
        let per_instance = filters
            .iter()
            .any(|(name, _)| kiln_model::label_names::PER_INSTANCE.contains(&name.as_str()));
        let gauge =
            kiln_model::filters_read_a_gauge(filters.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        !self.label_sets && !self.stack_buckets && !per_instance && !gauge
    }

    /// Whether the window of `resolution` starting at `start_ns` lies
    /// within one time bucket of the timeline asked for (always, without
    /// one): its rollup, all at the window's start, then counts where its
    /// samples would.
    pub(crate) fn one_bucket(&self, start_ns: i64, resolution: Resolution) -> bool {
        let end_ns = start_ns.saturating_add(resolution.nanos() - 1);
        self.timeline.is_none_or(|(origin, step)| {
            bucket_of(start_ns, origin, step) == bucket_of(end_ns, origin, step)
        })
    }
}

/// Samples and CPU time.
///
/// Sums saturate: counts come from agents, and a stored count may be
/// anything up to `u64::MAX` (two samples of 2^63 once made every
/// flamegraph of their range fail); a sum that reaches the maximum stays
/// there rather than wrapping to a small number or panicking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Sample count.
    pub samples: u64,
    /// CPU nanoseconds they stand for.
    pub cpu_ns: u128,
}

impl Tally {
    fn add(&mut self, count: u64, period_ns: u64) {
        self.samples = self.samples.saturating_add(count);
        // (2^64 - 1)^2 < 2^128: the product itself cannot overflow.
        let cpu_ns = u128::from(count) * u128::from(period_ns);
        self.cpu_ns = self.cpu_ns.saturating_add(cpu_ns);
    }

    fn merge(&mut self, other: Tally) {
        self.samples = self.samples.saturating_add(other.samples);
        self.cpu_ns = self.cpu_ns.saturating_add(other.cpu_ns);
    }
}

/// Adds `n` to a count, saturating (see [`Tally`]).
pub(crate) fn add_count(count: &mut u64, n: u64) {
    *count = count.saturating_add(n);
}

/// One scan's result, merged by the coordinator.
#[derive(Debug, Default)]
pub(crate) struct Partial {
    pub stacks: HashMap<StackId, u64>,
    pub total: Tally,
    pub buckets: HashMap<i64, Tally>,
    /// Of `buckets`, the idle CPU (the idle stack): the timeline shows
    /// busy cores apart from idle ones.
    pub idle_buckets: HashMap<i64, Tally>,
    pub label_sets: HashMap<LabelSetId, (Arc<LabelSet>, u64)>,
    /// Samples per (time bucket, stack), when [`Want::stack_buckets`].
    pub stack_buckets: HashMap<(i64, StackId), u64>,
    /// A gauge's last reading per label set (a query of
    /// `gpu_weight=live_bytes`), until [`Partial::settle_gauges`] moves
    /// them into `stacks` and `total`.
    pub latest: HashMap<LabelSetId, Latest>,
}

/// A label set's samples at the latest time seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Latest {
    pub at_ns: i64,
    pub stacks: HashMap<StackId, u64>,
    pub total: Tally,
}

impl Latest {
    fn add(&mut self, s: &StoredSample) {
        if self.stacks.is_empty() || s.timestamp_ns > self.at_ns {
            *self = Latest {
                at_ns: s.timestamp_ns,
                ..Latest::default()
            };
        } else if s.timestamp_ns < self.at_ns {
            return;
        }
        add_count(self.stacks.entry(s.stack).or_default(), s.count);
        self.total.add(s.count, s.period_ns);
    }

    fn merge(&mut self, other: Latest) {
        if self.stacks.is_empty() || other.at_ns > self.at_ns {
            *self = other;
        } else if other.at_ns == self.at_ns {
            for (stack, n) in other.stacks {
                add_count(self.stacks.entry(stack).or_default(), n);
            }
            self.total.merge(other.total);
        }
    }
}

impl Partial {
    pub(crate) fn merge(&mut self, other: Partial) {
        for (stack, n) in other.stacks {
            add_count(self.stacks.entry(stack).or_default(), n);
        }
        self.total.merge(other.total);
        for (bucket, t) in other.buckets {
            self.buckets.entry(bucket).or_default().merge(t);
        }
        for (bucket, t) in other.idle_buckets {
            self.idle_buckets.entry(bucket).or_default().merge(t);
        }
        for (id, (labels, n)) in other.label_sets {
            add_count(&mut self.label_sets.entry(id).or_insert((labels, 0)).1, n);
        }
        for (key, n) in other.stack_buckets {
            add_count(self.stack_buckets.entry(key).or_default(), n);
        }
        for (id, latest) in other.latest {
            self.latest.entry(id).or_default().merge(latest);
        }
    }

    /// Counts each gauge's last reading as the range's samples; once every
    /// partition is merged (a partition's last is not the range's).
    pub(crate) fn settle_gauges(&mut self) {
        for (_, latest) in self.latest.drain() {
            for (stack, n) in latest.stacks {
                add_count(self.stacks.entry(stack).or_default(), n);
            }
            self.total.merge(latest.total);
        }
    }
}

/// Label sets are immutable (content-addressed), so cached ones never go
/// stale.
pub(super) type LabelCache = BoundedCache<(String, LabelSetId), Arc<LabelSet>>;

/// Entries in an aggregator's label-set cache.
const LABEL_CACHE_SIZE: usize = 200_000;

/// Scans partitions; the coordinator routes each partition to one
/// aggregator, so that partition's label sets stay cached here.
#[derive(Debug)]
pub(crate) struct Aggregator {
    store: Arc<dyn ProfileStore>,
    labels: Arc<Mutex<LabelCache>>,
}

impl Aggregator {
    /// An aggregator reading `store`, its label-set cache's lookups
    /// counted in `counters`.
    pub(crate) fn new(store: Arc<dyn ProfileStore>, counters: CacheCounters) -> Self {
        Self {
            store,
            labels: Arc::new(Mutex::new(BoundedCache::counted(
                LABEL_CACHE_SIZE,
                counters,
            ))),
        }
    }
}

impl Actor for Aggregator {
    type Context = Context<Self>;
}

/// A scan whose asker went away (its query was dropped) is not started
/// (actix skips it in the mailbox) or stops at its next await
/// ([`Abandonable`]).
impl Handler<Scan> for Aggregator {
    type Result = Abandonable<Result<Partial, StoreError>>;

    fn handle(&mut self, scan: Scan, _: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        let labels = self.labels.clone();
        Abandonable::new(async move { run_scan(&*store, &labels, scan).await })
    }
}

impl Handler<MetricScan> for Aggregator {
    type Result = Abandonable<Result<MetricPartial, StoreError>>;

    fn handle(&mut self, scan: MetricScan, _: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        let labels = self.labels.clone();
        Abandonable::new(async move { run_metric_scan(&*store, &labels, scan).await })
    }
}

/// A scan's rows: its range's samples, or its window's rollup rows as
/// samples at the window's start.
async fn partition_rows(
    store: &dyn ProfileStore,
    range: &QueryRange,
    source: Source,
) -> Result<Vec<StoredSample>, StoreError> {
    let resolution = match source {
        Source::Samples => {
            return store
                .scan_samples(&range.scope, range.from_ns, range.to_ns)
                .await;
        }
        Source::Rollup(resolution) => resolution,
    };
    let window = resolution.window_of(range.from_ns.div_euclid(NANOS_PER_HOUR));
    let start = window.saturating_mul(NANOS_PER_HOUR);
    Ok(store
        .scan_rollup(&range.scope, resolution, window)
        .await?
        .into_iter()
        .map(|row| StoredSample {
            timestamp_ns: start,
            stack: row.stack,
            labels: row.labels,
            count: row.count,
            period_ns: row.period_ns,
        })
        .collect())
}

async fn run_scan(
    store: &dyn ProfileStore,
    cache: &Mutex<LabelCache>,
    Scan {
        range,
        want,
        source,
    }: Scan,
) -> Result<Partial, StoreError> {
    let samples = partition_rows(store, &range, source).await?;
    let tenant = range.scope.tenant();
    let label_sets =
        load_label_sets(store, cache, tenant, samples.iter().map(|s| s.labels)).await?;
    let mut partial = Partial::default();
    let idle = kiln_model::idle_stack_id();
    // Off-CPU samples weigh blocked time, not CPU time: summed with CPU
    // samples they would drown a flamegraph in waiting threads, so a query
    // reads them only when it filters on the device kind (the UI's
    // `device_kind` picker, `device_kind=off_cpu`).
    let device_kind_asked = range
        .filters
        .iter()
        .any(|(name, _)| name == kiln_model::label_names::DEVICE_KIND);
    // Likewise GPU samples whose count is not time (launches, PC samples,
    // device-memory bytes): summed with CPU samples and GPU kernel time
    // they would swamp a flamegraph in bytes, so only a query that names
    // its GPU unit (the GPU view, the UI's `gpu_weight` picker) reads
    // them.
    let gpu_weight_asked = range
        .filters
        .iter()
        .any(|(name, _)| name == GpuWeight::LABEL);
    // Samples of another sample type (heap, allocations, lock waits, wall
    // time, from OTLP or Pyroscope) weigh bytes, objects or waiting, not
    // CPU: only a query that names the type reads them (the UI's
    // `sample_type` picker, `sample_type=alloc_space`).
    let sample_type_asked = range
        .filters
        .iter()
        .any(|(name, _)| name == kiln_model::label_names::SAMPLE_TYPE);
    // Device memory live at a snapshot's end, heap in use, goroutines
    // alive are gauges: a range holds each label set's last reading, not
    // the sum of every one (an hour of 5 s snapshots read as 720 times the
    // memory).
    let gauge = kiln_model::filters_read_a_gauge(
        range.filters.iter().map(|(n, v)| (n.as_str(), v.as_str())),
    );
    for s in samples {
        let Some(labels) = label_sets.get(&s.labels) else {
            continue; // a label set never written: counted nowhere
        };
        if !labels.matches(range.filters.iter().map(|(n, v)| (n.as_str(), v.as_str()))) {
            continue;
        }
        let off_cpu = labels.get(kiln_model::label_names::DEVICE_KIND)
            == Some(kiln_model::label_names::OFF_CPU);
        if want.label_sets {
            // Off-CPU and other sample types' label sets are counted even
            // when their samples are left out, so the label picker offers
            // them.
            let entry = partial
                .label_sets
                .entry(s.labels)
                .or_insert_with(|| (labels.clone(), 0));
            add_count(&mut entry.1, s.count);
        }
        let not_time = labels
            .get(GpuWeight::LABEL)
            .is_some_and(|unit| unit != GpuWeight::Nanoseconds.as_str());
        let typed = labels.get(kiln_model::label_names::SAMPLE_TYPE).is_some();
        if (off_cpu && !device_kind_asked)
            || (not_time && !gpu_weight_asked)
            || (typed && !sample_type_asked)
        {
            continue;
        }
        if gauge {
            partial.latest.entry(s.labels).or_default().add(&s);
            continue;
        }
        add_count(partial.stacks.entry(s.stack).or_default(), s.count);
        partial.total.add(s.count, s.period_ns);
        if let Some((origin, step)) = want.timeline {
            let bucket = bucket_of(s.timestamp_ns, origin, step);
            if want.stack_buckets {
                add_count(
                    partial.stack_buckets.entry((bucket, s.stack)).or_default(),
                    s.count,
                );
            }
            // CPU over time counts CPU: a GPU sample's count × period is
            // GPU time (or launches, or bytes), which drew every busy GPU
            // as a busy core. A query naming the device or the GPU unit
            // asked for them.
            let gpu = labels.get(kiln_model::label_names::DEVICE_KIND) == Some("gpu");
            if gpu && !device_kind_asked && !gpu_weight_asked {
                continue;
            }
            partial
                .buckets
                .entry(bucket)
                .or_default()
                .add(s.count, s.period_ns);
            if s.stack == idle {
                partial
                    .idle_buckets
                    .entry(bucket)
                    .or_default()
                    .add(s.count, s.period_ns);
            }
        }
    }
    Ok(partial)
}

/// The index of the step of width `step` (> 0) from `origin` that
/// `timestamp_ns` falls in, computed wide so that no pair of timestamps
/// overflows (a range may span all of `i64`).
pub(crate) fn bucket_of(timestamp_ns: i64, origin: i64, step: i64) -> i64 {
    let bucket =
        (i128::from(timestamp_ns) - i128::from(origin)).div_euclid(i128::from(step.max(1)));
    // |bucket| <= 2^64 / 1: clamp to i64 for the impossible case of a step
    // of 1 ns over more than 2^63 ns.
    bucket.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The label sets of `ids`, from the cache or else the store; ids the
/// store lacks are left out.
pub(super) async fn load_label_sets(
    store: &dyn ProfileStore,
    cache: &Mutex<LabelCache>,
    tenant: &str,
    ids: impl Iterator<Item = LabelSetId>,
) -> Result<HashMap<LabelSetId, Arc<LabelSet>>, StoreError> {
    let unique: HashSet<LabelSetId> = ids.collect();
    let mut found = HashMap::with_capacity(unique.len());
    let mut missing = Vec::new();
    {
        let cache = cache.lock().expect("label cache lock");
        for id in unique {
            match cache.get(&(tenant.to_owned(), id)) {
                Some(labels) => {
                    found.insert(id, labels.clone());
                }
                None => missing.push(id),
            }
        }
        cache.record(found.len(), missing.len());
    }
    if missing.is_empty() {
        return Ok(found);
    }
    let loaded = store.get_label_sets(tenant, &missing).await?;
    let mut cache = cache.lock().expect("label cache lock");
    for (id, labels) in missing.into_iter().zip(loaded) {
        if let Some(labels) = labels {
            let labels = Arc::new(labels);
            cache.insert((tenant.to_owned(), id), labels.clone());
            found.insert(id, labels);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards issue 18's overflow: two samples of 2^63 (one stack, or two)
    /// merge to a saturated count, not a wrapped one or a panic.
    #[test]
    fn counts_saturate_instead_of_overflowing() {
        let big = 1u64 << 63;
        let mut tally = Tally::default();
        tally.add(big, u64::MAX);
        tally.add(big, u64::MAX);
        assert_eq!(tally.samples, u64::MAX);
        assert_eq!(tally.cpu_ns, 2 * u128::from(big) * u128::from(u64::MAX));
        tally.merge(Tally {
            samples: 1,
            cpu_ns: u128::MAX,
        });
        assert_eq!(
            tally,
            Tally {
                samples: u64::MAX,
                cpu_ns: u128::MAX
            }
        );

        let partial = |stack: u128| {
            let mut p = Partial::default();
            p.stacks.insert(StackId(stack), big);
            p.total.add(big, 1);
            p.buckets.insert(0, p.total);
            p
        };
        let mut merged = partial(1);
        merged.merge(partial(1));
        merged.merge(partial(2));
        assert_eq!(merged.stacks[&StackId(1)], u64::MAX);
        assert_eq!(merged.stacks[&StackId(2)], big);
        assert_eq!(merged.total.samples, u64::MAX);
        assert_eq!(merged.buckets[&0].samples, u64::MAX);
    }

    #[test]
    fn buckets_of_extreme_times_do_not_overflow() {
        assert_eq!(bucket_of(i64::MAX, i64::MIN, 1), i64::MAX);
        assert_eq!(bucket_of(i64::MIN, i64::MAX, 1), i64::MIN);
        assert_eq!(bucket_of(i64::MAX, i64::MIN, i64::MAX), 2);
        assert_eq!(bucket_of(5, 0, 10), 0);
        assert_eq!(bucket_of(-1, 0, 10), -1);
        assert_eq!(bucket_of(25, 5, 10), 2);
    }
}
