//! What the ingest endpoints count: accepted and refused batches, by
//! tenant, protocol and quota.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::{QuotaLabels, RejectionLabels, RequestLabels, TenantLabels};

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
    pub(super) quota: Family<QuotaLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
}

impl IngestMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
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
