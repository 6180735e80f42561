//! The embedded server: bus, stores, ingest pipeline, query cluster and
//! HTTP API in one process, on local disk.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use actix_web::middleware::{Compress, Logger};
use actix_web::{App, HttpServer};
use kiln_ingest_bus::{BusError, EmbeddedBus};
use kiln_storage::{EmbeddedProfileStore, LocalObjectStore, Scope, StoreError};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use crate::http::{self, AdminToken, AdminTokenError, AppState, IngestState};
use crate::ingest;
use crate::query::{ClusterSecret, QueryCoordinator};

/// Tenant used until tenancy lands.
pub const DEFAULT_TENANT: &str = "default";
/// Project used until tenancy lands.
pub const DEFAULT_PROJECT: &str = "default";
/// The file in the data directory that keeps the admin token `kiln up`
/// made, when it was given none.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

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
    /// What writes to the global symbol store must present; `None`: the
    /// one kept in [`ADMIN_TOKEN_FILE`] under the data directory (made on
    /// first start).
    pub admin_token: Option<AdminToken>,
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
#[allow(missing_debug_implementations)] // actix's Server is not Debug
pub struct Running {
    /// Where it serves HTTP.
    pub local_addr: SocketAddr,
    /// Resolves when the server stops (on SIGINT/SIGTERM).
    pub server: actix_web::dev::Server,
}

/// Opens everything under `options.data_dir` and starts serving. Must run
/// inside an actix system (`actix_rt::System`).
pub async fn start_embedded(options: EmbeddedOptions) -> Result<Running, ServerError> {
    let dir = &options.data_dir;
    std::fs::create_dir_all(dir).map_err(|source| ServerError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let bus = Arc::new(EmbeddedBus::open(&dir.join("bus"), options.bus_partitions)?);
    let store = Arc::new(EmbeddedProfileStore::open(&dir.join("profiles"))?);
    let objects = Arc::new(LocalObjectStore::open(&dir.join("objects"))?);

    let admin = match options.admin_token {
        Some(token) => token,
        None => AdminToken::load_or_create(&dir.join(ADMIN_TOKEN_FILE))?,
    };

    // One symbolizer for ingest and queries: an upload tells it at once,
    // so frames ingested right after it are written symbolized.
    let symbolizer = Symbolizer::spawn(objects.clone(), options.symbolizer.clone());
    let progress = ingest::start(
        bus.clone(),
        store.clone(),
        objects.clone(),
        symbolizer.clone(),
    )
    .await?;
    let query = QueryCoordinator::start_with_symbolizer(store, symbolizer, options.aggregators);
    let state = AppState {
        query,
        objects,
        scope: default_scope()?,
        admin: Some(admin),
    };
    let ingest = IngestState { bus, progress };
    serve(
        Routes::All(state, ingest),
        options.listen,
        options.http_workers,
    )
}

/// The tenant and project every request gets until tenancy lands.
pub(crate) fn default_scope() -> Result<Scope, StoreError> {
    Scope::new(DEFAULT_TENANT, DEFAULT_PROJECT)
}

/// Which routes a process serves.
#[derive(Debug, Clone)]
pub(crate) enum Routes {
    /// Everything (`kiln up`).
    All(AppState, IngestState),
    /// Ingest, import and symbol uploads (`kiln gateway`).
    Gateway(AppState, IngestState),
    /// Queries and symbol uploads (`kiln query`), and the internal
    /// endpoints of its peers when it has a cluster secret.
    Query(AppState, Option<ClusterSecret>),
}

impl Routes {
    fn configure(self, cfg: &mut actix_web::web::ServiceConfig) {
        match self {
            Routes::All(state, ingest) => http::configure(state, ingest)(cfg),
            Routes::Gateway(state, ingest) => http::configure_gateway(state, ingest)(cfg),
            Routes::Query(state, cluster) => http::configure_query(state, cluster)(cfg),
        }
    }
}

/// Binds `listen` and serves `routes` on `workers` threads.
pub(crate) fn serve(
    routes: Routes,
    listen: SocketAddr,
    workers: usize,
) -> Result<Running, ServerError> {
    let server = HttpServer::new(move || {
        let routes = routes.clone();
        App::new()
            .wrap(Compress::default())
            .wrap(Logger::new("%r %s %b %Dms").log_target("kiln::http"))
            .configure(|cfg| routes.configure(cfg))
    })
    .workers(workers.max(1))
    .bind(listen)
    .map_err(|source| ServerError::Listen {
        addr: listen,
        source,
    })?;
    let local_addr = server.addrs()[0];
    Ok(Running {
        local_addr,
        server: server.run(),
    })
}
