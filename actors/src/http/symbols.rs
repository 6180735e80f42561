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
//! token ([`super::auth::extract::Operator`]). Tenant uploads need a key
//! with the ingest role and go under that key's tenant only.
//!
//! An upload is held in memory while its symbols are built, so at most
//! [`MAX_CONCURRENT_UPLOADS`] are read at once per process; the others
//! wait their turn.

use std::path::Path;
use std::sync::LazyLock;

use actix_web::{HttpRequest, HttpResponse, web};
use kiln_model::FileId;
use kiln_storage::{ObjectKey, Scope};
use kiln_symbolizer_workers::{StoredError, build_stored, file_id};
use serde::Serialize;
use tokio::sync::Semaphore;

use super::AppState;
use super::auth::extract::{Ingester, Operator};
use super::body::{self, SYMBOLS_BODY};
use super::error::ApiError;
use crate::query::SymbolsStored;

/// Symbol uploads read and built at once in one process: each may hold
/// up to [`SYMBOLS_BODY`]'s limit in memory.
pub const MAX_CONCURRENT_UPLOADS: usize = 2;

static UPLOADS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(MAX_CONCURRENT_UPLOADS));

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

fn tenant_key(scope: &Scope, id: FileId) -> Result<ObjectKey, ApiError> {
    ObjectKey::tenant_symbols(scope.tenant(), id)
        .map_err(|e| ApiError::Internal(format!("symbol key: {e}")))
}

/// `HEAD /api/v1/symbols/{file_id}`: 200 when symbols for the file exist
/// for the caller's tenant or globally, else 404.
pub(crate) async fn exists(
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    any_exists(
        &state,
        &[tenant_key(&scope, id)?, ObjectKey::global_symbols(id)],
    )
    .await
}

/// `HEAD /api/v1/symbols/global/{file_id}`: 200 when the global store has
/// symbols for the file, else 404.
///
/// Any credential may ask (the middleware checks there is one): the global
/// store is every tenant's, and `kiln symbols crawl` asks with the admin
/// token.
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
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    path: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    let key = tenant_key(&scope, id)?;
    let tenant = Some(scope.tenant().to_owned());
    store(&state, id, key, tenant, &request, payload).await
}

/// `PUT /api/v1/symbols/global/{file_id}`: as [`upload`], into the global
/// store that every tenant's queries fall back to; needs the admin token.
pub(crate) async fn upload_global(
    _: Operator,
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    store(
        &state,
        id,
        ObjectKey::global_symbols(id),
        None,
        &request,
        payload,
    )
    .await
}

/// Builds the symbols of `body` (which must be file `id`), stores them
/// under `key` and tells the query side, for `tenant` (`None`: all).
async fn store(
    state: &AppState,
    id: FileId,
    key: ObjectKey,
    tenant: Option<String>,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let _turn = UPLOADS
        .acquire()
        .await
        .map_err(|e| ApiError::Internal(format!("upload queue: {e}")))?;
    let body = body::read(request, payload, SYMBOLS_BODY).await?;
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
