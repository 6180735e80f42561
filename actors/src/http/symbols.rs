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
//! A tenant `PUT` may instead carry the symbols already extracted, as a
//! ksym file (`Content-Type: application/vnd.kiln.ksym`, which is
//! [`ksym::MEDIA_TYPE`]; usually `Content-Encoding: zstd`): what agents
//! send, so that other users' programs never leave their hosts. It is
//! untrusted input: decoded with the reader's own checks
//! ([`kiln_symbolizer_workers::Ksym::verify`]), refused with a 400 that names the fault, and
//! stored only then, under [`KSYM_BODY`]'s limit. The server cannot tell
//! that a ksym belongs to the file id it is sent for, so a tenant can
//! only name its own frames wrongly: the global store takes ELF files
//! only.
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
use kiln_symbolizer_workers::{
    StoredError, StoredSymbols, build_stored, file_id, ksym, stored_from_ksym,
};
use serde::Serialize;
use tokio::sync::Semaphore;

use super::AppState;
use super::auth::extract::{Authenticated, Ingester, Operator};
use super::body::{self, BodyLimit, KSYM_BODY, SYMBOLS_BODY};
use super::error::ApiError;
use crate::query::SymbolsStored;

/// Symbol uploads read and built at once in one process: each may hold
/// up to [`SYMBOLS_BODY`]'s limit in memory.
pub(super) const MAX_CONCURRENT_UPLOADS: usize = 2;

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

/// What a `PUT` body is, by its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upload {
    /// An ELF file or its debug file (any other type, or none).
    Elf,
    /// Symbols already extracted: a ksym file.
    Ksym,
}

impl Upload {
    fn of(request: &HttpRequest) -> Upload {
        let media = request
            .headers()
            .get(actix_web::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::trim);
        match media {
            Some(m) if m.eq_ignore_ascii_case(ksym::MEDIA_TYPE) => Upload::Ksym,
            _ => Upload::Elf,
        }
    }

    fn limit(self) -> BodyLimit {
        match self {
            Upload::Elf => SYMBOLS_BODY,
            Upload::Ksym => KSYM_BODY,
        }
    }
}

fn parse_id(text: &str) -> Result<FileId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "{text:?} is not a file id (32 hex digits: the build id's first 16 bytes, or Kiln's file hash)"
        ))
    })
}

fn tenant_key(scope: &Scope, id: FileId) -> Result<ObjectKey, ApiError> {
    ObjectKey::tenant_symbols(scope.tenant(), id).map_err(|e| ApiError::internal("symbol key", e))
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
/// Any credential may ask: the global store is every tenant's, and `kiln
/// symbols crawl` asks with the admin token.
pub(crate) async fn exists_global(
    _: Authenticated,
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
            .map_err(|e| ApiError::internal("object store", e))?;
        if found {
            return Ok(HttpResponse::Ok().finish());
        }
    }
    Ok(HttpResponse::NotFound().finish())
}

/// `GET /api/v1/symbols/global`: the file ids the global store has
/// symbols for, sorted (`{"file_ids": [...]}`): what a peer region pulls
/// from ([`crate::global_symbols`]). Needs the admin token.
pub(crate) async fn list_global(
    _: Operator,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let file_ids = crate::global_symbols::global_file_ids(&*state.objects)
        .await
        .map_err(|e| ApiError::internal("object store", e))?;
    Ok(HttpResponse::Ok().json(crate::global_symbols::GlobalSymbolList { file_ids }))
}

/// `GET /api/v1/symbols/global/{file_id}`: one file's global symbols as
/// stored (zstd-compressed ksym), for a peer region to check and store.
/// Needs the admin token.
pub(crate) async fn download_global(
    _: Operator,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&path)?;
    let stored = state
        .objects
        .get(&ObjectKey::global_symbols(id))
        .await
        .map_err(|e| ApiError::internal("object store", e))?;
    match stored {
        Some(bytes) => Ok(HttpResponse::Ok()
            .content_type("application/octet-stream")
            .body(bytes)),
        None => Err(ApiError::NotFound(format!(
            "the global store has no symbols for {id}"
        ))),
    }
}

/// `PUT /api/v1/symbols/{file_id}` with the ELF as the body: extracts,
/// checks and stores its symbols for the caller's tenant; or with a ksym
/// body (by its content type): checks and stores it. Idempotent: the
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
    // A symbol file is the tenant's data too: over its stored-bytes quota,
    // it adds none (before the body is read). Symbol files are not counted
    // in stored bytes (the object store keeps no per-tenant sum); the
    // upload limits bound each one.
    let limits = state.auth.tenant_limits(scope.tenant()).await?;
    state
        .stored
        .admit(
            scope.tenant(),
            limits.max_stored_bytes.or(state.defaults.max_stored_bytes),
        )
        .await?;
    let tenant = Some(scope.tenant().to_owned());
    let kind = Upload::of(&request);
    store(&state, id, key, tenant, kind, &request, payload).await
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
    if Upload::of(&request) == Upload::Ksym {
        return Err(ApiError::bad_request(format!(
            "the global store takes ELF files only (the server checks their file id); \
             {} bodies go to a tenant's /api/v1/symbols/{id}",
            ksym::MEDIA_TYPE
        )));
    }
    store(
        &state,
        id,
        ObjectKey::global_symbols(id),
        None,
        Upload::Elf,
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
    kind: Upload,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let _turn = UPLOADS
        .acquire()
        .await
        .map_err(|e| ApiError::internal("upload queue", e))?;
    let body = body::read(request, payload, kind.limit()).await?;
    // Extraction, checks and compression are CPU-bound: off the event
    // loop.
    let built = web::block(move || match kind {
        Upload::Elf => build(id, &body),
        Upload::Ksym => check_ksym(&body),
    })
    .await
    .map_err(|e| ApiError::internal("symbol worker failed", e))??;
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
        .map_err(|e| ApiError::internal("object store", e))?;
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

/// Checks an uploaded ksym whole and compresses it for the store
/// ([`stored_from_ksym`]); a 400 naming the fault otherwise.
pub(crate) fn check_ksym(data: &[u8]) -> Result<StoredSymbols, ApiError> {
    stored_from_ksym(data).map_err(|e| match e {
        StoredError::Ksym(e) => ApiError::bad_request(format!("not a valid ksym file: {e}")),
        e => ApiError::internal("compressing symbols", e),
    })
}

fn build(id: FileId, data: &[u8]) -> Result<StoredSymbols, ApiError> {
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
        e => ApiError::internal("building symbols", e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_symbolizer_workers::{Function, Ksym, Range, SymbolTable};

    fn table() -> SymbolTable {
        SymbolTable {
            functions: vec![Function {
                name: "main".into(),
                mangled: None,
            }],
            files: vec![],
            ranges: vec![Range {
                start: 0x1000,
                end: 0x1040,
                function: 0,
                lines: vec![],
                inlines: vec![],
            }],
        }
    }

    fn refusal(data: &[u8]) -> String {
        match check_ksym(data) {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_ksym_is_stored_compressed() {
        let bytes = ksym::encode(&table());
        let stored = check_ksym(&bytes).unwrap();
        assert_eq!(stored.ranges, 1);
        assert!(!stored.dwarf, "names only");
        let decoded = kiln_symbolizer_workers::decode_stored(&stored.compressed).unwrap();
        let mut frames = Vec::new();
        let symbols = decoded.file.ksym();
        symbols.lookup(0x1010, &mut frames);
        assert_eq!(frames[0].function().as_deref(), Some("main"));
    }

    /// An upload of an earlier ksym version is checked and stored in the
    /// current one: version 1 (made here) and version 5 (a fixture of the
    /// ksym tests), which the store then holds as `upgrade` writes them.
    #[test]
    fn earlier_ksym_versions_are_stored_upgraded() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../symbolizer-workers/tests/fixtures/v5/rust-like.ksym.zst");
        let v5 = zstd::decode_all(&std::fs::read(fixture).unwrap()[..]).unwrap();
        for earlier in [ksym::v1::encode(&table()), v5] {
            assert!(Ksym::open(&earlier).is_err(), "an earlier version");
            let stored = check_ksym(&earlier).unwrap();
            let decoded = kiln_symbolizer_workers::decode_stored(&stored.compressed).unwrap();
            assert!(decoded.upgraded.is_none(), "stored in the current version");
            assert_eq!(decoded.file.bytes(), &*ksym::upgrade(&earlier).unwrap());
            assert_eq!(decoded.file.ksym().len(), stored.ranges);
        }
    }

    /// Untrusted bytes: every fault is a 400 that names it.
    #[test]
    fn malformed_ksyms_are_refused_naming_the_fault() {
        assert!(refusal(b"").contains("too short"), "{}", refusal(b""));
        let elf = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(refusal(&elf[..4096]).contains("bad magic"));
        let good = ksym::encode(&table());
        let cut = refusal(&good[..good.len() / 2]);
        assert!(cut.starts_with("not a valid ksym file: "), "{cut}");
        // A range that points at a function that is not there: the first
        // range record (at the offset the header gives first) is start,
        // length, function, 4 bytes each.
        let mut bad = good.clone();
        let ranges = u32::from_le_bytes(bad[16..20].try_into().unwrap()) as usize;
        bad[ranges + 8..ranges + 12].copy_from_slice(&7u32.to_le_bytes());
        let message = refusal(&bad);
        assert!(message.contains("missing entry"), "{message}");
    }
}
