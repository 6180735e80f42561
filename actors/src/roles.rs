//! Kiln's processes in a distributed deployment: gateways take batches
//! onto the bus, workers move them from the bus to the store, query nodes
//! answer from the store. Each runs on its own machines and scales on its
//! own; `kiln up` ([`start_embedded`](crate::start_embedded)) runs all
//! three in one process instead.
//!
//! Every function here must run inside an actix system.

use std::net::SocketAddr;
use std::sync::Arc;

use kiln_ingest_bus::{Bus, BusError};
use kiln_storage::{ObjectStore, ProfileStore};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

use crate::http::{AdminToken, AppState, IngestState};
use crate::ingest::{self, CONSUMER_GROUP, IngestProgress};
use crate::query::{PeerOptions, QueryCoordinator, QueryNodes};
use crate::server::{Routes, Running, ServerError, default_scope, serve};

/// Where and how a role serves HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Address to serve on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// What writes to the global symbol store must present; `None`: they
    /// are refused (give every node of a deployment the same token).
    pub admin_token: Option<AdminToken>,
}

impl HttpOptions {
    /// One HTTP worker per core, serving on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        HttpOptions {
            listen,
            workers: cores,
            admin_token: None,
        }
    }
}

/// Starts a gateway: the ingest and import endpoints publish to `bus`, and
/// imports wait for the workers by following their consumer group's
/// committed offsets on the bus. When the bus cannot take a batch, the
/// endpoints answer 503 with `Retry-After`, and agents spool and retry.
///
/// Symbol uploads are served here too (agents upload where they send);
/// they are stored in `objects`, and `query_nodes`, when given, are told
/// of them, so their queries show the new names at once. The `store`
/// backs the small query coordinator that such uploads notify.
pub async fn start_gateway(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    query_nodes: Option<QueryNodes>,
    http: HttpOptions,
) -> Result<Running, ServerError> {
    let progress = IngestProgress::follow(bus.clone(), CONSUMER_GROUP);
    let query = match query_nodes {
        None => QueryCoordinator::start(store, objects.clone(), 1),
        Some(nodes) => QueryCoordinator::start_notifying(store, objects.clone(), 1, nodes)?,
    };
    let state = AppState {
        query,
        objects,
        scope: default_scope()?,
        admin: http.admin_token,
    };
    serve(
        Routes::Gateway(state, IngestState { bus, progress }),
        http.listen,
        http.workers,
    )
}

/// Starts a worker: the ingest pipeline, consuming `bus` as a member of
/// [`CONSUMER_GROUP`] (the bus shares the partitions among the workers)
/// and writing to `store`. It commits offsets only after the store has
/// synced, so a worker killed at any point loses nothing: its partitions
/// go to the others, which write the uncommitted batches again
/// (idempotently). Frames are symbolized on the way where `objects` has
/// their symbols (`symbolizer` says how).
pub async fn start_worker(
    bus: Arc<dyn Bus>,
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    symbolizer: SymbolizerConfig,
) -> Result<IngestProgress, BusError> {
    let symbolizer = Symbolizer::spawn(objects.clone(), symbolizer);
    ingest::start(bus, store, objects, symbolizer).await
}

/// Starts a query node: the query API over `store`, its scans spread over
/// `aggregators` actors by rendezvous hashing, frames symbolized from
/// `objects` as `symbolizer` says. With `peers`, the node is one of a set
/// of query nodes that spread each query's partition scans over each other
/// (again by rendezvous hashing, so a partition's caches stay warm on one
/// node), serve each other's scans, and tell each other of symbol uploads.
pub async fn start_query(
    store: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    aggregators: usize,
    symbolizer: SymbolizerConfig,
    peers: Option<PeerOptions>,
    http: HttpOptions,
) -> Result<Running, ServerError> {
    let symbolizer = Symbolizer::spawn(objects.clone(), symbolizer);
    let (query, cluster) = match peers {
        None => (
            QueryCoordinator::start_with_symbolizer(store, symbolizer, aggregators),
            None,
        ),
        Some(peers) => {
            let secret = peers.secret.clone();
            let query = QueryCoordinator::start_with_peers(store, symbolizer, aggregators, peers)?;
            (query, Some(secret))
        }
    };
    let state = AppState {
        query,
        objects,
        scope: default_scope()?,
        admin: http.admin_token,
    };
    serve(Routes::Query(state, cluster), http.listen, http.workers)
}
