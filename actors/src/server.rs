//! The embedded server: bus, stores, ingest pipeline, query cluster and
//! HTTP API in one process, on local disk.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use actix_web::middleware::{Compress, Condition, Logger, from_fn};
use actix_web::{App, HttpServer};
use kiln_ingest_bus::{BusError, EmbeddedBus};
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, KeyHash, LocalObjectStore, MetadataStore,
    ProfileStore, Roles, Scope, SealedStore, StoreError,
};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use crate::envelope::{BusKey, BusKeyError, SecretFileError, load_or_create_secret_file};
use crate::global_symbols::GlobalSymbolSync;
use crate::http::region::Regions;
use crate::http::{
    self, AdminToken, AdminTokenError, AppState, Auth, IngestState, QuotaDefaults, StoredBytes,
};
use crate::ingest;
use crate::otlp_grpc::OtlpGrpc;
use crate::query::{ClusterSecret, QueryCoordinator, QueryOptions, SetQueryOptions};
use crate::telemetry::{self, Metrics, ServerRole, TenantNames};

/// The tenant `kiln up` makes for its own use.
pub const DEFAULT_TENANT: &str = "default";
/// The project `kiln up` makes for its own use.
pub const DEFAULT_PROJECT: &str = "default";
/// The file in the data directory that keeps the admin token `kiln up`
/// made, when it was given none.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";
/// The file in the data directory that keeps the key `kiln up`'s gateway
/// signs bus records with and its worker verifies them with.
pub const BUS_KEY_FILE: &str = "bus-key";
/// The file in the data directory that keeps `kiln up`'s own API key (on
/// the default tenant and project, every role): its agent sends with it,
/// and the CLI on the same machine finds it there.
pub const API_KEY_FILE: &str = "api-key";
/// The file in the data directory holding tenants, projects and keys.
pub const METADATA_FILE: &str = "metadata.json";
/// How long a stopping server waits for requests in flight.
const SHUTDOWN_TIMEOUT_S: u64 = 5;

/// How to run the embedded server.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Where the bus log, the profile store and the objects live.
    pub data_dir: PathBuf,
    /// Address to serve HTTP on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Partitions of the embedded bus.
    pub bus_partitions: u32,
    /// Aggregator actors of the query cluster.
    pub aggregators: usize,
    /// HTTP worker threads.
    pub http_workers: usize,
    /// How frames are symbolized (cache size, debuginfod servers).
    pub symbolizer: SymbolizerConfig,
    /// The operator's token (tenants, limits, global symbols); `None`:
    /// the one kept in [`ADMIN_TOKEN_FILE`] under the data directory (made
    /// on first start).
    pub admin_token: Option<AdminToken>,
    /// Limits of tenants that have none set.
    pub quota: QuotaDefaults,
    /// How queries are admitted (longest span, wait for a slot).
    pub query: QueryOptions,
    /// Its region and the others, in a deployment with regions.
    pub regions: Option<Regions>,
    /// How often the rollup job runs (as [`HttpOptions::rollup_every`](crate::roles::HttpOptions)).
    pub rollup_every: Option<std::time::Duration>,
    /// How often, with peer regions, the global symbols they have are
    /// pulled ([`crate::global_symbols`]).
    pub global_symbols_every: std::time::Duration,
    /// What `/metrics` shows of per-tenant series to scrapers without the
    /// admin token.
    pub metrics_tenants: TenantNames,
    /// Where to serve OTLP profiles over gRPC ([`crate::otlp_grpc`]);
    /// `None`: nowhere.
    pub otlp_grpc_listen: Option<SocketAddr>,
    /// Whether a gRPC address that cannot be bound stops the start
    /// (`false`: a warning, and no gRPC; for a default address that
    /// another collector may hold).
    pub otlp_grpc_required: bool,
}

impl EmbeddedOptions {
    /// Defaults sized for this machine, serving on `listen`.
    pub fn new(data_dir: PathBuf, listen: SocketAddr) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            data_dir,
            listen,
            bus_partitions: 4,
            aggregators: cores,
            http_workers: cores,
            symbolizer: SymbolizerConfig::from_env(),
            admin_token: None,
            quota: QuotaDefaults::default(),
            query: QueryOptions::default(),
            regions: None,
            rollup_every: Some(crate::rollup::ROLLUP_INTERVAL),
            global_symbols_every: crate::global_symbols::GLOBAL_SYMBOLS_INTERVAL,
            metrics_tenants: TenantNames::default(),
            otlp_grpc_listen: None,
            otlp_grpc_required: true,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bus could not be opened.
    #[error("cannot open the ingest bus: {0}")]
    Bus(#[from] BusError),
    /// A store could not be opened.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// The query node's peer set is invalid.
    #[error("cannot join the query peers: {0}")]
    Peers(#[from] crate::query::PeerConfigError),
    /// The admin token could not be read or made.
    #[error(transparent)]
    AdminToken(#[from] AdminTokenError),
    /// The bus key could not be read or made.
    #[error(transparent)]
    BusKey(#[from] BusKeyError),
    /// The local API key file could not be read or written.
    #[error("api key file {path}: {reason}")]
    ApiKeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The HTTP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A started server.
#[allow(missing_debug_implementations, reason = "actix's Server is not Debug")]
pub struct Running {
    /// Where it serves HTTP.
    pub local_addr: SocketAddr,
    /// Resolves when the server stops (on SIGINT/SIGTERM).
    pub server: actix_web::dev::Server,
    /// `/login?code=…`: a one-time link that logs a browser in to the UI
    /// (`kiln up` only).
    pub login_path: Option<String>,
    /// Where a query node with peers serves them (`/internal/` only).
    pub peer_addr: Option<SocketAddr>,
    /// The OTLP gRPC listener, where this process serves one.
    pub otlp_grpc: Option<OtlpGrpc>,
}

impl Running {
    /// Serves OTLP profiles over gRPC on `listen` beside this process's
    /// HTTP routes (`state`, `ingest`). A `listen` that cannot be bound is
    /// an error when `required`, else a warning and no gRPC.
    pub(crate) fn serve_otlp_grpc(
        &mut self,
        listen: SocketAddr,
        required: bool,
        state: AppState,
        ingest: IngestState,
    ) -> Result<(), ServerError> {
        match crate::otlp_grpc::serve(listen, state, ingest) {
            Ok(grpc) => self.otlp_grpc = Some(grpc),
            Err(source) if required => {
                return Err(ServerError::Listen {
                    addr: listen,
                    source,
                });
            }
            Err(e) => tracing::warn!(
                %listen,
                error = %e,
                "not serving OTLP profiles over gRPC: the address is taken (another collector?); \
                 choose one with --otlp-grpc-listen"
            ),
        }
        Ok(())
    }
}

/// Opens everything under `options.data_dir` and starts serving. Must run
/// inside an actix system (`actix_rt::System`).
///
/// On first start it makes the default tenant and project, the operator's
/// admin token ([`ADMIN_TOKEN_FILE`]) and its own API key
/// ([`API_KEY_FILE`]), all kept in the data directory for the next start.
pub async fn start_embedded(options: EmbeddedOptions) -> Result<Running, ServerError> {
    let dir = &options.data_dir;
    std::fs::create_dir_all(dir).map_err(|source| ServerError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let bus = Arc::new(EmbeddedBus::open(&dir.join("bus"), options.bus_partitions)?);
    let objects = Arc::new(LocalObjectStore::open(&dir.join("objects"))?);
    // Settled hours are sealed into segments beside the symbols
    // (`kiln_storage::SealedStore`).
    let sealed = Arc::new(SealedStore::new(
        Arc::new(EmbeddedProfileStore::open(&dir.join("profiles"))?),
        objects.clone(),
    ));
    let store: Arc<dyn ProfileStore> = sealed.clone();
    let metadata: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedMetadataStore::open(&dir.join(METADATA_FILE))?);

    let admin = match options.admin_token {
        Some(token) => token,
        None => AdminToken::load_or_create(&dir.join(ADMIN_TOKEN_FILE))?,
    };
    let bus_key = BusKey::load_or_create(&dir.join(BUS_KEY_FILE))?;
    let local_key = local_api_key(
        &*metadata,
        &dir.join(API_KEY_FILE),
        options.regions.as_ref(),
    )
    .await?;

    // Every role in one process: one registry for all of them.
    let metrics = Metrics::new(ServerRole::All)
        .showing_tenants(options.metrics_tenants, Some(admin.expose()));
    // One symbolizer for ingest and queries: an upload tells it at once,
    // so frames ingested right after it are written symbolized.
    let symbolizer = Symbolizer::spawn(objects.clone(), options.symbolizer.clone());
    let progress = ingest::start(
        bus.clone(),
        store.clone(),
        objects.clone(),
        symbolizer.clone(),
        bus_key.clone(),
        metrics.worker().clone(),
    )
    .await?;
    let query = QueryCoordinator::start_with_symbolizer(
        store.clone(),
        symbolizer,
        options.aggregators,
        metrics.query(),
    );
    query.do_send(SetQueryOptions(options.query));
    // `kiln up` is every role, so it runs the query role's retention job.
    let retention = crate::retention::Retention::new(
        store.clone(),
        metadata.clone(),
        options.quota.retention_days,
    );
    let rollups = crate::rollup::Rollups::new(store.clone(), metadata.clone()).sealing(sealed);
    let global_symbols = options.regions.clone().map(|regions| {
        GlobalSymbolSync::new(objects.clone(), regions, admin.clone(), query.clone())
    });
    let auth = Auth::new(metadata, Some(admin), metrics.auth().clone());
    let login_path = format!("/login?code={}", auth.sessions().login_code(local_key));
    let state = AppState {
        query,
        objects,
        auth,
        defaults: options.quota,
        stored: Arc::new(StoredBytes::new(store)),
        retention: Some(retention.clone()),
        rollups: Some(rollups.clone()),
        metrics: metrics.clone(),
        regions: options.regions,
    };
    let ingest = IngestState::new(bus, progress, bus_key);
    let mut running = serve(
        Routes::All(state.clone(), ingest.clone()),
        options.listen,
        options.http_workers,
        metrics,
    )?;
    if let Some(listen) = options.otlp_grpc_listen {
        running.serve_otlp_grpc(listen, options.otlp_grpc_required, state, ingest)?;
    }
    retention.spawn();
    if let Some(every) = options.rollup_every {
        rollups.spawn(every);
    }
    if let Some(sync) = global_symbols {
        sync.spawn(options.global_symbols_every);
    }
    running.login_path = Some(login_path);
    Ok(running)
}

/// The scope `kiln up` makes for itself.
pub(crate) fn default_scope() -> Result<Scope, StoreError> {
    Scope::new(DEFAULT_TENANT, DEFAULT_PROJECT)
}

/// `kiln up`'s own key: the one in `path` when it still verifies, else a
/// new one (every role, on the default tenant and project, made first when
/// missing) written there, readable by its owner only, tagged with the
/// region where there are regions. Returns its hash.
async fn local_api_key(
    metadata: &dyn MetadataStore,
    path: &std::path::Path,
    regions: Option<&Regions>,
) -> Result<KeyHash, ServerError> {
    let file_error = |reason: String| ServerError::ApiKeyFile {
        path: path.to_owned(),
        reason,
    };
    let here = regions.map(Regions::here);
    if let Ok(text) = std::fs::read_to_string(path)
        && kiln_storage::key_region(text.trim()) == here
        && metadata.verify_api_key(text.trim()).await?.is_some()
    {
        return KeyHash::of_key(text.trim()).ok_or_else(|| file_error("not a key".into()));
    }
    // Missing, revoked, or from another data directory: make a new one.
    let scope = default_scope()?;
    match metadata.create_tenant(scope.tenant()).await {
        Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    match metadata.create_project(&scope).await {
        Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let roles = Roles::of(&kiln_storage::Role::ALL);
    let new = metadata.create_api_key(&scope, "kiln up", roles).await?;
    let key = new.key;
    if path.exists() {
        std::fs::remove_file(path).map_err(|e| file_error(e.to_string()))?;
    }
    let given = regions.map_or_else(|| key.expose().to_owned(), |r| r.key_for_owner(&key));
    load_or_create_secret_file::<()>(path, || Ok(given)).map_err(|e| {
        file_error(match e {
            SecretFileError::Io(e) => e.to_string(),
            SecretFileError::Make(()) => "cannot make a key".into(),
        })
    })?;
    Ok(key.hash())
}

/// Which routes a process serves.
#[derive(Debug, Clone)]
pub(crate) enum Routes {
    /// Everything (`kiln up`).
    All(AppState, IngestState),
    /// Ingest, import and symbol uploads (`kiln gateway`).
    Gateway(AppState, IngestState),
    /// Queries and symbol uploads (`kiln query`), and, when it has peers,
    /// the internal endpoints they call, on a listener of their own.
    Query(AppState, Option<(ClusterSecret, SocketAddr)>),
    /// Only `/metrics` and `/healthz` (`kiln worker`).
    Worker,
}

impl Routes {
    fn configure(self, cfg: &mut actix_web::web::ServiceConfig) {
        match self {
            Routes::All(state, ingest) => http::configure(state, ingest)(cfg),
            Routes::Gateway(state, ingest) => http::configure_gateway(state, ingest)(cfg),
            Routes::Query(state, cluster) => {
                http::configure_query(state, cluster.map(|(secret, _)| secret))(cfg)
            }
            Routes::Worker => {
                cfg.route("/healthz", actix_web::web::get().to(|| async { "ok" }));
            }
        }
    }

    /// Whether it serves the API, whose callers are authenticated (a
    /// worker serves none: every other path is a 404 there).
    fn authenticates(&self) -> bool {
        !matches!(self, Routes::Worker)
    }

    /// Where the peers' listener is to be bound, for a query node with peers.
    fn peer_listen(&self) -> Option<SocketAddr> {
        match self {
            Routes::Query(_, Some((_, addr))) => Some(*addr),
            _ => None,
        }
    }
}

/// The peers' listener as bound (its port resolved), in every worker's
/// app data; `None` where a process has none.
#[derive(Debug, Clone, Copy)]
struct PeerListener(Option<SocketAddr>);

/// Keeps the two listeners of a query node apart: the peers' serves only
/// `/internal/`, and the public one never does (404 either way), so the
/// cluster's own routes can be reachable on the cluster network alone.
async fn split_listeners(
    request: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<
    actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody + 'static>,
    actix_web::Error,
> {
    let peer = request
        .app_data::<actix_web::web::Data<PeerListener>>()
        .and_then(|listener| listener.0);
    if let Some(peer) = peer {
        let on_peer_listener = request.app_config().local_addr() == peer;
        let internal = http::routed_path(&request).starts_with("/internal/");
        if on_peer_listener != internal {
            return Err(http::ApiError::NotFound(format!(
                "{} is not served on this listener (the peers' routes and the public API \
                 listen apart)",
                request.path()
            ))
            .into());
        }
    }
    next.call(request).await
}

/// Binds `listen` (and a query node's peer listener) and serves `routes`
/// on `workers` threads, and `metrics` at `GET /metrics`.
pub(crate) fn serve(
    routes: Routes,
    listen: SocketAddr,
    workers: usize,
    metrics: Metrics,
) -> Result<Running, ServerError> {
    let peer_listen = routes.peer_listen();
    let authenticates = routes.authenticates();
    // Known once bound (port 0 picks one); the workers' apps are built
    // after that, when the server runs.
    let peer_bound = Arc::new(std::sync::OnceLock::<SocketAddr>::new());
    let peer_seen = Arc::clone(&peer_bound);
    let server = HttpServer::new(move || {
        let routes = routes.clone();
        App::new()
            .app_data(actix_web::web::Data::new(PeerListener(
                peer_seen.get().copied(),
            )))
            .app_data(actix_web::web::Data::new(metrics.clone()))
            // The last wrapped runs first: log, time queries, compress,
            // keep the listeners apart, give Pyroscope's and OTLP's errors
            // their own bodies, send other regions' requests there, then
            // authenticate.
            .wrap(Condition::new(
                authenticates,
                from_fn(http::auth::authenticate),
            ))
            .wrap(from_fn(http::region::route))
            .wrap(from_fn(http::otlp::status_bodies))
            .wrap(from_fn(http::pyroscope::answers))
            .wrap(from_fn(split_listeners))
            .wrap(Compress::default())
            .wrap(from_fn(telemetry::time_queries))
            .wrap(Logger::new("%r %s %b %Dms").log_target("kiln::http"))
            // Before the routes, whose last (`/{file}`, the UI's files)
            // would take it.
            .route("/metrics", actix_web::web::get().to(telemetry::serve))
            .configure(|cfg| routes.configure(cfg))
    })
    .workers(workers.max(1))
    // A query in flight must not hold a stopping server for long.
    .shutdown_timeout(SHUTDOWN_TIMEOUT_S)
    // A client that closes its side has gone: drop its handler (and with
    // it the query it asked for) instead of running it to the end.
    .h1_allow_half_closed(false)
    .bind(listen)
    .map_err(|source| ServerError::Listen {
        addr: listen,
        source,
    })?;
    let server = match peer_listen {
        None => server,
        Some(addr) => server
            .bind(addr)
            .map_err(|source| ServerError::Listen { addr, source })?,
    };
    let addrs = server.addrs();
    let local_addr = addrs[0];
    let peer_addr = peer_listen.map(|_| addrs[addrs.len() - 1]);
    if let Some(addr) = peer_addr {
        let _ = peer_bound.set(addr);
    }
    Ok(Running {
        local_addr,
        server: server.run(),
        login_path: None,
        peer_addr,
        otlp_grpc: None,
    })
}
