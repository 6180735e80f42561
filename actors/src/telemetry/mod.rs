//! Kiln's own metrics, for operators: every role serves them at
//! `GET /metrics` in the Prometheus text format (0.0.4). `docs/metrics.md`
//! lists each metric, its type, labels and meaning.
//!
//! One [`Metrics`] per process holds the registry (prometheus-client's,
//! made once at start and passed where needed: there is no global one)
//! and the handles the parts of the process update: [`IngestMetrics`]
//! (the ingest endpoints), [`WorkerMetrics`] (the ingest pipeline) and
//! [`QueryMetrics`] (the query routes and caches). A process registers the
//! families of its role only, so a gateway exports no empty query
//! histograms; the handles of a family left unregistered still count,
//! unseen, so no code path needs to know the role.
//!
//! Updates stay off the per-sample path: counters are atomics added to
//! once per batch, poll or request (`inc_by` with the batch's sum), and
//! the handles of fixed label values (stages, caches, routes) are taken
//! once at start; only per-tenant families look their labels up, once per
//! request.
//!
//! Each role's handles are a module of their own: `ingest` (gateways),
//! `worker` (the ingest pipeline), `query`, `regions` (forwarding) and
//! `auth` (credential checks during a metadata outage); this module makes
//! the registry, registers the families of a role and serves `/metrics`.
//!
//! Per-tenant families live in a registry of their own, shown to a
//! scraper as the operator chooses ([`tenant_view`]).
//!
//! The workers' consumer lag is read when `/metrics` is scraped
//! ([`Metrics::scrape`]), from the bus: each consumer reports the
//! partitions it is assigned ([`kiln_ingest_bus::LagReader`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, web};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod auth;
mod ingest;
mod query;
mod regions;
mod tenant_view;
mod worker;

pub use auth::{AuthLookup, AuthMetrics, OutageAnswer};
pub use ingest::{IngestMetrics, Protocol, Quota, Rejection};
pub use query::{CacheCounters, QueryMetrics};
pub use regions::{Forwarded, RegionMetrics};
pub use tenant_view::TenantNames;
use tenant_view::TenantView;
pub use worker::{DeadLetter, Stage, WorkerMetrics};

/// The `Content-Type` of `GET /metrics`: Prometheus text, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// What every metric's name starts with (`kiln_`).
pub const PREFIX: &str = "kiln";

/// The longest a scrape waits for the bus's offsets (Kafka: one request
/// for the group's commits, one per assigned partition for its end).
/// Prometheus gives a scrape 10 s by default.
const LAG_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Bucket bounds of the worker's stage latencies, in seconds: a stage of
/// a poll takes from well under a millisecond (dedup of a warm cache) to
/// seconds (a store's sync under load; a retried write more).
const STAGE_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Bucket bounds of query latencies, in seconds: from a cached label list
/// to a month-long flamegraph.
const QUERY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// Which parts of Kiln a process runs: its families are registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRole {
    /// Everything (`kiln up`).
    All,
    /// Ingest endpoints (`kiln gateway`).
    Gateway,
    /// The ingest pipeline (`kiln worker`).
    Worker,
    /// Queries (`kiln query`).
    Query,
}

impl ServerRole {
    /// The `role` label of `kiln_build_info`.
    pub fn name(self) -> &'static str {
        match self {
            ServerRole::All => "all",
            ServerRole::Gateway => "gateway",
            ServerRole::Worker => "worker",
            ServerRole::Query => "query",
        }
    }

    fn ingests(self) -> bool {
        matches!(self, ServerRole::All | ServerRole::Gateway)
    }

    fn consumes(self) -> bool {
        matches!(self, ServerRole::All | ServerRole::Worker)
    }

    fn queries(self) -> bool {
        matches!(self, ServerRole::All | ServerRole::Query)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    tenant: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    protocol: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    tenant: String,
    quota: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutageLabels {
    lookup: &'static str,
    answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ForwardLabels {
    region: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegionLabels {
    region: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn stage_histogram() -> Histogram {
    Histogram::new(STAGE_BUCKETS)
}

/// Buckets of `kiln_worker_record_age_seconds`: from 10 ms, through the
/// seconds an autoscaler and the fleet bench watch, to minutes of backlog.
const RECORD_AGE_BUCKETS: [f64; 16] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

fn query_histogram() -> Histogram {
    Histogram::new(QUERY_BUCKETS)
}

/// The metrics of one process: its registry and the handles its parts
/// update. Cloning is cheap and shares them.
#[derive(Debug, Clone)]
pub struct Metrics {
    role: ServerRole,
    registry: Arc<Registry>,
    /// The families with a `tenant` label, shown through `view`.
    tenants: Arc<Registry>,
    view: Arc<TenantView>,
    ingest: IngestMetrics,
    worker: WorkerMetrics,
    query: QueryMetrics,
    regions: RegionMetrics,
    auth: AuthMetrics,
}

impl Metrics {
    /// A registry with the families of `role`, and `kiln_build_info`.
    pub fn new(role: ServerRole) -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                role: role.name(),
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1; its labels say which version of Kiln this process runs, in which role \
             (all: kiln up, gateway, worker, query)",
            build,
        );
        let ingest = IngestMetrics::default();
        let worker = WorkerMetrics::default();
        let query = QueryMetrics::default();
        let mut tenants = Registry::with_prefix(PREFIX);
        if role.ingests() {
            ingest.register(&mut tenants);
        }
        if role.ingests() || role.queries() {
            tenants.register(
                "quota_rejections",
                "Requests refused (429) for a tenant's quota, by tenant and quota: \
                 ingest_samples_per_s, ingest_bytes_per_s, max_stored_bytes (ingest), \
                 max_concurrent_queries (queries)",
                ingest.quota.clone(),
            );
        }
        if role.consumes() {
            worker.register(&mut registry);
        }
        if role.queries() {
            query.register(&mut registry);
        }
        let regions = RegionMetrics::default();
        let auth = AuthMetrics::default();
        if role.ingests() || role.queries() {
            regions.register(&mut registry);
            auth.register(&mut registry);
        }
        Metrics {
            role,
            registry: Arc::new(registry),
            tenants: Arc::new(tenants),
            view: Arc::default(),
            ingest,
            worker,
            query,
            regions,
            auth,
        }
    }

    /// These metrics with per-tenant series shown to scrapers without the
    /// admin token as `names` says; `admin_token` (the server's) sees the
    /// names and keys their hashes. Call before the metrics are shared.
    pub fn showing_tenants(mut self, names: TenantNames, admin_token: Option<&str>) -> Metrics {
        self.view = Arc::new(TenantView::new(names, admin_token));
        self
    }

    /// The role the registry was made for.
    pub fn role(&self) -> ServerRole {
        self.role
    }

    /// The ingest endpoints' metrics.
    pub fn ingest(&self) -> &IngestMetrics {
        &self.ingest
    }

    /// The ingest pipeline's metrics.
    pub fn worker(&self) -> &WorkerMetrics {
        &self.worker
    }

    /// The query side's metrics.
    pub fn query(&self) -> &QueryMetrics {
        &self.query
    }

    /// Requests forwarded to other regions.
    pub fn regions(&self) -> &RegionMetrics {
        &self.regions
    }

    /// Credential checks made while the metadata store was down.
    pub fn auth(&self) -> &AuthMetrics {
        &self.auth
    }

    /// Counts a request of `tenant` refused for `quota`
    /// (`kiln_quota_rejections_total`).
    pub fn over_quota(&self, tenant: &str, quota: Quota) {
        self.ingest.over_quota(tenant, quota);
    }

    /// Reads what is read at scrape time (the consumer lag), then encodes
    /// every registered family as Prometheus text: per-tenant series as
    /// they are for the `operator`, else as [`TenantNames`] says.
    pub async fn scrape(&self, operator: bool) -> Result<String, std::fmt::Error> {
        if self.role.consumes() {
            self.worker.refresh_lag().await;
        }
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)?;
        let mut per_tenant = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut per_tenant, &self.tenants)?;
        text.push_str(&self.view.show(per_tenant, operator));
        Ok(text)
    }
}

/// `GET /metrics`: the process's metrics as Prometheus text. It needs no
/// credential (as `/healthz`): keep it off public load balancers, since
/// tenant names are label values.
pub(crate) async fn serve(metrics: web::Data<Metrics>, request: HttpRequest) -> HttpResponse {
    let authorization = request
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    let operator = metrics.view.is_operator(authorization);
    match metrics.scrape(operator).await {
        Ok(text) => HttpResponse::Ok().content_type(CONTENT_TYPE).body(text),
        Err(e) => HttpResponse::InternalServerError().body(format!("encoding metrics: {e}")),
    }
}

/// Middleware: times the query routes into `kiln_query_seconds`, whatever
/// the answer (errors and refusals too).
pub(crate) async fn time_queries(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let histogram = request
        .app_data::<web::Data<Metrics>>()
        .and_then(|m| m.query.route(request.path()).cloned());
    let Some(histogram) = histogram else {
        return next.call(request).await;
    };
    let started = Instant::now();
    let response = next.call(request).await;
    histogram.observe(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kiln_ingest_bus::{BusError, LagReader, PartitionLag};

    use super::*;

    /// Every family of `text`: name → type, from its `# TYPE` lines.
    fn families(text: &str) -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').expect("# TYPE NAME KIND");
                (name.to_owned(), kind.to_owned())
            })
            .collect()
    }

    /// The metrics text of `role` once every handle was used (a family
    /// with no series is left out of the text).
    async fn exercised(role: ServerRole) -> String {
        let metrics = Metrics::new(role);
        metrics.ingest().accepted("t", 1, 1);
        metrics.ingest().rejected("t", Rejection::BadInput);
        metrics.over_quota("t", Quota::IngestBytesPerS);
        metrics.worker().took_records(1);
        metrics
            .worker()
            .observe(Stage::Write, Duration::from_millis(3));
        metrics.worker().dead_lettered(DeadLetter::Envelope);
        metrics
            .worker()
            .watch_lag(Arc::new(FixedLag(Ok(vec![PartitionLag {
                partition: 0,
                committed: 1,
                end: 3,
            }]))));
        metrics.query().stacks.record(1, 1);
        metrics.scrape(true).await.unwrap()
    }

    async fn everything() -> String {
        exercised(ServerRole::All).await
    }

    #[derive(Debug)]
    struct FixedLag(Result<Vec<PartitionLag>, &'static str>);

    #[async_trait::async_trait]
    impl LagReader for FixedLag {
        fn topic(&self) -> &str {
            "t"
        }

        async fn lag(&self) -> Result<Vec<PartitionLag>, BusError> {
            self.0.clone().map_err(|_| BusError::Panicked)
        }
    }

    /// Guards Prometheus's naming conventions for every metric Kiln
    /// exports: snake_case under `kiln_`, counters ending `_total`, times
    /// in `_seconds` and sizes in `_bytes` (base units, as the unit
    /// suffix), latencies as histograms.
    #[actix_rt::test]
    async fn every_metric_name_follows_prometheus_conventions() {
        let text = everything().await;
        let families = families(&text);
        assert!(families.len() >= 14, "{families:?}");
        let name = regex_lite(r"kiln_[a-z0-9_]+");
        for (family, kind) in &families {
            assert!(name(family), "{family}: not ^kiln_[a-z0-9_]+$");
            assert!(!family.contains("__"), "{family}");
            let base = family.strip_suffix("_total").unwrap_or(family);
            match kind.as_str() {
                "counter" => assert!(family.ends_with("_total"), "counter {family}"),
                "gauge" | "histogram" => {
                    assert!(!family.ends_with("_total"), "{kind} {family}")
                }
                other => panic!("{family}: unexpected type {other}"),
            }
            if kind == "histogram" {
                assert!(
                    family.ends_with("_seconds"),
                    "histogram {family} is not a latency in seconds"
                );
            }
            for (word, unit) in [
                ("second", "_seconds"),
                ("byte", "_bytes"),
                ("millis", "_seconds"),
                ("_ms", "_seconds"),
                ("_us", "_seconds"),
                ("_ns", "_seconds"),
                ("kib", "_bytes"),
                ("mib", "_bytes"),
            ] {
                if base.contains(word) {
                    assert!(
                        base.ends_with(unit),
                        "{family}: a size or duration not in base units ({unit})"
                    );
                }
            }
            assert!(
                text.contains(&format!("# HELP {family} ")),
                "{family} has no HELP"
            );
        }
        for wanted in [
            ("kiln_build_info", "gauge"),
            ("kiln_ingest_samples_total", "counter"),
            ("kiln_ingest_bytes_total", "counter"),
            ("kiln_ingest_rejections_total", "counter"),
            ("kiln_quota_rejections_total", "counter"),
            ("kiln_dead_letters_total", "counter"),
            ("kiln_worker_consumer_lag_records", "gauge"),
            ("kiln_worker_stage_seconds", "histogram"),
            ("kiln_worker_record_age_seconds", "histogram"),
            ("kiln_query_seconds", "histogram"),
            ("kiln_query_cache_hits_total", "counter"),
            ("kiln_query_cache_misses_total", "counter"),
        ] {
            assert_eq!(
                families.get(wanted.0).map(String::as_str),
                Some(wanted.1),
                "{}",
                wanted.0
            );
        }
    }

    /// `^PATTERN$` for a pattern of literals and one `[a-z0-9_]+` class:
    /// enough for the names above without a regex crate.
    fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
        let prefix = pattern.strip_suffix("[a-z0-9_]+").unwrap().to_owned();
        move |s: &str| {
            s.strip_prefix(&prefix).is_some_and(|rest| {
                !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            })
        }
    }

    /// Guards the role split: a gateway exports no worker or query
    /// families, a worker no ingest ones, and every role its build.
    #[actix_rt::test]
    async fn roles_export_their_own_families() {
        let names = |role| async move {
            families(&exercised(role).await)
                .into_keys()
                .collect::<Vec<_>>()
        };
        let gateway = names(ServerRole::Gateway).await;
        assert!(gateway.contains(&"kiln_ingest_samples_total".to_owned()));
        assert!(!gateway.iter().any(|n| n.starts_with("kiln_worker_")));
        assert!(!gateway.contains(&"kiln_query_seconds".to_owned()));
        let worker = names(ServerRole::Worker).await;
        assert!(worker.contains(&"kiln_worker_consumer_lag_records".to_owned()));
        assert!(!worker.iter().any(|n| n.starts_with("kiln_ingest_")));
        let query = names(ServerRole::Query).await;
        assert!(query.contains(&"kiln_quota_rejections_total".to_owned()));
        assert!(query.contains(&"kiln_query_seconds".to_owned()));
        assert!(!query.iter().any(|n| n.starts_with("kiln_ingest_")));
        assert!(!query.iter().any(|n| n.starts_with("kiln_worker_")));
        assert!(!worker.contains(&"kiln_quota_rejections_total".to_owned()));
        for role in [gateway, worker, query] {
            assert!(role.contains(&"kiln_build_info".to_owned()));
        }
    }

    /// Guards the lag gauge's life: set per assigned partition at each
    /// scrape, removed when the partition goes to another worker or the
    /// bus cannot be read (counted), and the counters of a batch added
    /// whole.
    #[actix_rt::test]
    async fn lag_series_follow_the_assignment() {
        let metrics = Metrics::new(ServerRole::Worker);
        let lag = |p, end| PartitionLag {
            partition: p,
            committed: 2,
            end,
        };
        metrics
            .worker()
            .watch_lag(Arc::new(FixedLag(Ok(vec![lag(0, 10), lag(3, 2)]))));
        let text = metrics.scrape(true).await.unwrap();
        assert!(
            text.contains("kiln_worker_consumer_lag_records{topic=\"t\",partition=\"0\"} 8\n"),
            "{text}"
        );
        assert!(text.contains("kiln_worker_consumer_lag_records{topic=\"t\",partition=\"3\"} 0\n"));
        metrics
            .worker()
            .watch_lag(Arc::new(FixedLag(Ok(vec![lag(3, 5)]))));
        let text = metrics.scrape(true).await.unwrap();
        assert!(!text.contains("partition=\"0\""), "{text}");
        assert!(text.contains("kiln_worker_consumer_lag_records{topic=\"t\",partition=\"3\"} 3\n"));
        metrics.worker().watch_lag(Arc::new(FixedLag(Err("down"))));
        let text = metrics.scrape(true).await.unwrap();
        assert!(
            !text.contains("kiln_worker_consumer_lag_records{"),
            "{text}"
        );
        assert!(
            text.contains("kiln_worker_consumer_lag_errors_total 1\n"),
            "{text}"
        );
    }
}
