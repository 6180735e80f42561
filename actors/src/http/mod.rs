//! Kiln's HTTP API (actix-web).
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/api/v1/import?format=collapsed\|perf-script\|pprof` | import a profile file |
//! | POST | `/api/v1/ingest` | an agent batch ([`kiln_model::Batch::encode`]) |
//! | GET | `/api/v1/flamegraph?from&to&format=collapsed\|json\|flamewire\|pprof\|speedscope` | flamegraph |
//! | GET | `/api/v1/top?from&to&limit` | top functions (self, total) |
//! | GET | `/api/v1/timeline?from&to&step` | CPU over time, in cores |
//! | GET | `/api/v1/labels?from&to` | label names and values |
//! | GET | `/api/v1/metrics?name&from&to&step` | one metric's series (labels, points averaged per step, ≤ 1000 per series) |
//! | GET | `/api/v1/metrics/names?from&to` | the metric names a range holds |
//! | HEAD | `/api/v1/symbols/{file_id}` | 200 when symbols exist (tenant or global), else 404 |
//! | PUT | `/api/v1/symbols/{file_id}` | upload an ELF or debug file; its symbols are stored |
//! | HEAD | `/api/v1/symbols/global/{file_id}` | 200 when the global store has symbols, else 404 |
//! | PUT | `/api/v1/symbols/global/{file_id}` | upload into the global store (distro crawl); needs the [`AdminToken`] |
//! | GET | `/healthz` | liveness |
//! | POST | `/internal/v1/scan` | query nodes only (cluster secret): a peer's partition scan |
//! | POST | `/internal/v1/symbols-stored` | query nodes only (cluster secret): a peer stored symbols |
//! | GET | `/internal/v1/scan-counts` | query nodes only (cluster secret): scans run, sent, served |
//! | GET | `/`, `/{file}` | the web UI (see [`set_ui_dir`]) |
//!
//! Responses are gzip- or zstd-coded as the client accepts; Flamewire goes
//! zstd-coded whenever the client takes zstd (`encoding`).
//!
//! Query parameters other than the reserved ones are label filters
//! (`process=nginx`). Times are RFC 3339, unix seconds, `now` or
//! `now-<duration>`.

mod admin;
mod assets;
mod encoding;
mod error;
mod index;
mod ingest;
mod internal;
mod metrics;
mod params;
mod query;
mod symbols;

use std::sync::Arc;

use actix::Addr;
use actix_web::web;
use kiln_ingest_bus::Bus;
use kiln_storage::{ObjectStore, Scope};

use crate::ingest::IngestProgress;
use crate::query::{ClusterSecret, QueryCoordinator};

pub use admin::{AdminToken, AdminTokenError};
pub use assets::{set_ui_dir, ui_dir};
pub use encoding::{FLAMEWIRE_CONTENT_TYPE, FLAMEWIRE_ZSTD_LEVEL};
pub use error::ApiError;
pub use metrics::{MAX_METRIC_POINTS_PER_SERIES, MAX_METRIC_RANGE};
pub use params::{now_ns, parse_time};

/// Largest request body accepted (imports of big captures).
pub const MAX_BODY_BYTES: usize = 512 * 1024 * 1024;

/// What every handler shares: the query side and the object store.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The query cluster (also told when symbols are uploaded).
    pub query: Addr<QueryCoordinator>,
    /// Symbol files, and batches kept aside.
    pub objects: Arc<dyn ObjectStore>,
    /// The tenant and project of every request, until tenancy lands (then
    /// it comes from the caller's credential).
    pub scope: Scope,
    /// What writes to the global symbol store must present; `None`: they
    /// are refused.
    pub admin: Option<AdminToken>,
}

/// What the write endpoints need besides [`AppState`]: only a process that
/// accepts batches (`kiln up`, `kiln gateway`) has it.
#[derive(Debug, Clone)]
pub struct IngestState {
    /// Where accepted batches go.
    pub bus: Arc<dyn Bus>,
    /// How far ingest has got, for imports to wait on.
    pub progress: IngestProgress,
}

/// Registers all of Kiln's routes: what `kiln up` serves.
pub fn configure(state: AppState, ingest: IngestState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        shared_routes(cfg, state);
        ingest_routes(cfg, ingest);
        query_routes(cfg);
    }
}

/// The routes of a gateway (`kiln gateway`): ingest, import and symbol
/// uploads, no queries.
pub fn configure_gateway(
    state: AppState,
    ingest: IngestState,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        shared_routes(cfg, state);
        ingest_routes(cfg, ingest);
    }
}

/// The routes of a query node (`kiln query`): queries, symbol uploads and
/// the index page, no ingest; with a cluster secret, also the internal
/// endpoints its peers call.
pub fn configure_query(
    state: AppState,
    cluster: Option<ClusterSecret>,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        shared_routes(cfg, state);
        if let Some(secret) = cluster {
            internal_routes(cfg, secret);
        }
        query_routes(cfg);
    }
}

fn internal_routes(cfg: &mut web::ServiceConfig, secret: ClusterSecret) {
    cfg.app_data(web::Data::new(secret))
        .route("/internal/v1/scan", web::post().to(internal::scan))
        .route(
            "/internal/v1/symbols-stored",
            web::post().to(internal::symbols_stored),
        )
        .route(
            "/internal/v1/scan-counts",
            web::get().to(internal::scan_counts),
        );
}

fn shared_routes(cfg: &mut web::ServiceConfig, state: AppState) {
    cfg.app_data(web::Data::new(state))
        .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
        .route(
            "/api/v1/symbols/global/{file_id}",
            web::head().to(symbols::exists_global),
        )
        .route(
            "/api/v1/symbols/global/{file_id}",
            web::put().to(symbols::upload_global),
        )
        .route("/api/v1/symbols/{file_id}", web::head().to(symbols::exists))
        .route("/api/v1/symbols/{file_id}", web::put().to(symbols::upload))
        .route("/healthz", web::get().to(|| async { "ok" }));
}

fn ingest_routes(cfg: &mut web::ServiceConfig, ingest: IngestState) {
    cfg.app_data(web::Data::new(ingest))
        .route("/api/v1/import", web::post().to(ingest::import))
        .route("/api/v1/ingest", web::post().to(ingest::ingest));
}

fn query_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/api/v1/flamegraph", web::get().to(query::flamegraph))
        .route("/api/v1/top", web::get().to(query::top))
        .route("/api/v1/timeline", web::get().to(query::timeline))
        .route("/api/v1/labels", web::get().to(query::labels))
        .route("/api/v1/metrics", web::get().to(metrics::series))
        .route("/api/v1/metrics/names", web::get().to(metrics::names))
        .route("/", web::get().to(index::page))
        .route("/{file}", web::get().to(assets::file));
}
