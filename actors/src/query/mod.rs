//! The query side: a `QueryCoordinator` splits a request into one scan per
//! storage partition (an hour of one project), routes each to an
//! `Aggregator` by rendezvous hashing, merges the partial counts, resolves
//! stacks to frames and builds the answer (flamegraph, top functions, CPU
//! over time, label values).

mod aggregator;
mod cache;
mod rendezvous;
mod resolve;
mod views;

use std::sync::Arc;
use std::time::Instant;

use actix::{Actor, Addr, Arbiter, Context, Handler, Message, ResponseFuture};
use futures_util::future::join_all;
use kiln_model::flamewire::Flamewire;
use kiln_model::{FileId, NANOS_PER_HOUR};
use kiln_storage::{ObjectStore, ProfileStore, Scope, StoreError};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use aggregator::{Aggregator, Partial, Scan, Want};
use resolve::Resolver;

pub use aggregator::Tally;
pub use rendezvous::pick as rendezvous_pick;
pub use resolve::FrameLabel;
pub use views::{LabelValues, Timeline, TimelinePoint, TopFunction, flamegraph_of};

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

impl QueryRange {
    fn duration_ns(&self) -> i64 {
        self.to_ns.saturating_sub(self.from_ns).max(1)
    }

    /// The range cut at storage-partition (hour) boundaries.
    fn partitions(&self) -> impl Iterator<Item = QueryRange> + '_ {
        let first = self.from_ns.div_euclid(NANOS_PER_HOUR);
        let last = (self.to_ns - 1).div_euclid(NANOS_PER_HOUR);
        (first..=last).map(move |hour| QueryRange {
            from_ns: self.from_ns.max(hour.saturating_mul(NANOS_PER_HOUR)),
            to_ns: self.to_ns.min((hour + 1).saturating_mul(NANOS_PER_HOUR)),
            ..self.clone()
        })
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

/// A flamegraph of a range.
#[derive(Debug, Message)]
#[rtype(result = "Result<Flamewire, QueryError>")]
pub struct FlamegraphQuery(pub QueryRange);

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

/// Splits queries over the aggregators and merges their answers.
#[derive(Debug)]
pub struct QueryCoordinator {
    cluster: Arc<Cluster>,
}

#[derive(Debug)]
struct Cluster {
    aggregators: Vec<Addr<Aggregator>>,
    /// Node names for rendezvous hashing, one per aggregator.
    names: Vec<String>,
    resolver: Resolver,
}

impl QueryCoordinator {
    /// Starts `aggregators` aggregators, each on an arbiter (thread) of its
    /// own, and a coordinator over them in the current arbiter; symbols
    /// come from `objects`, with the debuginfod servers of the
    /// `DEBUGINFOD_URLS` environment variable as a fallback
    /// ([`SymbolizerConfig::from_env`]).
    pub fn start(
        store: Arc<dyn ProfileStore>,
        objects: Arc<dyn ObjectStore>,
        aggregators: usize,
    ) -> Addr<QueryCoordinator> {
        let symbolizer = Symbolizer::spawn(objects, SymbolizerConfig::from_env());
        Self::start_with_symbolizer(store, symbolizer, aggregators)
    }

    /// Like [`start`](Self::start), with frames symbolized by `symbolizer`.
    pub fn start_with_symbolizer(
        store: Arc<dyn ProfileStore>,
        symbolizer: Addr<Symbolizer>,
        aggregators: usize,
    ) -> Addr<QueryCoordinator> {
        let mut addrs = Vec::new();
        for _ in 0..aggregators.max(1) {
            let store = store.clone();
            let arbiter = Arbiter::new();
            addrs.push(Aggregator::start_in_arbiter(&arbiter.handle(), move |_| {
                Aggregator::new(store)
            }));
        }
        let names = (0..addrs.len()).map(|i| format!("local-{i}")).collect();
        QueryCoordinator {
            cluster: Arc::new(Cluster {
                aggregators: addrs,
                names,
                resolver: Resolver::new(store, symbolizer),
            }),
        }
        .start()
    }
}

impl Actor for QueryCoordinator {
    type Context = Context<Self>;
}

impl Cluster {
    /// Scans every partition of `range` and merges the results.
    async fn gather(&self, range: &QueryRange, want: Want) -> Result<Partial, QueryError> {
        let scans = range.partitions().map(|part| {
            let key = partition_key(&part);
            let node = rendezvous::pick(&key, &self.names).expect("at least one aggregator");
            self.aggregators[node].send(Scan { range: part, want })
        });
        let mut merged = Partial::default();
        for result in join_all(scans).await {
            merged.merge(result??);
        }
        Ok(merged)
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

impl Handler<SymbolsStored> for QueryCoordinator {
    type Result = ();

    fn handle(&mut self, msg: SymbolsStored, _: &mut Context<Self>) {
        self.cluster
            .resolver
            .symbols_stored(msg.tenant.as_deref(), msg.file_id);
    }
}

impl Handler<FlamegraphQuery> for QueryCoordinator {
    type Result = ResponseFuture<Result<Flamewire, QueryError>>;

    fn handle(
        &mut self,
        FlamegraphQuery(range): FlamegraphQuery,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            let started = Instant::now();
            let partial = cluster.gather(&range, Want::default()).await?;
            let gathered = started.elapsed();
            let resolved = cluster
                .resolver
                .resolve(range.scope.tenant(), partial.stacks.keys().copied())
                .await?;
            let resolved_at = started.elapsed();
            let graph = views::flamegraph(&range, &partial, &resolved);
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
    type Result = ResponseFuture<Result<Vec<TopFunction>, QueryError>>;

    fn handle(&mut self, q: TopQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Box::pin(async move {
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
    type Result = ResponseFuture<Result<Timeline, QueryError>>;

    fn handle(&mut self, q: TimelineQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            let step_ns = q.step_ns.max(1);
            let want = Want {
                timeline: Some((q.range.from_ns, step_ns)),
                label_sets: false,
            };
            let partial = cluster.gather(&q.range, want).await?;
            Ok(views::timeline(&q.range, step_ns, &partial))
        })
    }
}

impl Handler<LabelsQuery> for QueryCoordinator {
    type Result = ResponseFuture<Result<LabelValues, QueryError>>;

    fn handle(&mut self, LabelsQuery(range): LabelsQuery, _: &mut Context<Self>) -> Self::Result {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            let want = Want {
                timeline: None,
                label_sets: true,
            };
            let partial = cluster.gather(&range, want).await?;
            Ok(views::label_values(&partial))
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
        let parts: Vec<(i64, i64)> = range.partitions().map(|p| (p.from_ns, p.to_ns)).collect();
        assert_eq!(parts, [(h / 2, h), (h, 2 * h), (2 * h, 2 * h + 1)]);
        let exact = QueryRange {
            from_ns: h,
            to_ns: 2 * h,
            ..range
        };
        assert_eq!(exact.partitions().count(), 1);
    }
}
