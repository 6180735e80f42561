//! The query side: a `QueryCoordinator` splits a request into one scan per
//! storage partition (an hour of one project) that holds data, routes each
//! to an `Aggregator` by rendezvous hashing, merges the partial counts,
//! resolves stacks to frames and builds the answer (flamegraph, top
//! functions, CPU over time, label values).
//!
//! What a query costs follows its data: the coordinator asks the store's
//! index which hours of the range hold samples
//! ([`ProfileStore::sample_hours`]) and scans only those, a few at a time
//! ([`SCANS_IN_FLIGHT`]). Queries over the API are admitted first
//! (module `admission`: per-tenant concurrency, a maximum span of data,
//! [`QueryOptions`]); each scan then takes one of the node's scan slots,
//! handed out in turn between tenants (module `fair`), so one tenant's
//! heavy queries do not hold up another's; and a query whose asker goes
//! away (client disconnected, server stopping) stops scanning (module
//! `abandon`).
//!
//! With peers ([`PeerOptions`], `kiln query --peers`), rendezvous hashing
//! first picks the query node that owns a partition, and scans owned by
//! other nodes go to them over HTTP (module `peers`).

mod abandon;
mod admission;
mod aggregator;
pub(crate) mod cache;
pub mod compare;
mod fair;
mod gpu;
mod metrics;
mod peers;
mod rendezvous;
mod resolve;
mod views;
mod wire;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use actix::{Actor, Addr, Arbiter, Context, Handler, Message, ResponseFuture};
use futures_util::{StreamExt, TryStreamExt, stream};
use kiln_model::flamewire::Flamewire;
use kiln_model::{FileId, NANOS_PER_HOUR};
use kiln_storage::{
    ObjectStore, ProfileStore, Resolution, Scope, StoreError, current_rollups, window_versions,
};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use crate::telemetry::QueryMetrics;
use aggregator::Aggregator;
pub(crate) use aggregator::{Partial, Scan, Source, Want};
use peers::{Owner, Peers, SymbolNotifier, SymbolsNotice};
use resolve::Resolver;

pub use abandon::Abandonable;
pub(crate) use admission::{Admission, Admit, Reads, Refusal, SpanLimit};
pub use admission::{
    DEFAULT_MAX_QUERY_RANGE, DEFAULT_QUERY_QUEUE_WAIT, QUERY_RETRY_AFTER, QueryOptions,
    SetQueryOptions,
};
pub use aggregator::Tally;
pub use gpu::{GpuInstructionsQuery, GpuKernelsQuery, GpuTraceQuery, TRACE_KERNELS};
pub use kiln_model::{LabelValues, Timeline, TimelinePoint, TopFunction};
pub use metrics::{MetricNamesQuery, MetricsQuery};
pub(crate) use peers::SymbolsNotice as PeerSymbolsNotice;
pub use peers::{
    CLUSTER_SECRET_HEADER, ClusterSecret, DEFAULT_PEER_TIMEOUT, PEER_RETRY_AFTER, PeerConfigError,
    PeerOptions, QueryNodes, SCAN_CONTENT_TYPE,
};
pub use rendezvous::pick as rendezvous_pick;
pub use resolve::FrameLabel;
pub use views::flamegraph_of;
pub(crate) use wire::{decode_scan, encode_partial};

/// What to aggregate: a project's samples in `[from_ns, to_ns)` whose labels
/// match every filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRange {
    /// Tenant and project, from the caller's credential.
    pub scope: Scope,
    /// Start, nanoseconds since the epoch (inclusive).
    pub from_ns: i64,
    /// End (exclusive).
    pub to_ns: i64,
    /// `(label, value)` pairs a sample's labels must all have.
    pub filters: Vec<(String, String)>,
}

/// Partition scans one query keeps in flight: enough to keep every
/// aggregator (and peer) busy, few enough that a query over thousands of
/// hours neither floods the mailboxes nor holds thousands of partial
/// results at once, and that a dropped query leaves little half done.
pub const SCANS_IN_FLIGHT: usize = 32;

impl QueryRange {
    fn duration_ns(&self) -> i64 {
        self.to_ns.saturating_sub(self.from_ns).max(1)
    }

    /// Whether the range holds the whole window of `resolution` that
    /// starts at hour `window`.
    fn covers(&self, resolution: Resolution, window: i64) -> bool {
        let start = window.saturating_mul(NANOS_PER_HOUR);
        self.from_ns <= start && start.saturating_add(resolution.nanos()) <= self.to_ns
    }

    /// The window of `resolution` starting at hour `window`, as a range
    /// with this one's scope and filters.
    fn window(&self, resolution: Resolution, window: i64) -> QueryRange {
        let start = window.saturating_mul(NANOS_PER_HOUR);
        QueryRange {
            from_ns: start,
            to_ns: start.saturating_add(resolution.nanos()),
            ..self.clone()
        }
    }

    /// The part of the range within storage partition (hour) `hour`.
    fn partition(&self, hour: i64) -> QueryRange {
        QueryRange {
            from_ns: self.from_ns.max(hour.saturating_mul(NANOS_PER_HOUR)),
            to_ns: self
                .to_ns
                .min(hour.saturating_add(1).saturating_mul(NANOS_PER_HOUR)),
            ..self.clone()
        }
    }
}

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The store failed.
    #[error("reading the profile store failed: {0}")]
    Store(#[from] StoreError),
    /// An actor of the cluster is gone (the server is shutting down).
    #[error("the query cluster is unavailable: {0}")]
    Unavailable(#[from] actix::MailboxError),
}

impl From<kiln_symbolizer_workers::SymbolizeError> for QueryError {
    fn from(e: kiln_symbolizer_workers::SymbolizeError) -> Self {
        match e {
            kiln_symbolizer_workers::SymbolizeError::Store(e) => QueryError::Store(e),
            kiln_symbolizer_workers::SymbolizeError::Unavailable(e) => QueryError::Unavailable(e),
        }
    }
}

/// What one flamegraph node stands for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Granularity {
    /// A function: its frames at every line are one node (the default).
    #[default]
    Function,
    /// A line of a function: one node per (function, file, line).
    Line,
}

/// A flamegraph of a range, its nodes of the granularity given.
#[derive(Debug, Message)]
#[rtype(result = "Result<Flamewire, QueryError>")]
pub struct FlamegraphQuery(pub QueryRange, pub Granularity);

/// The functions with the most samples.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<TopFunction>, QueryError>")]
pub struct TopQuery {
    /// What to aggregate.
    pub range: QueryRange,
    /// How many functions to return.
    pub limit: usize,
}

/// CPU over time, in steps of `step_ns`.
#[derive(Debug, Message)]
#[rtype(result = "Result<Timeline, QueryError>")]
pub struct TimelineQuery {
    /// What to aggregate.
    pub range: QueryRange,
    /// Width of one point.
    pub step_ns: i64,
}

/// The label names and values seen in a range, with their sample counts.
#[derive(Debug, Message)]
#[rtype(result = "Result<LabelValues, QueryError>")]
pub struct LabelsQuery(pub QueryRange);

/// Symbols for a file were stored: frames of that file are symbolized
/// again from the next query on, instead of after the "no symbols" memory
/// of the resolver runs out.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SymbolsStored {
    /// Whose symbols; `None` for the global store (every tenant's).
    pub tenant: Option<String>,
    /// The file.
    pub file_id: FileId,
}

/// A scan a peer node sent: run on this node's aggregators, never passed
/// on (peers that disagree on the peer set cannot bounce it around).
#[derive(Debug, Message)]
#[rtype(result = "Result<Partial, QueryError>")]
pub(crate) struct ServeScan(pub Scan);

/// A peer's notice that symbols for a file were stored: as
/// [`SymbolsStored`], not passed on.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct PeerSymbolsStored(pub PeerSymbolsNotice);

/// How many partition scans this node ran, sent, and served since it
/// started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanCounts {
    /// Scans of this node's queries that it owned and ran itself.
    pub local: u64,
    /// Scans of this node's queries that their owner peer answered.
    pub remote: u64,
    /// Scans whose owner peer failed or was down, run here instead.
    pub fallback: u64,
    /// Scans run here for peers' queries.
    pub served: u64,
}

/// Asks for the [`ScanCounts`].
#[derive(Debug, Message)]
#[rtype(result = "ScanCounts")]
pub struct ScanCountsQuery;

/// Splits queries over the aggregators and merges their answers.
///
/// Every query answer is computed as an [`Abandonable`]: when the asker
/// drops its request, the query stops scheduling partitions and the scans
/// it queued are skipped.
#[derive(Debug)]
pub struct QueryCoordinator {
    cluster: Arc<Cluster>,
    /// What admission enforces ([`SetQueryOptions`]).
    options: QueryOptions,
}

#[derive(Debug)]
struct Cluster {
    /// The store, for what needs no aggregator (the metric names index).
    store: Arc<dyn ProfileStore>,
    aggregators: Vec<Addr<Aggregator>>,
    /// Node names for rendezvous hashing, one per aggregator.
    names: Vec<String>,
    resolver: Resolver,
    /// The other query nodes, when scans are shared.
    peers: Option<Peers>,
    /// Who hears of symbol uploads here: the peers, or a gateway's query
    /// nodes.
    notifier: Option<SymbolNotifier>,
    counts: Counters,
    /// The queries each tenant runs here.
    slots: Arc<admission::TenantSlots>,
    /// The scans each tenant runs here, in fair shares.
    fair: Arc<fair::FairScans>,
}

#[derive(Debug, Default)]
struct Counters {
    local: AtomicU64,
    remote: AtomicU64,
    fallback: AtomicU64,
    served: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl QueryCoordinator {
    /// Starts `aggregators` aggregators, each on an arbiter (thread) of its
    /// own, and a coordinator over them in the current arbiter; symbols
    /// come from `objects`, with the debuginfod servers of the
    /// `DEBUGINFOD_URLS` environment variable as a fallback
    /// ([`SymbolizerConfig::from_env`]). Its caches count their hits and
    /// misses in `metrics`.
    pub fn start(
        store: Arc<dyn ProfileStore>,
        objects: Arc<dyn ObjectStore>,
        aggregators: usize,
        metrics: &QueryMetrics,
    ) -> Addr<QueryCoordinator> {
        let symbolizer = Symbolizer::spawn(objects, SymbolizerConfig::from_env());
        Self::start_with_symbolizer(store, symbolizer, aggregators, metrics)
    }

    /// Like [`start`](Self::start), with frames symbolized by `symbolizer`.
    pub fn start_with_symbolizer(
        store: Arc<dyn ProfileStore>,
        symbolizer: Addr<Symbolizer>,
        aggregators: usize,
        metrics: &QueryMetrics,
    ) -> Addr<QueryCoordinator> {
        Self::start_node(store, symbolizer, aggregators, None, None, metrics)
    }

    /// Like [`start_with_symbolizer`](Self::start_with_symbolizer), as one
    /// node of a peer set: partition scans are spread over the nodes by
    /// rendezvous hashing, and symbol uploads are told to the others.
    pub fn start_with_peers(
        store: Arc<dyn ProfileStore>,
        symbolizer: Addr<Symbolizer>,
        aggregators: usize,
        peers: PeerOptions,
        metrics: &QueryMetrics,
    ) -> Result<Addr<QueryCoordinator>, PeerConfigError> {
        let peers = Peers::new(peers)?;
        tracing::info!(nodes = ?peers.nodes(), "query node sharing scans with its peers");
        let notifier = peers.notifier();
        Ok(Self::start_node(
            store,
            symbolizer,
            aggregators,
            Some(peers),
            Some(notifier),
            metrics,
        ))
    }

    /// A coordinator that tells `nodes` of symbol uploads, for a gateway:
    /// like [`start`](Self::start) otherwise.
    pub fn start_notifying(
        store: Arc<dyn ProfileStore>,
        objects: Arc<dyn ObjectStore>,
        aggregators: usize,
        nodes: QueryNodes,
        metrics: &QueryMetrics,
    ) -> Result<Addr<QueryCoordinator>, PeerConfigError> {
        let notifier = SymbolNotifier::new(nodes)?;
        let symbolizer = Symbolizer::spawn(objects, SymbolizerConfig::from_env());
        Ok(Self::start_node(
            store,
            symbolizer,
            aggregators,
            None,
            Some(notifier),
            metrics,
        ))
    }

    fn start_node(
        store: Arc<dyn ProfileStore>,
        symbolizer: Addr<Symbolizer>,
        aggregators: usize,
        peers: Option<Peers>,
        notifier: Option<SymbolNotifier>,
        metrics: &QueryMetrics,
    ) -> Addr<QueryCoordinator> {
        let mut addrs = Vec::new();
        for _ in 0..aggregators.max(1) {
            let store = store.clone();
            let counters = metrics.label_sets.clone();
            let arbiter = Arbiter::new();
            addrs.push(Aggregator::start_in_arbiter(&arbiter.handle(), move |_| {
                Aggregator::new(store, counters)
            }));
        }
        let names = (0..addrs.len()).map(|i| format!("local-{i}")).collect();
        let fair = fair::FairScans::new(addrs.len() * fair::SCANS_PER_AGGREGATOR);
        QueryCoordinator {
            cluster: Arc::new(Cluster {
                store: store.clone(),
                aggregators: addrs,
                names,
                resolver: Resolver::new(store, symbolizer, metrics),
                peers,
                notifier,
                counts: Counters::default(),
                slots: Arc::default(),
                fair,
            }),
            options: QueryOptions::default(),
        }
        .start()
    }
}

impl Actor for QueryCoordinator {
    type Context = Context<Self>;
}

impl Cluster {
    /// Scans every partition of `range` that holds samples (the store's
    /// index says which), [`SCANS_IN_FLIGHT`] at a time, and merges the
    /// results as they come.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the scans in flight and schedules no
    /// more; scans it queued on aggregators are skipped there.
    async fn gather(&self, range: &QueryRange, want: Want) -> Result<Partial, QueryError> {
        let hours = self
            .store
            .sample_hours(&range.scope, range.from_ns, range.to_ns)
            .await?;
        let scans = self.plan(range, want, hours).await?;
        stream::iter(scans)
            .map(|scan| self.scan(scan))
            .buffer_unordered(SCANS_IN_FLIGHT)
            .try_fold(Partial::default(), |mut merged, partial| async move {
                merged.merge(partial);
                Ok(merged)
            })
            .await
            .map(|mut merged: Partial| {
                merged.settle_gauges();
                merged
            })
    }

    /// The scans of `range`, whose `hours` hold samples: each whole day
    /// whose day rollup is current, then each hour of the rest, from its
    /// hour rollup when that is current and the hour whole, else from its
    /// samples; rollups only for a query they answer exactly
    /// ([`Want::rollup_answers`]), and for a timeline only windows that
    /// fall within one of its steps ([`Want::one_bucket`]). Costs three index reads of a row per
    /// hour or day.
    ///
    /// A write that makes a rollup stale after this read (a late batch)
    /// is missed by this query, as it would be had it landed a moment
    /// later; the next query reads below the stale rollup.
    async fn plan(
        &self,
        range: &QueryRange,
        want: Want,
        hours: Vec<i64>,
    ) -> Result<Vec<Scan>, QueryError> {
        let samples = |hour| Scan {
            range: range.partition(hour),
            want,
            source: Source::Samples,
        };
        if !want.rollup_answers(&range.filters) {
            return Ok(hours.into_iter().map(samples).collect());
        }
        let (scope, from, to) = (&range.scope, range.from_ns, range.to_ns);
        let (versions, hour_rollups, day_rollups) = futures_util::try_join!(
            self.store.hour_versions(scope, from, to),
            self.store
                .rollup_versions(scope, Resolution::Hour, from, to),
            self.store.rollup_versions(scope, Resolution::Day, from, to),
        )?;
        let rolled_hours: HashSet<i64> = current_rollups(&versions, &hour_rollups)
            .into_iter()
            .collect();
        let days = window_versions(Resolution::Day, &versions);
        let usable = |resolution: Resolution, window: i64| {
            range.covers(resolution, window)
                && want.one_bucket(window.saturating_mul(NANOS_PER_HOUR), resolution)
        };
        let rolled_days: Vec<i64> = current_rollups(&days, &day_rollups)
            .into_iter()
            .filter(|&day| usable(Resolution::Day, day))
            .collect();
        let mut scans: Vec<Scan> = rolled_days
            .iter()
            .map(|&day| Scan {
                range: range.window(Resolution::Day, day),
                want,
                source: Source::Rollup(Resolution::Day),
            })
            .collect();
        let rolled_days: HashSet<i64> = rolled_days.into_iter().collect();
        for hour in hours {
            if rolled_days.contains(&Resolution::Day.window_of(hour)) {
                continue;
            }
            if rolled_hours.contains(&hour) && usable(Resolution::Hour, hour) {
                scans.push(Scan {
                    range: range.window(Resolution::Hour, hour),
                    want,
                    source: Source::Rollup(Resolution::Hour),
                });
            } else {
                scans.push(samples(hour));
            }
        }
        Ok(scans)
    }

    /// Runs one partition's scan on the node that owns it: here, or on a
    /// peer, falling back to here when the peer fails.
    async fn scan(&self, scan: Scan) -> Result<Partial, QueryError> {
        let key = partition_key(&scan.range);
        match self.peers.as_ref().map(|peers| (peers, peers.owner(&key))) {
            None | Some((_, Owner::Here)) => bump(&self.counts.local),
            Some((_, Owner::PeerDown(_))) => bump(&self.counts.fallback),
            Some((peers, Owner::Peer(node))) => match peers.scan(node, &scan).await {
                Ok(partial) => {
                    bump(&self.counts.remote);
                    return Ok(partial);
                }
                Err(e) => {
                    tracing::warn!(
                        peer = peers.url(node),
                        error = %e,
                        "a peer failed a partition scan; scanning here instead, and \
                         not asking that peer again for {PEER_RETRY_AFTER:?}"
                    );
                    bump(&self.counts.fallback);
                }
            },
        }
        self.scan_here(&key, scan).await
    }

    /// Runs a scan on the aggregator of this node that owns its partition,
    /// once its tenant's turn for a slot comes ([`fair`]).
    async fn scan_here(&self, key: &[u8], scan: Scan) -> Result<Partial, QueryError> {
        let _slot = self.fair.acquire(scan.range.scope.tenant()).await;
        Ok(self.owner(key).send(scan).await??)
    }

    /// The aggregator of this node that owns partition `key`.
    fn owner(&self, key: &[u8]) -> &Addr<Aggregator> {
        let node = rendezvous::pick(key, &self.names).expect("at least one aggregator");
        &self.aggregators[node]
    }
}

/// The partition a sub-range lies in: tenant, project and hour.
fn partition_key(part: &QueryRange) -> Vec<u8> {
    let mut key = Vec::new();
    key.extend_from_slice(part.scope.tenant().as_bytes());
    key.push(0);
    key.extend_from_slice(part.scope.project().as_bytes());
    key.push(0);
    key.extend_from_slice(&part.from_ns.div_euclid(NANOS_PER_HOUR).to_be_bytes());
    key
}

/// Resolves once the peers or query nodes (if any) have heard of the
/// upload too, so that an upload answered is an upload every reachable
/// node shows.
impl Handler<SymbolsStored> for QueryCoordinator {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: SymbolsStored, _: &mut Context<Self>) -> Self::Result {
        self.cluster
            .resolver
            .symbols_stored(msg.tenant.as_deref(), msg.file_id);
        match &self.cluster.notifier {
            None => Box::pin(async {}),
            Some(notifier) => Box::pin(notifier.notify(&SymbolsNotice {
                tenant: msg.tenant,
                file_id: msg.file_id,
            })),
        }
    }
}

impl Handler<PeerSymbolsStored> for QueryCoordinator {
    type Result = ();

    fn handle(&mut self, PeerSymbolsStored(notice): PeerSymbolsStored, _: &mut Context<Self>) {
        self.cluster
            .resolver
            .symbols_stored(notice.tenant.as_deref(), notice.file_id);
    }
}

impl Handler<ServeScan> for QueryCoordinator {
    type Result = Abandonable<Result<Partial, QueryError>>;

    fn handle(&mut self, ServeScan(scan): ServeScan, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            bump(&cluster.counts.served);
            cluster.scan_here(&partition_key(&scan.range), scan).await
        })
    }
}

impl Handler<ScanCountsQuery> for QueryCoordinator {
    type Result = actix::MessageResult<ScanCountsQuery>;

    fn handle(&mut self, _: ScanCountsQuery, _: &mut Context<Self>) -> Self::Result {
        let counts = &self.cluster.counts;
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        actix::MessageResult(ScanCounts {
            local: read(&counts.local),
            remote: read(&counts.remote),
            fallback: read(&counts.fallback),
            served: read(&counts.served),
        })
    }
}

impl Handler<Admit> for QueryCoordinator {
    type Result = Abandonable<Result<Admission, Refusal>>;

    fn handle(&mut self, admit: Admit, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        let options = self.options;
        Abandonable::new(async move {
            admission::admit(&*cluster.store, &cluster.slots, options, admit).await
        })
    }
}

impl Handler<SetQueryOptions> for QueryCoordinator {
    type Result = ();

    fn handle(&mut self, SetQueryOptions(options): SetQueryOptions, _: &mut Context<Self>) {
        tracing::debug!(?options, "query options set");
        self.options = options;
    }
}

impl Handler<FlamegraphQuery> for QueryCoordinator {
    type Result = Abandonable<Result<Flamewire, QueryError>>;

    fn handle(
        &mut self,
        FlamegraphQuery(range, granularity): FlamegraphQuery,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let started = Instant::now();
            let partial = cluster.gather(&range, Want::default()).await?;
            let gathered = started.elapsed();
            let resolved = cluster
                .resolver
                .resolve(range.scope.tenant(), partial.stacks.keys().copied())
                .await?;
            let resolved_at = started.elapsed();
            let graph = views::flamegraph(&range, &partial, &resolved, granularity);
            tracing::debug!(
                stacks = partial.stacks.len(),
                nodes = graph.nodes.len(),
                scan_ms = gathered.as_secs_f64() * 1e3,
                resolve_ms = (resolved_at - gathered).as_secs_f64() * 1e3,
                build_ms = (started.elapsed() - resolved_at).as_secs_f64() * 1e3,
                "flamegraph built"
            );
            Ok(graph)
        })
    }
}

impl Handler<TopQuery> for QueryCoordinator {
    type Result = Abandonable<Result<Vec<TopFunction>, QueryError>>;

    fn handle(&mut self, q: TopQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let partial = cluster.gather(&q.range, Want::default()).await?;
            let resolved = cluster
                .resolver
                .resolve(q.range.scope.tenant(), partial.stacks.keys().copied())
                .await?;
            Ok(views::top_functions(&q.range, &partial, &resolved, q.limit))
        })
    }
}

impl Handler<TimelineQuery> for QueryCoordinator {
    type Result = Abandonable<Result<Timeline, QueryError>>;

    fn handle(&mut self, q: TimelineQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let step_ns = q.step_ns.max(1);
            let want = Want {
                timeline: Some((q.range.from_ns, step_ns)),
                ..Want::default()
            };
            let partial = cluster.gather(&q.range, want).await?;
            Ok(views::timeline(&q.range, step_ns, &partial))
        })
    }
}

impl Handler<LabelsQuery> for QueryCoordinator {
    type Result = Abandonable<Result<LabelValues, QueryError>>;

    fn handle(&mut self, LabelsQuery(range): LabelsQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let want = Want {
                label_sets: true,
                ..Want::default()
            };
            let partial = cluster.gather(&range, want).await?;
            Ok(views::label_values(&partial))
        })
    }
}

impl Handler<MetricsQuery> for QueryCoordinator {
    type Result = Abandonable<Result<kiln_model::MetricSeriesSet, QueryError>>;

    fn handle(&mut self, q: MetricsQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Abandonable::new(async move {
            let started = Instant::now();
            let step_ns = q.step_ns.max(1);
            let scan = |scan: metrics::MetricScan| {
                let owner = cluster.owner(&partition_key(&scan.range)).clone();
                let fair = Arc::clone(&cluster.fair);
                async move {
                    let _slot = fair.acquire(scan.range.scope.tenant()).await;
                    Ok(owner.send(scan).await??)
                }
            };
            let (scope, from, to) = (&q.range.scope, q.range.from_ns, q.range.to_ns);
            let hours = cluster.store.metric_hours(scope, &q.name, from, to).await?;
            let partial = metrics::gather(&q.range, hours, &q.name, step_ns, scan).await?;
            let set = metrics::series(&q.range, &q.name, step_ns, partial);
            tracing::debug!(
                metric = q.name,
                series = set.series.len(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                "metric series built"
            );
            Ok(set)
        })
    }
}

impl Handler<MetricNamesQuery> for QueryCoordinator {
    type Result = Abandonable<Result<Vec<String>, QueryError>>;

    fn handle(
        &mut self,
        MetricNamesQuery(range): MetricNamesQuery,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let store = self.cluster.store.clone();
        Abandonable::new(async move {
            Ok(store
                .metric_names(&range.scope, range.from_ns, range.to_ns)
                .await?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cut_at_hours_and_cover_the_range() {
        let h = NANOS_PER_HOUR;
        let range = QueryRange {
            scope: Scope::new("t", "p").unwrap(),
            from_ns: h / 2,
            to_ns: 2 * h + 1,
            filters: vec![],
        };
        let parts: Vec<(i64, i64)> = (0..=2)
            .map(|hour| range.partition(hour))
            .map(|p| (p.from_ns, p.to_ns))
            .collect();
        assert_eq!(parts, [(h / 2, h), (h, 2 * h), (2 * h, 2 * h + 1)]);
        // The first and last hours of the clock.
        let all = QueryRange {
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            ..range
        };
        let first = all.partition(i64::MIN.div_euclid(h));
        assert_eq!(first.from_ns, i64::MIN);
        let last = all.partition(i64::MAX.div_euclid(h));
        assert_eq!(last.to_ns, i64::MAX);
    }
}
