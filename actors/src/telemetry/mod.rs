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
//! Per-tenant families live in a registry of their own, shown to a
//! scraper as the operator chooses ([`tenant_view`]).
//!
//! The workers' consumer lag is read when `/metrics` is scraped
//! ([`Metrics::scrape`]), from the bus: each consumer reports the
//! partitions it is assigned ([`kiln_ingest_bus::LagReader`]).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, web};
use kiln_ingest_bus::LagReader;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tracing::warn;

mod tenant_view;

pub use tenant_view::TenantNames;
use tenant_view::TenantView;

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

/// Credential checks made while the metadata store could not be asked
/// (`http/auth/`): a database restart is then visible on every node that
/// checks keys, rather than only as 503s in clients' logs.
#[derive(Debug, Clone, Default)]
pub struct AuthMetrics {
    outage: Family<OutageLabels, Counter>,
}

/// What a credential check looked up in the metadata store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthLookup {
    /// The grant of an API key.
    Key,
    /// A tenant's limits.
    Limits,
}

/// How a check was answered while the metadata store was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageAnswer {
    /// From what the store said within the stale-if-error window.
    LastKnown,
    /// Refused with a 503: nothing read recently to go on.
    Refused,
}

impl AuthMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "auth_metadata_unavailable",
            "Credential checks made while the metadata store could not be asked, by lookup (key: \
             an API key's grant; limits: a tenant's limits) and answer (last_known: taken as the \
             store answered within the last 10 minutes; refused: a 503, nothing recent to go on)",
            self.outage.clone(),
        );
    }

    /// Counts a `lookup` answered as `answer` while the store was down.
    pub fn metadata_unavailable(&self, lookup: AuthLookup, answer: OutageAnswer) {
        self.outage
            .get_or_create(&OutageLabels {
                lookup: match lookup {
                    AuthLookup::Key => "key",
                    AuthLookup::Limits => "limits",
                },
                answer: match answer {
                    OutageAnswer::LastKnown => "last_known",
                    OutageAnswer::Refused => "refused",
                },
            })
            .inc();
    }
}

/// Requests forwarded to their key's home region (`http/region.rs`).
#[derive(Debug, Clone)]
pub struct RegionMetrics {
    forwarded: Family<ForwardLabels, Counter>,
    seconds: HistogramFamily<RegionLabels>,
}

impl Default for RegionMetrics {
    fn default() -> Self {
        RegionMetrics {
            forwarded: Family::default(),
            seconds: HistogramFamily::<RegionLabels>::new_with_constructor(query_histogram),
        }
    }
}

/// How a forwarded request ended: the `outcome` label of
/// `kiln_region_forwarded_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// The home region answered (whatever its status).
    Answered,
    /// The home region could not be reached (503 here).
    Unreachable,
    /// Not forwarded: a region this one does not know, or a request
    /// forwarded already (421).
    Misdirected,
}

impl RegionMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "region_forwarded_requests",
            "Requests with another region's key sent to that region, by region and outcome: \
             answered, unreachable (503 here), misdirected (421: an unknown region, or \
             forwarded already)",
            self.forwarded.clone(),
        );
        registry.register_with_unit(
            "region_forward",
            "Time from taking a request with another region's key to handing back that \
             region's answer, body included, by region",
            Unit::Seconds,
            self.seconds.clone(),
        );
    }

    /// Counts a request for `region` that ended as `outcome`, and how long
    /// an answered one took.
    pub fn forwarded(&self, region: &str, outcome: Forwarded, took: Duration) {
        let label = match outcome {
            Forwarded::Answered => "answered",
            Forwarded::Unreachable => "unreachable",
            Forwarded::Misdirected => "misdirected",
        };
        self.forwarded
            .get_or_create(&ForwardLabels {
                region: region.to_owned(),
                outcome: label,
            })
            .inc();
        if outcome == Forwarded::Answered {
            self.seconds
                .get_or_create(&RegionLabels {
                    region: region.to_owned(),
                })
                .observe(took.as_secs_f64());
        }
    }
}

/// Why an ingest or import request was refused: the `reason` label of
/// `kiln_ingest_rejections_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The body is not a batch, a file of its format, or its encoding
    /// (400).
    BadInput,
    /// The body is over the route's limit, sent or decompressed (413).
    TooLarge,
    /// A tenant quota (429); `kiln_quota_rejections_total` says which.
    Quota,
    /// The bus could not take it (503; the client retries).
    Unavailable,
    /// The bus's disk is full (507; the client retries).
    DiskFull,
    /// Anything else (a failure on Kiln's side).
    Error,
}

impl Rejection {
    fn label(self) -> &'static str {
        match self {
            Rejection::BadInput => "bad_input",
            Rejection::TooLarge => "too_large",
            Rejection::Quota => "quota",
            Rejection::Unavailable => "unavailable",
            Rejection::DiskFull => "disk_full",
            Rejection::Error => "error",
        }
    }
}

/// How a request reached ingest: the `protocol` label of
/// `kiln_ingest_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `POST /api/v1/ingest`: Kiln's agents.
    Agent,
    /// `POST /api/v1/import`: `kiln import`, files.
    Import,
    /// `POST /v1development/profiles`.
    OtlpHttp,
    /// gRPC `ProfilesService/Export`.
    OtlpGrpc,
    /// `POST /ingest`: Pyroscope's older API (pyroscope-go).
    PyroscopeIngest,
    /// `POST /push.v1.PusherService/Push`: Pyroscope's Connect API.
    PyroscopePush,
}

impl Protocol {
    fn label(self) -> &'static str {
        match self {
            Protocol::Agent => "agent",
            Protocol::Import => "import",
            Protocol::OtlpHttp => "otlp_http",
            Protocol::OtlpGrpc => "otlp_grpc",
            Protocol::PyroscopeIngest => "pyroscope_ingest",
            Protocol::PyroscopePush => "pyroscope_push",
        }
    }
}

/// A tenant quota: the `quota` label of `kiln_quota_rejections_total`,
/// named as the tenant's limit is (`kiln tenant set-limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// Samples per second.
    IngestSamplesPerS,
    /// Request bytes per second, as sent.
    IngestBytesPerS,
    /// Bytes stored.
    MaxStoredBytes,
    /// Queries at once on one query node.
    MaxConcurrentQueries,
}

impl Quota {
    fn label(self) -> &'static str {
        match self {
            Quota::IngestSamplesPerS => "ingest_samples_per_s",
            Quota::IngestBytesPerS => "ingest_bytes_per_s",
            Quota::MaxStoredBytes => "max_stored_bytes",
            Quota::MaxConcurrentQueries => "max_concurrent_queries",
        }
    }
}

/// What the ingest endpoints count, per tenant.
#[derive(Debug, Clone, Default)]
pub struct IngestMetrics {
    samples: Family<TenantLabels, Counter>,
    bytes: Family<TenantLabels, Counter>,
    batches: Family<TenantLabels, Counter>,
    rejections: Family<RejectionLabels, Counter>,
    quota: Family<QuotaLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
}

impl IngestMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "ingest_requests",
            "Ingest requests with a valid credential answered, by protocol (agent, import, \
             otlp_http, otlp_grpc, pyroscope_ingest, pyroscope_push) and outcome (accepted, \
             refused); not by tenant",
            self.requests.clone(),
        );
        registry.register(
            "ingest_samples",
            "Samples accepted onto the bus (agent batches and imports), by tenant",
            self.samples.clone(),
        );
        registry.register_with_unit(
            "ingest",
            "Request body bytes accepted onto the bus (agent batches and imports), as sent: \
             before Content-Encoding is undone, by tenant",
            Unit::Bytes,
            self.bytes.clone(),
        );
        registry.register(
            "ingest_batches",
            "Agent batches and imports accepted onto the bus, by tenant",
            self.batches.clone(),
        );
        registry.register(
            "ingest_rejections",
            "Agent batches and imports refused, by tenant and reason: bad_input (400), \
             too_large (413), quota (429), unavailable (503: the bus), error (500)",
            self.rejections.clone(),
        );
    }

    /// Counts a batch or import of `tenant` accepted: `samples` samples,
    /// `bytes` request bytes as sent.
    pub fn accepted(&self, tenant: &str, samples: u64, bytes: u64) {
        let labels = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.samples.get_or_create(&labels).inc_by(samples);
        self.bytes.get_or_create(&labels).inc_by(bytes);
        self.batches.get_or_create(&labels).inc();
    }

    /// Counts a batch or import of `tenant` refused.
    pub fn rejected(&self, tenant: &str, why: Rejection) {
        self.rejections
            .get_or_create(&RejectionLabels {
                tenant: tenant.to_owned(),
                reason: why.label(),
            })
            .inc();
    }

    /// Counts an ingest request of `protocol`, accepted or refused.
    pub fn request(&self, protocol: Protocol, accepted: bool) {
        self.requests
            .get_or_create(&RequestLabels {
                protocol: protocol.label(),
                outcome: if accepted { "accepted" } else { "refused" },
            })
            .inc();
    }

    /// Counts a request of `tenant` refused for `quota`.
    pub fn over_quota(&self, tenant: &str, quota: Quota) {
        self.quota
            .get_or_create(&QuotaLabels {
                tenant: tenant.to_owned(),
                quota: quota.label(),
            })
            .inc();
    }
}

/// A stage of the ingest pipeline: the `stage` label of
/// `kiln_worker_stage_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Envelopes verified, batches decompressed and decoded (on the
    /// blocking pool, while the poll before is stored: this stage overlaps
    /// the others).
    Decode,
    /// Dictionary entries already written dropped.
    Dedup,
    /// Address frames symbolized where symbols are at hand.
    Symbolize,
    /// Written to the store and synced (retries included).
    Write,
    /// Offsets committed to the bus.
    Commit,
}

impl Stage {
    const ALL: [Stage; 5] = [
        Stage::Decode,
        Stage::Dedup,
        Stage::Symbolize,
        Stage::Write,
        Stage::Commit,
    ];

    fn label(self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::Dedup => "dedup",
            Stage::Symbolize => "symbolize",
            Stage::Write => "write",
            Stage::Commit => "commit",
        }
    }
}

/// Why a bus record was set aside: the `reason` label of
/// `kiln_dead_letters_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetter {
    /// Its envelope is missing, malformed or not signed with the bus key.
    Envelope,
    /// Its envelope verified but its batch does not decode.
    Batch,
    /// The store refused the batch for good.
    StoreRefused,
}

impl DeadLetter {
    fn label(self) -> &'static str {
        match self {
            DeadLetter::Envelope => "envelope",
            DeadLetter::Batch => "batch",
            DeadLetter::StoreRefused => "store_refused",
        }
    }
}

/// What the ingest pipeline counts, and where its consumer lag is read.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    stages: HistogramFamily<StageLabels>,
    /// The handle of each [`Stage`], in [`Stage::ALL`]'s order.
    stage_handles: Arc<[Histogram]>,
    records: Counter,
    /// Store writes that failed and were tried again.
    write_retries: Counter,
    /// Seconds from a gateway's accepting a batch to its commit here.
    record_age: Histogram,
    dead_letters: Family<ReasonLabels, Counter>,
    lag: Family<PartitionLabels, Gauge>,
    lag_errors: Counter,
    lag_reader: Arc<Mutex<Option<Arc<dyn LagReader>>>>,
    /// The partitions the last reading reported, whose series the next
    /// removes when they are no longer this worker's.
    lag_shown: Arc<Mutex<BTreeSet<PartitionLabels>>>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        let stages = HistogramFamily::<StageLabels>::new_with_constructor(stage_histogram);
        let stage_handles = Stage::ALL
            .iter()
            .map(|s| {
                stages
                    .get_or_create(&StageLabels { stage: s.label() })
                    .clone()
            })
            .collect();
        WorkerMetrics {
            stages,
            stage_handles,
            records: Counter::default(),
            write_retries: Counter::default(),
            record_age: Histogram::new(RECORD_AGE_BUCKETS),
            dead_letters: Family::default(),
            lag: Family::default(),
            lag_errors: Counter::default(),
            lag_reader: Arc::default(),
            lag_shown: Arc::default(),
        }
    }
}

impl WorkerMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "worker_stage",
            "Time each stage of the ingest pipeline took per poll of the bus (up to 256 records): \
             decode, dedup, symbolize, write (store writes and sync, retries included), commit",
            Unit::Seconds,
            self.stages.clone(),
        );
        registry.register(
            "worker_records",
            "Bus records the ingest pipeline took (stored or set aside)",
            self.records.clone(),
        );
        registry.register(
            "worker_write_retries",
            "Writes of a poll's batches to the profile store that failed and are tried again \
             (a store down, a full disk): nothing is committed or lost meanwhile, and the lag \
             grows",
            self.write_retries.clone(),
        );
        registry.register_with_unit(
            "worker_record_age",
            "Time from a gateway's accepting a batch onto the bus to its commit by a worker, \
             written and synced, so queryable (the gateway's clock against the worker's): the \
             publish-to-queryable lag",
            Unit::Seconds,
            self.record_age.clone(),
        );
        registry.register(
            "dead_letters",
            "Bus records set aside in the object store's dead-letter area, by reason: envelope \
             (not signed with the bus key), batch (does not decode), store_refused",
            self.dead_letters.clone(),
        );
        registry.register(
            "worker_consumer_lag_records",
            "Records published to the bus but not yet committed by the workers' consumer group, \
             per partition this worker is assigned (read from the bus at scrape time: Kafka's \
             high watermark against the group's committed offset; the embedded bus's end against \
             its group's commit). Summed over the workers, the group's lag",
            self.lag.clone(),
        );
        registry.register(
            "worker_consumer_lag_errors",
            "Scrapes at which the consumer lag could not be read from the bus (the lag series \
             are then absent until a reading succeeds)",
            self.lag_errors.clone(),
        );
    }

    /// Records how long `stage` took for one poll.
    pub fn observe(&self, stage: Stage, took: Duration) {
        let i = Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0);
        self.stage_handles[i].observe(took.as_secs_f64());
    }

    /// Records the age of a batch accepted at `received_at_ns` (the
    /// gateway's clock) that is committed now.
    pub fn committed_at_age(&self, received_at_ns: i64) {
        let age_ns = kiln_model::now_ns().saturating_sub(received_at_ns).max(0);
        self.record_age.observe(age_ns as f64 / 1e9);
    }

    /// Counts a failed store write that will be tried again.
    pub fn write_retried(&self) {
        self.write_retries.inc();
    }

    /// Counts `n` records taken from the bus.
    pub fn took_records(&self, n: usize) {
        self.records.inc_by(n as u64);
    }

    /// Counts a record set aside.
    pub fn dead_lettered(&self, why: DeadLetter) {
        self.dead_letters
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .inc();
    }

    /// Reads the consumer lag from `reader` at each scrape from now on.
    pub fn watch_lag(&self, reader: Arc<dyn LagReader>) {
        *self
            .lag_reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reader);
    }

    /// Sets the lag gauges from the bus; partitions no longer this
    /// worker's, and every partition when the bus cannot be read, lose
    /// their series (absent, rather than a stale number).
    async fn refresh_lag(&self) {
        let reader = self
            .lag_reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(reader) = reader else { return };
        let shown: BTreeSet<PartitionLabels> =
            match tokio::time::timeout(LAG_READ_TIMEOUT, reader.lag()).await {
                Ok(Ok(lags)) => lags
                    .into_iter()
                    .map(|l| {
                        let labels = PartitionLabels {
                            topic: reader.topic().to_owned(),
                            partition: l.partition,
                        };
                        let records = i64::try_from(l.records()).unwrap_or(i64::MAX);
                        self.lag.get_or_create(&labels).set(records);
                        labels
                    })
                    .collect(),
                Ok(Err(e)) => {
                    warn!(error = %e, "reading the consumer lag from the bus failed");
                    self.lag_errors.inc();
                    BTreeSet::new()
                }
                Err(_) => {
                    warn!(
                        timeout = ?LAG_READ_TIMEOUT,
                        "reading the consumer lag from the bus timed out"
                    );
                    self.lag_errors.inc();
                    BTreeSet::new()
                }
            };
        let mut before = self
            .lag_shown
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for gone in before.difference(&shown) {
            self.lag.remove(gone);
        }
        *before = shown;
    }
}

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
    fn register(&self, registry: &mut Registry) {
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
    fn route(&self, path: &str) -> Option<&Histogram> {
        let i = QUERY_ROUTES.iter().position(|r| *r == path)?;
        self.route_handles.get(i)
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

    use kiln_ingest_bus::{BusError, PartitionLag};

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
