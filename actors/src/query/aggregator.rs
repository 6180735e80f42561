//! `Aggregator`: scans one partition (an hour of one tenant's project) and
//! sums its samples per stack, per time bucket and per label set, or one
//! metric's points per series and step (`metrics`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use kiln_model::{LabelSet, LabelSetId, StackId};
use kiln_storage::{ProfileStore, StoreError};

use super::QueryRange;
use super::cache::BoundedCache;
use super::metrics::{MetricPartial, MetricScan, run_metric_scan};

/// What a scan adds up besides per-stack counts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Want {
    /// Bucket samples by time: (origin, step) in nanoseconds.
    pub timeline: Option<(i64, i64)>,
    /// Count samples per label set.
    pub label_sets: bool,
}

/// Scans a sub-range that lies within one storage partition.
#[derive(Debug, Message)]
#[rtype(result = "Result<Partial, StoreError>")]
pub(crate) struct Scan {
    pub range: QueryRange,
    pub want: Want,
}

/// Samples and CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Sample count.
    pub samples: u64,
    /// CPU nanoseconds they stand for.
    pub cpu_ns: u128,
}

impl Tally {
    fn add(&mut self, count: u64, period_ns: u64) {
        self.samples += count;
        self.cpu_ns += count as u128 * period_ns as u128;
    }

    fn merge(&mut self, other: Tally) {
        self.samples += other.samples;
        self.cpu_ns += other.cpu_ns;
    }
}

/// One scan's result, merged by the coordinator.
#[derive(Debug, Default)]
pub(crate) struct Partial {
    pub stacks: HashMap<StackId, u64>,
    pub total: Tally,
    pub buckets: HashMap<i64, Tally>,
    pub label_sets: HashMap<LabelSetId, (Arc<LabelSet>, u64)>,
}

impl Partial {
    pub(crate) fn merge(&mut self, other: Partial) {
        for (stack, n) in other.stacks {
            *self.stacks.entry(stack).or_default() += n;
        }
        self.total.merge(other.total);
        for (bucket, t) in other.buckets {
            self.buckets.entry(bucket).or_default().merge(t);
        }
        for (id, (labels, n)) in other.label_sets {
            self.label_sets.entry(id).or_insert((labels, 0)).1 += n;
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
    pub(crate) fn new(store: Arc<dyn ProfileStore>) -> Self {
        Self {
            store,
            labels: Arc::new(Mutex::new(BoundedCache::new(LABEL_CACHE_SIZE))),
        }
    }
}

impl Actor for Aggregator {
    type Context = Context<Self>;
}

impl Handler<Scan> for Aggregator {
    type Result = ResponseFuture<Result<Partial, StoreError>>;

    fn handle(&mut self, scan: Scan, _: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        let labels = self.labels.clone();
        Box::pin(async move { run_scan(&*store, &labels, scan).await })
    }
}

impl Handler<MetricScan> for Aggregator {
    type Result = ResponseFuture<Result<MetricPartial, StoreError>>;

    fn handle(&mut self, scan: MetricScan, _: &mut Context<Self>) -> Self::Result {
        let store = self.store.clone();
        let labels = self.labels.clone();
        Box::pin(async move { run_metric_scan(&*store, &labels, scan).await })
    }
}

async fn run_scan(
    store: &dyn ProfileStore,
    cache: &Mutex<LabelCache>,
    Scan { range, want }: Scan,
) -> Result<Partial, StoreError> {
    let samples = store
        .scan_samples(&range.scope, range.from_ns, range.to_ns)
        .await?;
    let tenant = range.scope.tenant();
    let label_sets =
        load_label_sets(store, cache, tenant, samples.iter().map(|s| s.labels)).await?;
    let mut partial = Partial::default();
    for s in samples {
        let Some(labels) = label_sets.get(&s.labels) else {
            continue; // a label set never written: counted nowhere
        };
        if !labels.matches(range.filters.iter().map(|(n, v)| (n.as_str(), v.as_str()))) {
            continue;
        }
        *partial.stacks.entry(s.stack).or_default() += s.count;
        partial.total.add(s.count, s.period_ns);
        if let Some((origin, step)) = want.timeline {
            let bucket = (s.timestamp_ns - origin).div_euclid(step);
            partial
                .buckets
                .entry(bucket)
                .or_default()
                .add(s.count, s.period_ns);
        }
        if want.label_sets {
            partial
                .label_sets
                .entry(s.labels)
                .or_insert_with(|| (labels.clone(), 0))
                .1 += s.count;
        }
    }
    Ok(partial)
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
