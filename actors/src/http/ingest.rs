//! Write endpoints: agent batches and imports of standard formats.

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use kiln_formats::{Format, ImportOptions};
use kiln_model::{Batch, BatchError, LabelSet};
use kiln_storage::ObjectKey;
use serde::Serialize;
use tracing::warn;

use super::error::ApiError;
use super::params::{label_params, now_ns};
use super::{AppState, IngestState};
use crate::envelope::EnvelopeHeader;

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
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    params: web::Query<BTreeMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
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
    let labels: LabelSet = label_params(&params, IMPORT_RESERVED)?
        .into_iter()
        .collect();
    let options = ImportOptions {
        default_period_ns: (1e9 / hz).round().max(1.0) as u64,
        labels,
        ..ImportOptions::new(now_ns())
    };
    // Parsing is CPU-bound: keep it off the server's event loop.
    let imported = web::block(move || kiln_formats::import(format, &body, &options))
        .await
        .map_err(|e| ApiError::Internal(format!("import worker failed: {e}")))?
        .map_err(|e| ApiError::bad_request(format!("{format}: {e}")))?;
    let published = ingest
        .publish(&state, &imported.batch.source, &imported.batch.encode())
        .await?;
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

/// `POST /api/v1/ingest` with an encoded [`Batch`] as the body: what agents
/// send. Answers once the batch is durable on the bus.
pub(crate) async fn ingest(
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let bytes = body.clone();
    let decoded = web::block(move || Batch::decode(&bytes))
        .await
        .map_err(|e| ApiError::Internal(format!("decode worker failed: {e}")))?;
    let batch = match decoded {
        Ok(batch) => batch,
        Err(e) => {
            if matches!(
                e,
                BatchError::UnsupportedVersion { .. } | BatchError::UnsupportedFlags { .. }
            ) {
                // A newer agent: keep its batch for a newer backend.
                state.keep_refused(&body).await;
            }
            return Err(ApiError::bad_request(format!("batch refused: {e}")));
        }
    };
    ingest.publish(&state, &batch.source, &body).await?;
    Ok(HttpResponse::Ok().json(Accepted {
        format: None,
        samples: batch.sample_count(),
        stacks: batch.stacks.len(),
        metric_points: batch.metrics.len(),
        queryable: false,
    }))
}

impl IngestState {
    /// Publishes an encoded batch for the caller's scope; durable on return.
    async fn publish(
        &self,
        state: &AppState,
        source: &str,
        batch: &[u8],
    ) -> Result<kiln_ingest_bus::Published, ApiError> {
        let header = EnvelopeHeader {
            scope: state.scope.clone(),
            received_at_ns: now_ns(),
        };
        self.bus
            .publish(&header.bus_key(source), header.wrap(batch))
            .await
            .map_err(|e| {
                // The cause (a timeout, a broker's refusal), not just "could
                // not publish", goes to the log and to the caller.
                warn!(error = %e.source, bytes = e.payload.len(), "publishing to the ingest bus failed");
                ApiError::Unavailable(format!(
                    "the ingest bus cannot take batches now: {}",
                    e.source
                ))
            })
    }
}

impl AppState {
    /// Keeps a batch the gateway refused for its version.
    async fn keep_refused(&self, body: &[u8]) {
        let name = format!(
            "tenants/{}/refused/{}-{:016x}.batch",
            self.scope.tenant(),
            now_ns(),
            xxhash_rust::xxh3::xxh3_64(body)
        );
        let stored = match ObjectKey::new(&name) {
            Ok(key) => self
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
