//! What the query side measures: route latencies and its caches' hits and
//! misses.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::{CacheLabels, HistogramFamily, RouteLabels, query_histogram};

/// The query routes timed by `kiln_query_seconds`, by path (the `route`
/// label): every route of `http::query_routes` that reads the store.
const QUERY_ROUTES: [&str; 9] = [
    "/api/v1/flamegraph",
    "/api/v1/top",
    "/api/v1/timeline",
    "/api/v1/labels",
    "/api/v1/metrics",
    "/api/v1/metrics/names",
    "/api/v1/gpu/kernels",
    "/api/v1/gpu/instructions",
    "/api/v1/gpu/trace",
];

/// A query cache's hits and misses, counted once per lookup of a batch of
/// keys.
#[derive(Debug, Clone, Default)]
pub struct CacheCounters {
    hits: Counter,
    misses: Counter,
}

impl CacheCounters {
    /// Counts a lookup of `hits + misses` keys.
    pub fn record(&self, hits: usize, misses: usize) {
        if hits > 0 {
            self.hits.inc_by(hits as u64);
        }
        if misses > 0 {
            self.misses.inc_by(misses as u64);
        }
    }
}

/// What the query side measures.
#[derive(Debug, Clone)]
pub struct QueryMetrics {
    seconds: HistogramFamily<RouteLabels>,
    /// The histogram of each of [`QUERY_ROUTES`], in its order.
    route_handles: Arc<[Histogram]>,
    hits: Family<CacheLabels, Counter>,
    misses: Family<CacheLabels, Counter>,
    /// Each aggregator's label-set cache.
    pub label_sets: CacheCounters,
    /// The resolver's stack cache (stack id → frame ids).
    pub stacks: CacheCounters,
    /// The resolver's frame cache (frame id → labels).
    pub frames: CacheCounters,
}

impl Default for QueryMetrics {
    fn default() -> Self {
        let seconds = HistogramFamily::<RouteLabels>::new_with_constructor(query_histogram);
        let route_handles = QUERY_ROUTES
            .iter()
            .map(|&route| seconds.get_or_create(&RouteLabels { route }).clone())
            .collect();
        let hits = Family::<CacheLabels, Counter>::default();
        let misses = Family::<CacheLabels, Counter>::default();
        let cache = |cache: &'static str| CacheCounters {
            hits: hits.get_or_create(&CacheLabels { cache }).clone(),
            misses: misses.get_or_create(&CacheLabels { cache }).clone(),
        };
        QueryMetrics {
            label_sets: cache("label_sets"),
            stacks: cache("stacks"),
            frames: cache("frames"),
            seconds,
            route_handles,
            hits,
            misses,
        }
    }
}

impl QueryMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "query",
            "Time to answer a query request (to the response's head: admission, scans, \
             merging, rendering), by route",
            Unit::Seconds,
            self.seconds.clone(),
        );
        registry.register(
            "query_cache_hits",
            "Keys found in a query cache, by cache: label_sets (each aggregator's), stacks and \
             frames (the resolver's)",
            self.hits.clone(),
        );
        registry.register(
            "query_cache_misses",
            "Keys not found in a query cache (then read from the store), by cache",
            self.misses.clone(),
        );
    }

    /// The histogram of the query route at `path`, if it is one.
    pub(super) fn route(&self, path: &str) -> Option<&Histogram> {
        let i = QUERY_ROUTES.iter().position(|r| *r == path)?;
        self.route_handles.get(i)
    }
}
