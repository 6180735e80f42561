//! Kiln's processes in a distributed deployment: gateways take batches
//! onto the bus, workers move them from the bus to the store, query nodes
//! answer from the store. Each runs on its own machines and scales on its
//! own; `kiln up` ([`start_embedded`](crate::start_embedded)) runs all
//! three in one process instead.
//!
//! Every function here must run inside an actix system.

use std::net::SocketAddr;
use std::sync::Arc;

use kiln_ingest_bus::Bus;
use kiln_storage::{MetadataStore, ObjectStore, ProfileStore, SealedStore};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use crate::envelope::BusKey;
use crate::global_symbols::GlobalSymbolSync;
use crate::http::{AdminToken, AppState, Auth, IngestState, QuotaDefaults, StoredBytes};
use crate::ingest::{self, CONSUMER_GROUP, IngestProgress, PipelineConfig};
use crate::query::{PeerOptions, QueryCoordinator, QueryNodes, QueryOptions, SetQueryOptions};
use crate::retention::Retention;
use crate::server::{Routes, Running, ServerError, serve};
use crate::telemetry::{Metrics, ServerRole, TenantNames};

/// Where and how a role serves HTTP, and whom it lets in.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Address to serve on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// The operator's token (tenants, limits, global symbols); `None`:
    /// those routes are refused. Give every node of a deployment the same
    /// token: the UI's sessions are signed with a key derived from it.
    pub admin_token: Option<AdminToken>,
    /// Limits of tenants that have none set.
    pub quota: QuotaDefaults,
    /// How a query node admits queries (longest span, wait for a slot).
    pub query: QueryOptions,
    /// Its region and the others, in a deployment with regions.
    pub regions: Option<crate::http::region::Regions>,
    /// How often a query node runs the rollup job ([`crate::rollup`]);
    /// `None`: never on its own (`POST /api/v1/admin/rollups` still runs
    /// a pass), so long ranges read samples unless another node rolls.
    pub rollup_every: Option<std::time::Duration>,
    /// How often a query node with peer regions and the admin token pulls
    /// the global symbols they have ([`crate::global_symbols`]).
    pub global_symbols_every: std::time::Duration,
    /// What `/metrics` shows of per-tenant series to scrapers without the
    /// admin token.
    pub metrics_tenants: TenantNames,
    /// Where a gateway serves OTLP profiles over gRPC
    /// ([`crate::otlp_grpc`]); `None`: nowhere.
    pub otlp_grpc_listen: Option<SocketAddr>,
}

impl HttpOptions {
    /// One HTTP worker per core, serving on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        HttpOptions {
            listen,
            workers: cores,
            admin_token: None,
            quota: QuotaDefaults::default(),
            query: QueryOptions::default(),
            regions: None,
            rollup_every: Some(crate::rollup::ROLLUP_INTERVAL),
            global_symbols_every: crate::global_symbols::GLOBAL_SYMBOLS_INTERVAL,
            metrics_tenants: TenantNames::default(),
            otlp_grpc_listen: None,
        }
    }

    /// Metrics of `role`, per-tenant series shown as configured.
    fn metrics(&self, role: ServerRole) -> Metrics {
        Metrics::new(role).showing_tenants(
            self.metrics_tenants,
            self.admin_token.as_ref().map(AdminToken::expose),
        )
    }

    /// What the handlers share, credentials checked against `metadata`,
    /// stored bytes read from `store`, counted in `metrics`.
    fn state(
        &self,
        query: actix::Addr<QueryCoordinator>,
        store: Arc<dyn ProfileStore>,
        objects: Arc<dyn ObjectStore>,
        metadata: Arc<dyn MetadataStore>,
        metrics: Metrics,
    ) -> AppState {
        AppState {
            query,
            objects,
            auth: Auth::new(metadata, self.admin_token.clone(), metrics.auth().clone()),
            defaults: self.quota,
            stored: Arc::new(StoredBytes::new(store)),
            retention: None,
            rollups: None,
            metrics,
            regions: self.regions.clone(),
        }
    }
}

/// Starts a gateway: the ingest and import endpoints publish to `bus`
/// (each record signed with `bus_key`, under the scope of the caller's key
/// from `metadata`), and imports wait for the workers by following their
/// consumer group's committed offsets on the bus. When the bus cannot take a batch, the
/// endpoints answer 503 with `Retry-After`, and agents spool and retry.
///
/// Symbol uploads are served here too (agents upload where they send);
/// they are stored in `objects`, and `query_nodes`, when given, are told
/// of them, so their queries show the new names at once. The `store`
/// backs the small query coordinator that such uploads notify.
///
/// Records are signed with `bus_key`, which the workers must share.
///
/// Its metrics (`GET /metrics`): ingest per tenant, quota refusals.
pub async fn start_gateway(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    metadata: Arc<dyn MetadataStore>,
    query_nodes: Option<QueryNodes>,
    http: HttpOptions,
    bus_key: BusKey,
) -> Result<Running, ServerError> {
    let metrics = http.metrics(ServerRole::Gateway);
    let progress = IngestProgress::follow(bus.clone(), CONSUMER_GROUP);
    // It answers no queries: its caches' counts are not exported.
    let query = match query_nodes {
        None => QueryCoordinator::start(store.clone(), objects.clone(), 1, metrics.query()),
        Some(nodes) => QueryCoordinator::start_notifying(
            store.clone(),
            objects.clone(),
            1,
            nodes,
            metrics.query(),
        )?,
    };
    // Gateways refuse a tenant over its stored bytes; retention is the
    // query nodes' (see `crate::retention`).
    let state = http.state(query, store, objects, metadata, metrics.clone());
    let ingest = IngestState::new(bus, progress, bus_key);
    let mut running = serve(
        Routes::Gateway(state.clone(), ingest.clone()),
        http.listen,
        http.workers,
        metrics,
    )?;
    if let Some(listen) = http.otlp_grpc_listen {
        running.serve_otlp_grpc(listen, true, state, ingest)?;
    }
    Ok(running)
}

/// Starts a worker: the ingest pipeline, consuming `bus` as a member of
/// [`CONSUMER_GROUP`] (the bus shares the partitions among the workers)
/// and writing to `store`. It commits offsets only after the store has
/// synced, so a worker killed at any point loses nothing: its partitions
/// go to the others, which write the uncommitted batches again
/// (idempotently). Frames are symbolized on the way where `objects` has
/// their symbols (`symbolizer` says how); `pipeline` says how many polls
/// are in flight and how long a thin poll lingers.
///
/// It stores only records signed with `bus_key`, the key every gateway of
/// the deployment signs with (`--bus-key`, `KILN_BUS_KEY`); others are
/// dead-lettered.
///
/// It serves HTTP on `listen` for operators only: `GET /metrics` (its
/// stage times, dead letters, and the consumer lag of the partitions it
/// holds, which the workers scale on) and `GET /healthz`.
pub async fn start_worker(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    symbolizer: SymbolizerConfig,
    bus_key: BusKey,
    listen: SocketAddr,
    pipeline: PipelineConfig,
) -> Result<Running, ServerError> {
    let metrics = Metrics::new(ServerRole::Worker);
    let symbolizer = Symbolizer::spawn(objects.clone(), symbolizer);
    ingest::start_with(
        bus,
        store,
        objects,
        symbolizer,
        bus_key,
        metrics.worker().clone(),
        pipeline,
    )
    .await?;
    // A scrape now and then, nothing on the ingest path: one thread.
    serve(Routes::Worker, listen, 1, metrics)
}

/// Starts a query node: the query API over `store`, its scans spread over
/// `aggregators` actors by rendezvous hashing, frames symbolized from
/// `objects` as `symbolizer` says. With `peers`, the node is one of a set
/// of query nodes that spread each query's partition scans over each other
/// (again by rendezvous hashing, so a partition's caches stay warm on one
/// node), serve each other's scans, and tell each other of symbol uploads.
///
/// It also runs the retention job ([`crate::retention`]): at start, then
/// hourly, it deletes what is older than each tenant's retention; and the
/// rollup job ([`crate::rollup`]), which sums each written hour for
/// queries of long ranges.
///
/// Its metrics (`GET /metrics`): query latency per route, cache hits and
/// misses, refusals for `max_concurrent_queries`.
pub async fn start_query(
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    metadata: Arc<dyn MetadataStore>,
    aggregators: usize,
    symbolizer: SymbolizerConfig,
    peers: Option<PeerOptions>,
    http: HttpOptions,
) -> Result<Running, ServerError> {
    let metrics = http.metrics(ServerRole::Query);
    let symbolizer = Symbolizer::spawn(objects.clone(), symbolizer);
    // Queries read settled hours from their segments; the rollup job seals
    // them (`kiln_storage::SealedStore`). Only this role reads samples:
    // gateways and workers keep the row store.
    let sealed = Arc::new(SealedStore::new(store, objects.clone()));
    let store: Arc<dyn ProfileStore> = sealed.clone();
    let retention = Retention::new(store.clone(), metadata.clone(), http.quota.retention_days);
    let rollups = crate::rollup::Rollups::new(store.clone(), metadata.clone()).sealing(sealed);
    let scans = store.clone();
    let peer_listen = peers.as_ref().map(|p| p.listen);
    let (query, cluster) = match peers {
        None => (
            QueryCoordinator::start_with_symbolizer(
                scans,
                symbolizer,
                aggregators,
                metrics.query(),
            ),
            None,
        ),
        Some(peers) => {
            let secret = peers.secret.clone();
            let query = QueryCoordinator::start_with_peers(
                scans,
                symbolizer,
                aggregators,
                peers,
                metrics.query(),
            )?;
            (query, Some(secret))
        }
    };
    query.do_send(SetQueryOptions(http.query));
    // Every query node of a region pulls: pulls are idempotent, and a
    // region needs one node up for its copy to catch up.
    let global_symbols =
        http.regions
            .clone()
            .zip(http.admin_token.clone())
            .map(|(regions, token)| {
                GlobalSymbolSync::new(objects.clone(), regions, token, query.clone())
            });
    let mut state = http.state(query, store, objects, metadata, metrics.clone());
    state.retention = Some(retention.clone());
    state.rollups = Some(rollups.clone());
    let cluster = cluster.zip(peer_listen);
    let running = serve(
        Routes::Query(state, cluster),
        http.listen,
        http.workers,
        metrics,
    )?;
    // Once serving: a node that failed to start deletes nothing.
    retention.spawn();
    if let Some(every) = http.rollup_every {
        rollups.spawn(every);
    }
    if let Some(sync) = global_symbols {
        sync.spawn(http.global_symbols_every);
    }
    Ok(running)
}
