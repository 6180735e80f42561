//! Symbol upload: `HEAD` and `PUT /api/v1/symbols/{file_id}`.
//!
//! The body of a `PUT` is an ELF file (or its separate debug file, which
//! carries the same build id). The server extracts its symbols itself and
//! stores them as zstd-compressed ksym under the caller's tenant, so that
//! what is stored is always well-formed, whatever the client sent.

use std::path::Path;

use actix_web::{HttpResponse, web};
use kiln_model::FileId;
use kiln_storage::ObjectKey;
use kiln_symbolizer_workers::{ExtractOptions, Ksym, extract_bytes, file_id, ksym};
use serde::Serialize;

use super::AppState;
use super::error::ApiError;
use crate::query::SymbolsStored;

/// zstd level of stored ksym files: written once, read often.
const ZSTD_LEVEL: i32 = 9;

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
    for key in [tenant_key(&state, id)?, ObjectKey::global_symbols(id)] {
        let found = state
            .objects
            .exists(&key)
            .await
            .map_err(|e| ApiError::Internal(format!("object store: {e}")))?;
        if found {
            return Ok(HttpResponse::Ok().finish());
        }
    }
    Ok(HttpResponse::NotFound().finish())
}

/// `PUT /api/v1/symbols/{file_id}` with the ELF as the body: extracts,
/// checks and stores its symbols. Idempotent: the same file gives the same
/// bytes.
pub(crate) async fn upload(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    let key = tenant_key(&state, id)?;
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
    tracing::info!(file_id = %id, ranges = stored.ranges, bytes = stored.bytes, "symbols stored");
    // Queries show the new names from now on.
    state.query.do_send(SymbolsStored {
        tenant: state.scope.tenant().to_owned(),
        file_id: id,
    });
    Ok(HttpResponse::Ok().json(stored))
}

struct Built {
    compressed: Vec<u8>,
    ranges: usize,
    dwarf: bool,
}

fn build(id: FileId, data: &[u8]) -> Result<Built, ApiError> {
    let actual = file_id(data);
    if actual != id {
        return Err(ApiError::bad_request(format!(
            "the body's file id is {actual}, not {id}: upload the file the id was computed from (or its debug file, same build id)"
        )));
    }
    // The server never looks for debug files of its own: what a tenant
    // uploads is all that goes into its symbols.
    let options = ExtractOptions {
        no_debug_file: true,
        ..ExtractOptions::default()
    };
    let extracted = extract_bytes(Path::new("upload"), data, &options)
        .map_err(|e| ApiError::bad_request(format!("not usable as symbols: {e}")))?;
    let bytes = ksym::encode(&extracted.table);
    let ranges = Ksym::open(&bytes)
        .and_then(|k| k.verify().map(|()| k.len()))
        .map_err(|e| ApiError::Internal(format!("the ksym written does not verify: {e}")))?;
    let compressed = zstd::encode_all(&bytes[..], ZSTD_LEVEL)
        .map_err(|e| ApiError::Internal(format!("compressing symbols: {e}")))?;
    Ok(Built {
        compressed,
        ranges,
        dwarf: extracted.dwarf_bytes > 0,
    })
}
