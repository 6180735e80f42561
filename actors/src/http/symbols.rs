//! Symbol upload: `HEAD` and `PUT /api/v1/symbols/{file_id}` (the
//! caller's tenant), and `HEAD` and `PUT /api/v1/symbols/global/{file_id}`
//! (the global store of public distro libraries, which `kiln symbols
//! crawl` fills).
//!
//! The body of a `PUT` is an ELF file (or its separate debug file, which
//! carries the same build id). The server extracts its symbols itself and
//! stores them as zstd-compressed ksym, so that what is stored is always
//! well-formed, whatever the client sent.
//!
//! Global writes change what every tenant sees, so they need the admin
//! token ([`super::admin`]): 401 without it, 403 with a wrong one or on a
//! server that has none. Tenant uploads go under the caller's tenant only.

use std::path::Path;

use actix_web::{HttpRequest, HttpResponse, web};
use kiln_model::FileId;
use kiln_storage::ObjectKey;
use kiln_symbolizer_workers::{StoredError, build_stored, file_id};
use serde::Serialize;

use super::error::ApiError;
use super::{AppState, admin};
use crate::query::SymbolsStored;

/// What a `PUT` stored.
#[derive(Debug, Serialize)]
struct Stored {
    file_id: FileId,
    /// Address ranges in the symbols.
    ranges: usize,
    /// Bytes stored (compressed ksym).
    bytes: usize,
    /// Whether the file had DWARF (else function names only).
    dwarf: bool,
}

fn parse_id(text: &str) -> Result<FileId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "{text:?} is not a file id (32 hex digits: the build id's first 16 bytes, or Kiln's file hash)"
        ))
    })
}

fn tenant_key(state: &AppState, id: FileId) -> Result<ObjectKey, ApiError> {
    ObjectKey::tenant_symbols(state.scope.tenant(), id)
        .map_err(|e| ApiError::Internal(format!("symbol key: {e}")))
}

/// `HEAD /api/v1/symbols/{file_id}`: 200 when symbols for the file exist
/// for the caller's tenant or globally, else 404.
pub(crate) async fn exists(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    any_exists(
        &state,
        &[tenant_key(&state, id)?, ObjectKey::global_symbols(id)],
    )
    .await
}

/// `HEAD /api/v1/symbols/global/{file_id}`: 200 when the global store has
/// symbols for the file, else 404.
pub(crate) async fn exists_global(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    any_exists(&state, &[ObjectKey::global_symbols(id)]).await
}

async fn any_exists(state: &AppState, keys: &[ObjectKey]) -> Result<HttpResponse, ApiError> {
    for key in keys {
        let found = state
            .objects
            .exists(key)
            .await
            .map_err(|e| ApiError::Internal(format!("object store: {e}")))?;
        if found {
            return Ok(HttpResponse::Ok().finish());
        }
    }
    Ok(HttpResponse::NotFound().finish())
}

/// `PUT /api/v1/symbols/{file_id}` with the ELF as the body: extracts,
/// checks and stores its symbols for the caller's tenant. Idempotent: the
/// same file gives the same bytes.
pub(crate) async fn upload(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    let key = tenant_key(&state, id)?;
    let tenant = Some(state.scope.tenant().to_owned());
    store(&state, id, key, tenant, body).await
}

/// `PUT /api/v1/symbols/global/{file_id}`: as [`upload`], into the global
/// store that every tenant's queries fall back to; needs the admin token.
pub(crate) async fn upload_global(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    admin::require(
        state.admin.as_ref(),
        &request,
        "writing to the global symbol store",
    )?;
    let id = parse_id(&path)?;
    store(&state, id, ObjectKey::global_symbols(id), None, body).await
}

/// Builds the symbols of `body` (which must be file `id`), stores them
/// under `key` and tells the query side, for `tenant` (`None`: all).
async fn store(
    state: &AppState,
    id: FileId,
    key: ObjectKey,
    tenant: Option<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // Extraction and compression are CPU-bound: off the event loop.
    let built = web::block(move || build(id, &body))
        .await
        .map_err(|e| ApiError::Internal(format!("symbol worker failed: {e}")))??;
    let stored = Stored {
        file_id: id,
        ranges: built.ranges,
        bytes: built.compressed.len(),
        dwarf: built.dwarf,
    };
    state
        .objects
        .put(&key, built.compressed.into())
        .await
        .map_err(|e| ApiError::Internal(format!("object store: {e}")))?;
    tracing::info!(file_id = %id, key = key.as_str(), ranges = stored.ranges, bytes = stored.bytes, "symbols stored");
    // Queries show the new names from now on, on every query node that
    // heard of it before this answer.
    if let Err(e) = state
        .query
        .send(SymbolsStored {
            tenant,
            file_id: id,
        })
        .await
    {
        tracing::warn!(file_id = %id, error = %e, "queries were not told of new symbols");
    }
    Ok(HttpResponse::Ok().json(stored))
}

fn build(id: FileId, data: &[u8]) -> Result<kiln_symbolizer_workers::StoredSymbols, ApiError> {
    let actual = file_id(data);
    if actual != id {
        return Err(ApiError::bad_request(format!(
            "the body's file id is {actual}, not {id}: upload the file the id was computed from (or its debug file, same build id)"
        )));
    }
    // The server never looks for debug files of its own: what is uploaded
    // is all that goes into the symbols.
    build_stored(Path::new("upload"), data).map_err(|e| match e {
        StoredError::Extract(e) => ApiError::bad_request(format!("not usable as symbols: {e}")),
        e => ApiError::Internal(format!("building symbols: {e}")),
    })
}
