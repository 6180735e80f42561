//! Kiln's HTTP API (actix-web).
//!
//! Every `/api/` route needs a credential ([`auth`]): a tenant's API key
//! (`Authorization: Bearer kiln_…`; on the two Pyroscope routes also as
//! the password of HTTP basic auth), the UI's session cookie, or for the
//! operator's routes the admin token. The scope of every read and write is
//! the credential's; nothing takes a tenant from the request. The role
//! each route needs is in the last column.
//!
//! | method | path | what | role |
//! |---|---|---|---|
//! | POST | `/api/v1/import?format=collapsed\|perf-script\|pprof` | import a profile file | ingest |
//! | POST | `/api/v1/ingest` | an agent batch ([`kiln_model::Batch::encode`]) | ingest |
//! | POST | `/v1development/profiles` | OTLP/HTTP profiles, protobuf or OTLP/JSON ([`otlp`]): `ExportProfilesServiceResponse` with `partial_success`, errors as `google.rpc.Status`, in the request's encoding | ingest |
//! | POST | `/ingest?name=APP{k=v}&from&until&format&sampleRate&spyName&units&aggregationType` | Pyroscope's ingest API ([`pyroscope`]): pprof (multipart or not), folded stacks; 200 with no body | ingest |
//! | POST | `/push.v1.PusherService/Push` | Pyroscope's Connect push API ([`pyroscope`]): a `push.v1.PushRequest`, proto or JSON; errors in Connect's JSON | ingest |
//! | GET | `/api/v1/flamegraph?from&to&format=collapsed\|json\|flamewire\|pprof\|speedscope&lines=false\|true` | flamegraph: a node per function, or per line with `lines=true` | read |
//! | GET | `/api/v1/top?from&to&limit` | top functions (self, total) | read |
//! | GET | `/api/v1/compare?base_from&base_to&target_from&target_to&base.LABEL&target.LABEL&fdr&min_change&limit&format=json\|text` | functions whose share changed between two ranges or label values beyond sampling noise ([`compare`]) | read |
//! | GET, POST | `/api/v1/comparisons` | the project's saved comparisons; save one `{"name", "params"}` ([`comparisons`]) | read, admin |
//! | GET, DELETE | `/api/v1/comparisons/{name}` | one saved comparison; delete it | read, admin |
//! | GET | `/api/v1/comparisons/{name}/result?format=json\|text` | the saved comparison run now, as `/api/v1/compare` answers | read |
//! | GET | `/api/v1/comparisons/metrics` | every saved comparison run now, Prometheus text for the tenant's alerts | read |
//! | GET | `/api/v1/timeline?from&to&step` | CPU over time, in cores | read |
//! | GET | `/api/v1/labels?from&to` | label names and values | read |
//! | GET | `/api/v1/metrics?name&from&to&step` | one metric's series | read |
//! | GET | `/api/v1/metrics/names?from&to` | the metric names a range holds | read |
//! | GET | `/api/v1/gpu/kernels?from&to` | GPU kernels: launches, time, PC samples | read |
//! | GET | `/api/v1/gpu/instructions?kernel&from&to` | a kernel's SASS instructions and stall reasons | read |
//! | GET | `/api/v1/gpu/trace?from&to&kernel&step` | GPU time per kernel, a Perfetto (Chrome JSON) trace | read |
//! | POST | `/mcp` | the MCP server (Streamable HTTP, JSON answers): tools `top_functions`, `flamegraph`, `diff`, `gpu_kernels`, `labels` ([`mcp`]); GET and DELETE are 405 | read |
//! | HEAD | `/api/v1/symbols/{file_id}` | 200 when symbols exist (tenant or global), else 404 | ingest |
//! | PUT | `/api/v1/symbols/{file_id}` | upload an ELF or debug file; its symbols are stored | ingest |
//! | HEAD | `/api/v1/symbols/global/{file_id}` | 200 when the global store has symbols | ingest |
//! | PUT | `/api/v1/symbols/global/{file_id}` | upload into the global store (distro crawl) | admin token |
//! | GET | `/api/v1/symbols/global` | the global store's file ids (peer regions pull them, [`crate::global_symbols`]) | admin token |
//! | GET | `/api/v1/symbols/global/{file_id}` | one file's global symbols as stored (zstd ksym) | admin token |
//! | … | `/api/v1/admin/…`, `/api/v1/keys…`, `/api/v1/whoami` | tenants (and their home regions), keys, limits ([`tenants`]) | admin token / admin / any |
//! | GET, POST | `/login`, POST `/logout` | the UI's login ([`login`]) | none |
//! | GET | `/healthz` | liveness | none |
//! | GET | `/metrics` | Kiln's own metrics, Prometheus text ([`crate::telemetry`]) | none |
//! | POST | `/internal/v1/scan` | query nodes only (cluster secret): a peer's partition scan | secret |
//! | POST | `/internal/v1/symbols-stored` | query nodes only (cluster secret): a peer stored symbols | secret |
//! | GET | `/internal/v1/scan-counts` | query nodes only (cluster secret): scans run, sent, served | secret |
//! | GET | `/`, `/{file}` | the web UI (see [`set_ui_dir`]) | none |
//!
//! Bodies are read under a limit per route ([`body`]), decompressed under
//! the same limit; ingest is metered per tenant ([`quota`]).
//! Responses are gzip- or zstd-coded as the client accepts; Flamewire goes
//! zstd-coded whenever the client takes zstd (`encoding`).
//!
//! Query parameters other than the reserved ones are label filters
//! (`process=nginx`). Times are RFC 3339, unix seconds, `now` or
//! `now-<duration>`.

mod assets;
pub mod auth;
pub mod body;
mod compare;
mod comparisons;
mod encoding;
pub(crate) mod error;
mod gpu;
mod index;
pub mod ingest;
mod internal;
pub mod login;
mod mcp;
mod metrics;
pub mod otlp;
mod params;
pub mod pyroscope;
mod query;
pub mod quota;
pub mod region;
pub mod routes;
pub(crate) mod symbols;
pub mod tenants;

use std::sync::Arc;

use actix::Addr;
use actix_web::http::Method;
use actix_web::web;
use kiln_ingest_bus::Bus;
use kiln_storage::ObjectStore;

use crate::ingest::IngestProgress;
use crate::query::{ClusterSecret, QueryCoordinator};
use routes::Registrar;

pub use crate::admin_token::{AdminToken, AdminTokenError};
pub use assets::{set_ui_dir, ui_dir};
pub use auth::Auth;
pub use encoding::{FLAMEWIRE_CONTENT_TYPE, FLAMEWIRE_ZSTD_LEVEL};
pub use error::ApiError;
pub use metrics::{MAX_METRIC_POINTS_PER_SERIES, MAX_METRIC_RANGE};
pub use params::parse_time;
pub use quota::{IngestQuota, QuotaDefaults, STORED_BYTES_TTL, StoredBytes};
pub use routes::{Access, Route, RouteSet, access_of, route_table};

/// What every handler shares: the query side, the object store, and who
/// may do what.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The query cluster (also told when symbols are uploaded).
    pub query: Addr<QueryCoordinator>,
    /// Symbol files, and batches kept aside.
    pub objects: Arc<dyn ObjectStore>,
    /// Credentials: keys, sessions, the admin token, tenant limits.
    pub auth: Auth,
    /// The limits of tenants that have none set.
    pub defaults: QuotaDefaults,
    /// Each tenant's stored bytes (cached), for `max_stored_bytes`.
    pub stored: Arc<StoredBytes>,
    /// The retention job, where this process runs it (the query role and
    /// `kiln up`): `POST /api/v1/admin/retention` runs a pass now.
    pub retention: Option<crate::retention::Retention>,
    /// The rollup job, where this process runs it (the query role and
    /// `kiln up`): `POST /api/v1/admin/rollups` runs a pass now.
    pub rollups: Option<crate::rollup::Rollups>,
    /// This process's metrics (`GET /metrics`).
    pub metrics: crate::telemetry::Metrics,
    /// Its region and the others, in a deployment with regions: requests
    /// with other regions' keys go there ([`region`]).
    pub regions: Option<region::Regions>,
}

/// What the write endpoints need besides [`AppState`]: only a process that
/// accepts batches (`kiln up`, `kiln gateway`) has it.
#[derive(Debug, Clone)]
pub struct IngestState {
    /// Where accepted batches go.
    pub bus: Arc<dyn Bus>,
    /// How far ingest has got, for imports to wait on.
    pub progress: IngestProgress,
    /// Each tenant's ingest buckets on this process.
    pub quota: Arc<IngestQuota>,
    /// How many refused batches each tenant kept this hour.
    pub refused: Arc<ingest::RefusedKept>,
    /// What bus records are signed with, for the workers to verify.
    pub bus_key: crate::envelope::BusKey,
    /// Conversions of other protocols' requests (OTLP, Pyroscope) running
    /// at once: each may hold a few hundred MiB while it works.
    pub conversions: Arc<tokio::sync::Semaphore>,
}

impl IngestState {
    /// Ingest onto `bus`, records signed with `bus_key`, with fresh quota
    /// buckets.
    pub fn new(
        bus: Arc<dyn Bus>,
        progress: IngestProgress,
        bus_key: crate::envelope::BusKey,
    ) -> Self {
        IngestState {
            bus,
            progress,
            quota: Arc::default(),
            refused: Arc::default(),
            bus_key,
            conversions: Arc::new(tokio::sync::Semaphore::new(ingest::conversion_slots())),
        }
    }
}

/// Registers all of Kiln's routes: what `kiln up` serves.
pub fn configure(state: AppState, ingest: IngestState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        shared_data(cfg, state);
        cfg.app_data(web::Data::new(ingest));
        routes::serve(cfg, RouteSet::All);
    }
}

/// The routes of a gateway (`kiln gateway`): ingest, import and symbol
/// uploads, no queries.
pub fn configure_gateway(
    state: AppState,
    ingest: IngestState,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        shared_data(cfg, state);
        cfg.app_data(web::Data::new(ingest));
        routes::serve(cfg, RouteSet::Gateway);
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
        shared_data(cfg, state);
        let internal = cluster.is_some();
        if let Some(secret) = cluster {
            cfg.app_data(web::Data::new(secret));
        }
        routes::serve(cfg, RouteSet::Query { internal });
    }
}

fn shared_data(cfg: &mut web::ServiceConfig, state: AppState) {
    cfg.app_data(web::Data::new(state.auth.clone()))
        .app_data(web::Data::new(state.defaults))
        .app_data(web::Data::new(state));
}

fn internal_routes(r: &mut Registrar<'_>) {
    let secret = Access::ClusterSecret;
    r.route(Method::POST, "/internal/v1/scan", secret, internal::scan)
        .route(
            Method::POST,
            "/internal/v1/symbols-stored",
            secret,
            internal::symbols_stored,
        )
        .route(
            Method::GET,
            "/internal/v1/scan-counts",
            secret,
            internal::scan_counts,
        );
}

fn shared_routes(r: &mut Registrar<'_>) {
    use Method as M;
    r.route(M::GET, "/login", Access::Public, login::page)
        .route(M::POST, "/login", Access::Public, login::with_key)
        .route(M::POST, "/logout", Access::Public, login::logout)
        .api(M::GET, "/api/v1/whoami", tenants::whoami)
        .api(M::GET, "/api/v1/admin/tenants", tenants::list_tenants)
        .api(M::POST, "/api/v1/admin/tenants", tenants::create_tenant)
        .api(
            M::GET,
            "/api/v1/admin/tenants/{tenant}/region",
            tenants::tenant_region,
        )
        .api(
            M::POST,
            "/api/v1/admin/tenants/{tenant}/projects",
            tenants::create_project,
        )
        .api(
            M::GET,
            "/api/v1/admin/tenants/{tenant}/limits",
            tenants::get_limits,
        )
        .api(
            M::PUT,
            "/api/v1/admin/tenants/{tenant}/limits",
            tenants::set_limits,
        )
        .api(M::POST, "/api/v1/admin/retention", tenants::run_retention)
        .api(M::POST, "/api/v1/admin/rollups", tenants::run_rollups)
        .api(
            M::GET,
            "/api/v1/admin/tenants/{tenant}/keys",
            tenants::operator_list_keys,
        )
        .api(
            M::POST,
            "/api/v1/admin/tenants/{tenant}/keys",
            tenants::operator_create_key,
        )
        .api(
            M::DELETE,
            "/api/v1/admin/tenants/{tenant}/keys/{id}",
            tenants::operator_revoke_key,
        )
        .api(M::GET, "/api/v1/keys", tenants::list_keys)
        .api(M::POST, "/api/v1/keys", tenants::create_key)
        .api(M::DELETE, "/api/v1/keys/{id}", tenants::revoke_key)
        .api(M::GET, "/api/v1/symbols/global", symbols::list_global)
        .api(
            M::HEAD,
            "/api/v1/symbols/global/{file_id}",
            symbols::exists_global,
        )
        .api(
            M::GET,
            "/api/v1/symbols/global/{file_id}",
            symbols::download_global,
        )
        .api(
            M::PUT,
            "/api/v1/symbols/global/{file_id}",
            symbols::upload_global,
        )
        .api(M::HEAD, "/api/v1/symbols/{file_id}", symbols::exists)
        .api(M::PUT, "/api/v1/symbols/{file_id}", symbols::upload)
        .route(M::GET, "/healthz", Access::Public, || async { "ok" });
}

fn ingest_routes(r: &mut Registrar<'_>) {
    r.api(Method::POST, "/api/v1/import", ingest::import)
        .api(Method::POST, "/api/v1/ingest", ingest::ingest)
        .api(Method::POST, otlp::PATH, otlp::export)
        .api(Method::POST, pyroscope::INGEST_PATH, pyroscope::ingest)
        .api(Method::POST, pyroscope::PUSH_PATH, pyroscope::push);
}

fn query_routes(r: &mut Registrar<'_>) {
    use Method as M;
    r.api(M::GET, "/api/v1/flamegraph", query::flamegraph)
        .api(M::GET, "/api/v1/top", query::top)
        .api(M::GET, "/api/v1/compare", compare::compare_route)
        .api(M::GET, "/api/v1/comparisons", comparisons::list)
        .api(M::POST, "/api/v1/comparisons", comparisons::create)
        // Before `{name}`: actix matches in the order routes are added.
        .api(M::GET, "/api/v1/comparisons/metrics", comparisons::metrics)
        .api(M::GET, "/api/v1/comparisons/{name}", comparisons::get)
        .api(M::DELETE, "/api/v1/comparisons/{name}", comparisons::delete)
        .api(
            M::GET,
            "/api/v1/comparisons/{name}/result",
            comparisons::result,
        )
        .api(M::GET, "/api/v1/timeline", query::timeline)
        .api(M::GET, "/api/v1/labels", query::labels)
        .api(M::GET, "/api/v1/metrics", metrics::series)
        .api(M::GET, "/api/v1/metrics/names", metrics::names)
        .api(M::GET, "/api/v1/gpu/kernels", gpu::kernels)
        .api(M::GET, "/api/v1/gpu/instructions", gpu::instructions)
        .api(M::GET, "/api/v1/gpu/trace", gpu::trace)
        .api(M::POST, mcp::PATH, mcp::post)
        .api(M::GET, mcp::PATH, mcp::not_allowed)
        .api(M::DELETE, mcp::PATH, mcp::not_allowed)
        .route(M::GET, "/", Access::Public, index::page)
        .route(M::GET, "/{file}", Access::Public, assets::file);
}

/// The decoded path of `request`, as the router matches it (`/%61pi/`
/// reads `/api/`): what every decision about a request's path is made on.
pub(crate) fn routed_path(request: &actix_web::dev::ServiceRequest) -> &str {
    request.match_info().as_str()
}
