//! The endpoints query nodes serve each other (`kiln query --peers`), open
//! only to callers that present the cluster secret:
//!
//! - `POST /internal/v1/scan`: a partition scan in the query module's
//!   binary form; answers its partial counts in the same form.
//! - `POST /internal/v1/symbols-stored`: `{"tenant": …, "file_id": …}`;
//!   this node symbolizes that file's frames again from its next query on.
//! - `GET /internal/v1/scan-counts`: how many scans this node ran, sent
//!   and served ([`ScanCounts`](crate::query::ScanCounts), JSON): whether the scans are spread.
//!
//! The secret is checked before anything of the body is read; bodies are
//! then read through the bounded reader ([`super::body`]).
//!
//! A scan names its tenant and project itself (the calling node took them
//! from its caller's credential), which is why nothing without the secret
//! may call these.

use actix_web::{HttpRequest, HttpResponse, web};

use super::AppState;
use super::body::{self, INTERNAL_BODY};
use super::error::ApiError;
use crate::query::{
    CLUSTER_SECRET_HEADER, ClusterSecret, PeerSymbolsNotice, PeerSymbolsStored, QueryError,
    SCAN_CONTENT_TYPE, ScanCountsQuery, ServeScan, decode_scan, encode_partial,
};

/// Refuses callers without the cluster secret.
fn authorize(request: &HttpRequest, secret: &ClusterSecret) -> Result<(), ApiError> {
    let presented = request
        .headers()
        .get(CLUSTER_SECRET_HEADER)
        .ok_or_else(|| {
            ApiError::Forbidden(format!(
                "internal endpoint: the {CLUSTER_SECRET_HEADER} header is missing"
            ))
        })?;
    if !secret.verify(presented.as_bytes()) {
        return Err(ApiError::Forbidden(format!(
            "internal endpoint: wrong {CLUSTER_SECRET_HEADER}"
        )));
    }
    Ok(())
}

/// `POST /internal/v1/scan`
pub(crate) async fn scan(
    state: web::Data<AppState>,
    secret: web::Data<ClusterSecret>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&request, &secret)?;
    let body = body::read(&request, payload, INTERNAL_BODY).await?;
    let scan = web::block(move || decode_scan(&body))
        .await
        .map_err(|e| ApiError::internal("decode worker failed", e))?
        .map_err(|e| ApiError::bad_request(format!("scan refused: {e}")))?;
    let partial = state
        .query
        .send(ServeScan(scan))
        .await
        .map_err(QueryError::from)??;
    let body = web::block(move || encode_partial(&partial))
        .await
        .map_err(|e| ApiError::internal("encode worker failed", e))?;
    Ok(HttpResponse::Ok()
        .content_type(SCAN_CONTENT_TYPE)
        .body(body))
}

/// `POST /internal/v1/symbols-stored`
pub(crate) async fn symbols_stored(
    state: web::Data<AppState>,
    secret: web::Data<ClusterSecret>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    authorize(&request, &secret)?;
    let body = body::read(&request, payload, INTERNAL_BODY).await?;
    let notice: PeerSymbolsNotice = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "symbols notice: {e} (expected {{\"tenant\": null or NAME, \"file_id\": HEX}})"
        ))
    })?;
    state
        .query
        .send(PeerSymbolsStored(notice))
        .await
        .map_err(QueryError::from)?;
    Ok(HttpResponse::NoContent().finish())
}

/// `GET /internal/v1/scan-counts`: the node's [`ScanCounts`](crate::query::ScanCounts), as JSON.
pub(crate) async fn scan_counts(
    state: web::Data<AppState>,
    secret: web::Data<ClusterSecret>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    authorize(&request, &secret)?;
    let counts = state
        .query
        .send(ScanCountsQuery)
        .await
        .map_err(QueryError::from)?;
    Ok(HttpResponse::Ok().json(counts))
}
