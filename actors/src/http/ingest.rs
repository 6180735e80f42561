//! Write endpoints: agent batches and imports of standard formats, and
//! what every ingest route shares (tenant admission, metered bodies,
//! sample quotas, publishing; `otlp.rs` uses them too).

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use kiln_formats::{Format, ImportOptions};
use kiln_model::{Batch, BatchError, LabelSet};
use kiln_storage::{ObjectKey, Scope, TenantLimits};
use serde::Serialize;
use tracing::warn;

use super::auth::extract::Ingester;
use super::body::{self, BodyLimit, IMPORT_BODY, INGEST_BODY};
use super::error::ApiError;
use super::params::label_params;
use super::quota::Metered;
use super::{AppState, IngestState};
use crate::envelope::EnvelopeHeader;
use crate::telemetry::{IngestMetrics, Protocol, Quota, Rejection};
use kiln_model::now_ns;

/// Largest payload an agent batch may decompress to at the gateway. Agent
/// batches hold a few seconds of samples, far below this; a worker still
/// reads up to [`kiln_model::MAX_BATCH_BYTES`] (imports are larger), but a
/// hostile body cannot make the gateway inflate that much per request.
pub const MAX_AGENT_BATCH_PAYLOAD: usize = 64 << 20;

/// Largest refused batch kept aside for a newer backend; larger ones are
/// only logged. With [`MAX_REFUSED_PER_HOUR`] this bounds what a tenant's
/// refused batches can store per gateway: 64 MiB an hour.
const MAX_REFUSED_BYTES: usize = 4 << 20;
/// Refused batches kept per tenant and hour on one gateway.
const MAX_REFUSED_PER_HOUR: u32 = 16;

/// Sampling frequency assumed for imports that do not carry one.
const DEFAULT_IMPORT_HZ: f64 = 100.0;
/// How long an import waits for its samples to become queryable.
const IMPORT_WAIT: Duration = Duration::from_secs(30);
/// Parameters of `/import` that are not labels.
const IMPORT_RESERVED: &[&str] = &["format", "frequency"];

/// What an import or ingest accepted.
#[derive(Debug, Serialize)]
pub(crate) struct Accepted {
    /// The format read.
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    /// Samples accepted (the sum of counts).
    samples: u64,
    /// Distinct stacks accepted.
    stacks: usize,
    /// Metric points accepted.
    metric_points: usize,
    /// Whether the samples were already queryable when this answer was
    /// sent (imports wait for that; agent batches do not).
    queryable: bool,
}

/// `POST /api/v1/import?format=collapsed|perf-script|pprof[&frequency=HZ][&LABEL=VALUE…]`
///
/// Parses the body, publishes it durably, and answers once the samples are
/// written (or after 30 s, with `queryable: false`: they are durable and will
/// be written).
pub(crate) async fn import(
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    params: web::Query<BTreeMap<String, String>>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let answer = import_for(&scope, &state, &ingest, &params, &request, payload).await;
    count_answer(state.metrics.ingest(), &scope, Protocol::Import, answer)
}

async fn import_for(
    scope: &Scope,
    state: &AppState,
    ingest: &IngestState,
    params: &BTreeMap<String, String>,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let metrics = state.metrics.ingest();
    let format: Format = params
        .get("format")
        .ok_or_else(|| {
            ApiError::bad_request(
                "missing query parameter format (one of collapsed, perf-script, pprof)",
            )
        })?
        .parse()
        .map_err(|e| ApiError::bad_request(format!("format: {e}")))?;
    let hz = match params.get("frequency") {
        None => DEFAULT_IMPORT_HZ,
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|hz| hz.is_finite() && *hz > 0.0 && *hz <= 1e9)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "frequency: {text:?} is not a sampling frequency in Hz (a positive number)"
                ))
            })?,
    };
    let labels: LabelSet = label_params(params, IMPORT_RESERVED)?.into_iter().collect();
    let options = ImportOptions {
        default_period_ns: (1e9 / hz).round().max(1.0) as u64,
        labels,
        ..ImportOptions::new(now_ns())
    };
    let limits = admit_tenant(state, scope).await?;
    let (body, sent) = ingest
        .read_metered(metrics, scope, &limits, request, payload, IMPORT_BODY)
        .await?;
    // Parsing is CPU-bound: keep it off the server's event loop.
    let imported = web::block(move || kiln_formats::import(format, &body, &options))
        .await
        .map_err(|e| ApiError::internal("import worker failed", e))?
        .map_err(|e| ApiError::bad_request(format!("{format}: {e}")))?;
    let samples = imported.batch.sample_count();
    ingest.admit_samples(metrics, scope, &limits, imported.batch.samples.len() as u64)?;
    let published = ingest
        .publish(scope, &imported.batch.source, &imported.batch.encode())
        .await?;
    metrics.accepted(scope.tenant(), samples, sent as u64);
    let queryable = ingest
        .progress
        .wait_committed(published.partition, published.offset, IMPORT_WAIT)
        .await;
    Ok(HttpResponse::Ok().json(Accepted {
        format: Some(format.to_string()),
        samples: imported.samples,
        stacks: imported.stacks,
        metric_points: 0,
        queryable,
    }))
}

/// `POST /api/v1/ingest` with an encoded [`kiln_model::Batch`] as the
/// body: what agents send. Answers once the batch is durable on the bus.
/// Refused here is what [`Batch::peek_within`] checks; a batch that then
/// fails the worker's full decode (ids against their content) is set aside
/// in its tenant's dead-letter area.
pub(crate) async fn ingest(
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let answer = ingest_for(&scope, &state, &ingest, &request, payload).await;
    count_answer(state.metrics.ingest(), &scope, Protocol::Agent, answer)
}

async fn ingest_for(
    scope: &Scope,
    state: &AppState,
    ingest: &IngestState,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let metrics = state.metrics.ingest();
    let limits = admit_tenant(state, scope).await?;
    let (body, sent) = ingest
        .read_metered(metrics, scope, &limits, request, payload, INGEST_BODY)
        .await?;
    // Every check a client must hear of at once, with the problem named
    // (header, size, archive, field and list limits), without building
    // the batch: the worker decodes it once, in full, and sets it aside
    // if its ids do not match their content.
    let bytes = body.clone();
    let peeked = web::block(move || Batch::peek_within(&bytes, MAX_AGENT_BATCH_PAYLOAD))
        .await
        .map_err(|e| ApiError::internal("decode worker failed", e))?;
    let batch = match peeked {
        Ok(batch) => batch,
        Err(e) => {
            if matches!(
                e,
                BatchError::UnsupportedVersion { .. } | BatchError::UnsupportedFlags { .. }
            ) {
                // A newer agent: keep its batch for a newer backend.
                ingest.keep_refused(state, scope, &body).await;
            }
            return Err(ApiError::bad_request(format!("batch refused: {e}")));
        }
    };
    ingest.admit_samples(metrics, scope, &limits, batch.sample_rows as u64)?;
    ingest.publish(scope, &batch.source, &body).await?;
    metrics.accepted(scope.tenant(), batch.samples, sent as u64);
    Ok(HttpResponse::Ok().json(Accepted {
        format: None,
        samples: batch.samples,
        stacks: batch.stacks,
        metric_points: batch.metric_points,
        queryable: false,
    }))
}

/// Counts an ingest request of `protocol` (`kiln_ingest_requests_total`)
/// and, refused, `scope`'s tenant's refusal by why
/// (`kiln_ingest_rejections_total`); passes the answer on.
pub(crate) fn count_answer<T>(
    metrics: &IngestMetrics,
    scope: &Scope,
    protocol: Protocol,
    answer: Result<T, ApiError>,
) -> Result<T, ApiError> {
    metrics.request(protocol, answer.is_ok());
    if let Err(e) = &answer {
        let why = match e {
            ApiError::BadRequest(_) => Rejection::BadInput,
            ApiError::PayloadTooLarge(_) => Rejection::TooLarge,
            ApiError::UnsupportedMediaType(_) => Rejection::BadInput,
            ApiError::TooManyRequests { .. } => Rejection::Quota,
            ApiError::Unavailable(_) => Rejection::Unavailable,
            ApiError::InsufficientStorage(_) => Rejection::DiskFull,
            _ => Rejection::Error,
        };
        metrics.rejected(scope.tenant(), why);
    }
    answer
}

/// The tenant's limits (read once per request: the quotas below all take
/// them from here), the server's defaults filled in; refuses a tenant over
/// its stored-bytes quota before its body is read.
pub(crate) async fn admit_tenant(
    state: &AppState,
    scope: &Scope,
) -> Result<TenantLimits, ApiError> {
    let limits = state
        .auth
        .tenant_limits(scope.tenant())
        .await?
        .or(state.defaults.limits());
    let admitted = state
        .stored
        .admit(scope.tenant(), limits.max_stored_bytes)
        .await;
    if let Err(ApiError::TooManyRequests { .. }) = &admitted {
        state
            .metrics
            .ingest()
            .over_quota(scope.tenant(), Quota::MaxStoredBytes);
    }
    admitted?;
    Ok(limits)
}

impl IngestState {
    /// Reads a request body under `limit`, metered against the tenant's
    /// bytes-per-second quota as sent (before decompression); with how
    /// many bytes were sent.
    pub(super) async fn read_metered(
        &self,
        metrics: &IngestMetrics,
        scope: &Scope,
        limits: &TenantLimits,
        request: &HttpRequest,
        payload: web::Payload,
        limit: BodyLimit,
    ) -> Result<(web::Bytes, usize), ApiError> {
        let sent = request
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // Refuse before reading when the length is declared; else meter
        // what was read.
        if let Some(sent) = sent {
            self.admit_bytes(metrics, scope, limits, sent)?;
        }
        let (body, sent_len) = body::read_counted(request, payload, limit).await?;
        if sent.is_none() {
            self.admit_bytes(metrics, scope, limits, body.len() as u64)?;
        }
        Ok((body, sent_len))
    }

    /// Admits `bytes` sent (before decompression) against the tenant's
    /// bytes-per-second quota.
    pub(crate) fn admit_bytes(
        &self,
        metrics: &IngestMetrics,
        scope: &Scope,
        limits: &TenantLimits,
        bytes: u64,
    ) -> Result<(), ApiError> {
        // `admit_tenant` filled in the defaults.
        let rate = limits.ingest_bytes_per_s.unwrap_or(u64::MAX);
        self.quota
            .admit(scope.tenant(), Metered::Bytes, rate, bytes)
            .inspect_err(|_| metrics.over_quota(scope.tenant(), Quota::IngestBytesPerS))
    }

    /// Admits `samples` sample rows against the tenant's samples-per-second
    /// quota. Rows, not counts: a row (a stack with its labels at one
    /// second) is what a sender costs to store and aggregate, while its
    /// count is a weight whose unit varies: CPU samples, but GPU
    /// nanoseconds or device-memory bytes in GPU batches, where one busy
    /// GPU's second is 10^9. Metering counts put a GPU host's tenant in
    /// 12 minutes of quota debt per GPU-second, refusing its CPU batches
    /// too.
    pub(crate) fn admit_samples(
        &self,
        metrics: &IngestMetrics,
        scope: &Scope,
        limits: &TenantLimits,
        samples: u64,
    ) -> Result<(), ApiError> {
        let rate = limits.ingest_samples_per_s.unwrap_or(u64::MAX);
        self.quota
            .admit(scope.tenant(), Metered::Samples, rate, samples)
            .inspect_err(|_| metrics.over_quota(scope.tenant(), Quota::IngestSamplesPerS))
    }

    /// Publishes an encoded batch for `scope`; durable on return.
    pub(crate) async fn publish(
        &self,
        scope: &Scope,
        source: &str,
        batch: &[u8],
    ) -> Result<kiln_ingest_bus::Published, ApiError> {
        let header = EnvelopeHeader {
            scope: scope.clone(),
            received_at_ns: now_ns(),
        };
        self.bus
            .publish(&header.bus_key(source), header.wrap(batch, &self.bus_key))
            .await
            .map_err(|e| {
                // The cause (a timeout, a broker's refusal), not just "could
                // not publish", goes to the log and to the caller.
                let cause = e.source.describe();
                warn!(error = %cause, bytes = e.payload.len(), "publishing to the ingest bus failed");
                if e.source.storage_full() {
                    ApiError::InsufficientStorage(format!(
                        "the ingest bus's disk is full; batches are taken again once there \
                         is room: {cause}"
                    ))
                } else {
                    ApiError::Unavailable(format!(
                        "the ingest bus cannot take batches now: {cause}"
                    ))
                }
            })
    }
}

/// How many conversions of other protocols' requests run at once: half
/// the cores (at least 2), so that a burst of large OTLP or Pyroscope
/// requests neither holds a few hundred MiB each all at once nor takes
/// every core from the agents' batches.
pub(crate) fn conversion_slots() -> usize {
    std::thread::available_parallelism().map_or(2, |n| (n.get() / 2).max(2))
}

impl IngestState {
    /// Runs `convert` (a request body to batches, and their encoding) on
    /// the blocking pool once a conversion slot is free: CPU-bound work
    /// kept off the event loop and bounded in number. `what` names it in
    /// an error.
    pub(crate) async fn convert<T: Send + 'static>(
        &self,
        what: &str,
        convert: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let _slot = self
            .conversions
            .acquire()
            .await
            .map_err(|e| ApiError::internal(format!("{what} conversion"), e))?;
        tokio::task::spawn_blocking(convert)
            .await
            .map_err(|e| ApiError::internal(format!("{what} conversion failed"), e))
    }

    /// Publishes a request's converted batches for `scope`, their rows
    /// admitted together first (a request is not half accepted for
    /// quota), and counts the request as accepted, `sent` bytes.
    pub(crate) async fn publish_converted(
        &self,
        metrics: &IngestMetrics,
        scope: &Scope,
        limits: &TenantLimits,
        converted: &Encoded,
        sent: u64,
    ) -> Result<(), ApiError> {
        self.admit_samples(metrics, scope, limits, converted.rows)?;
        for (source, bytes) in &converted.batches {
            // A failure after some batches went out is a 503: the sender
            // retries the whole request, and batches written again change
            // nothing (store writes are idempotent by key).
            self.publish(scope, source, bytes).await?;
        }
        metrics.accepted(scope.tenant(), converted.samples, sent);
        Ok(())
    }
}

/// A request's batches, encoded for the bus (on the blocking pool, with
/// the conversion), with what the quotas and metrics count of them.
#[derive(Debug)]
pub(crate) struct Encoded {
    /// Each batch's source and bytes, in order.
    batches: Vec<(String, Vec<u8>)>,
    /// Sample rows of all batches.
    rows: u64,
    /// Samples (the sum of counts).
    samples: u64,
}

impl Encoded {
    /// `batches` encoded, holding `samples` samples in all.
    pub(crate) fn of(batches: &[Batch], samples: u64) -> Self {
        Encoded {
            batches: batches
                .iter()
                .map(|b| (b.source.clone(), b.encode()))
                .collect(),
            rows: batches.iter().map(|b| b.samples.len() as u64).sum(),
            samples,
        }
    }
}

impl IngestState {
    /// Keeps a batch refused for its version (a newer agent's) under the
    /// tenant, for a newer backend to read; at most [`MAX_REFUSED_BYTES`]
    /// each and [`MAX_REFUSED_PER_HOUR`] per tenant, so refusals cannot
    /// fill the object store.
    async fn keep_refused(&self, state: &AppState, scope: &Scope, body: &[u8]) {
        let tenant = scope.tenant();
        if body.len() > MAX_REFUSED_BYTES {
            warn!(
                tenant,
                bytes = body.len(),
                "a refused batch is too large to keep"
            );
            return;
        }
        if !self.refused.take(tenant) {
            warn!(
                tenant,
                "refused batches of this tenant are not kept this hour (cap reached)"
            );
            return;
        }
        let name = format!(
            "tenants/{tenant}/refused/{}-{:016x}.batch",
            now_ns(),
            xxhash_rust::xxh3::xxh3_64(body)
        );
        let stored = match ObjectKey::new(&name) {
            Ok(key) => state
                .objects
                .put(&key, body.to_vec().into())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = stored {
            warn!(error = %e, key = name, "could not keep a refused batch");
        }
    }
}

/// How many refused batches each tenant has kept in the current hour.
#[derive(Debug, Default)]
pub struct RefusedKept {
    counts: std::sync::Mutex<(i64, std::collections::HashMap<String, u32>)>,
}

impl RefusedKept {
    /// Whether `tenant` may keep one more refused batch this hour (and
    /// counts it when so).
    fn take(&self, tenant: &str) -> bool {
        let hour = now_ns().div_euclid(kiln_model::NANOS_PER_HOUR);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.0 != hour {
            *counts = (hour, Default::default());
        }
        let kept = counts.1.entry(tenant.to_owned()).or_default();
        if *kept >= MAX_REFUSED_PER_HOUR {
            return false;
        }
        *kept += 1;
        true
    }
}
