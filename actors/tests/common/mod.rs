//! The embedded pipeline the actors' integration tests drive, as `kiln up`
//! runs it without HTTP: a real bus and stores in a temporary directory,
//! the ingest pipeline, and a query coordinator sharing its symbolizer.

#![allow(dead_code, reason = "Each test binary uses its own part")]

use std::sync::Arc;
use std::time::Duration;

use kiln_actors::envelope::{BusKey, EnvelopeHeader};
use kiln_actors::ingest::{self, IngestProgress};
use kiln_actors::query::{FlamegraphQuery, Granularity, QueryCoordinator, QueryRange};
use kiln_actors::telemetry::{Metrics, ServerRole};
use kiln_ingest_bus::{Bus, EmbeddedBus};
use kiln_model::flamewire::read;
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, LocalObjectStore, MetadataStore, ProfileStore,
    Roles, Scope, SealedStore,
};
use kiln_symbolizer_workers::{Symbolizer, SymbolizerConfig};

/// The bus key the tests' gateway side signs with and their pipeline
/// verifies with.
pub(crate) const TEST_BUS_KEY: &str = "a-test-bus-key-not-a-secret";

/// Who the HTTP API lets in: a metadata store holding a tenant and
/// project, and a key on them.
pub(crate) struct Credentials {
    /// The store the servers check keys against.
    pub metadata: Arc<dyn MetadataStore>,
    /// A key granting the key's roles on the scope.
    pub key: String,
}

impl Credentials {
    /// An embedded metadata store under `dir` with `scope`'s tenant and
    /// project, made through the [`MetadataStore`] trait as an operator
    /// would, and a key granting `roles` on it.
    pub(crate) async fn new(dir: &std::path::Path, scope: &Scope, roles: Roles) -> Credentials {
        let metadata: Arc<dyn MetadataStore> =
            Arc::new(EmbeddedMetadataStore::open(&dir.join("metadata.json")).unwrap());
        metadata.create_tenant(scope.tenant()).await.unwrap();
        metadata.create_project(scope).await.unwrap();
        let key = metadata
            .create_api_key(scope, "actors tests", roles)
            .await
            .unwrap();
        Credentials {
            metadata,
            key: key.key.expose().to_owned(),
        }
    }

    /// `Authorization: Bearer KEY`.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.key)
    }
}

/// A timestamp the tests' samples sit around (2027).
pub(crate) const T0: i64 = 1_800_000_000_000_000_000;

pub(crate) struct Pipeline {
    pub bus: Arc<EmbeddedBus>,
    /// What the pipeline's records are signed with.
    pub bus_key: BusKey,
    pub store: Arc<EmbeddedProfileStore>,
    pub objects: Arc<LocalObjectStore>,
    /// What queries read, as a query node does: `store` with its sealed
    /// hours in `objects`.
    pub sealed: Arc<SealedStore>,
    pub progress: IngestProgress,
    pub query: actix::Addr<QueryCoordinator>,
    /// What the pipeline and the query side count.
    pub metrics: Metrics,
    /// The tenant and project everything is published for.
    pub scope: Scope,
    pub dir: tempfile::TempDir,
}

impl Pipeline {
    /// Starts it all with `query_workers` scan workers, for tenant `acme`,
    /// project `web`.
    pub(crate) async fn start(query_workers: usize) -> Pipeline {
        Pipeline::for_scope(Scope::new("acme", "web").unwrap(), query_workers).await
    }

    /// The same for `scope`.
    pub(crate) async fn for_scope(scope: Scope, query_workers: usize) -> Pipeline {
        Pipeline::with_ingest_store(scope, query_workers, |store| store).await
    }

    /// The same, ingest writing through `wrap` of the store (a fault
    /// injector) while queries read the store itself.
    pub(crate) async fn with_ingest_store(
        scope: Scope,
        query_workers: usize,
        wrap: impl FnOnce(Arc<EmbeddedProfileStore>) -> Arc<dyn ProfileStore>,
    ) -> Pipeline {
        let dir = tempfile::tempdir().unwrap();
        let bus = Arc::new(EmbeddedBus::open(&dir.path().join("bus"), 2).unwrap());
        let store = Arc::new(EmbeddedProfileStore::open(&dir.path().join("profiles")).unwrap());
        let objects = Arc::new(LocalObjectStore::open(&dir.path().join("objects")).unwrap());
        let symbolizer = Symbolizer::spawn(objects.clone(), SymbolizerConfig::default());
        let bus_key = BusKey::new(TEST_BUS_KEY).unwrap();
        let metrics = Metrics::new(ServerRole::All);
        let progress = ingest::start(
            bus.clone(),
            wrap(store.clone()),
            objects.clone(),
            symbolizer.clone(),
            bus_key.clone(),
            metrics.worker().clone(),
        )
        .await
        .unwrap();
        let sealed = Arc::new(SealedStore::new(store.clone(), objects.clone()));
        let query = QueryCoordinator::start_with_symbolizer(
            sealed.clone(),
            symbolizer,
            query_workers,
            metrics.query(),
        );
        Pipeline {
            bus,
            bus_key,
            store,
            objects,
            sealed,
            progress,
            query,
            metrics,
            scope,
            dir,
        }
    }

    /// Publishes `bytes` (an encoded batch, or anything) from host
    /// `source`, and waits until ingest has committed it.
    pub(crate) async fn publish(&self, source: &str, bytes: &[u8]) {
        let header = EnvelopeHeader {
            scope: self.scope.clone(),
            received_at_ns: T0,
        };
        let p = self
            .bus
            .publish(&header.bus_key(source), header.wrap(bytes, &self.bus_key))
            .await
            .unwrap();
        assert!(
            self.progress
                .wait_committed(p.partition, p.offset, Duration::from_secs(30))
                .await
        );
    }

    /// Publishes `payload` as it is (a forged or damaged record) under the
    /// bus key `key`, and waits until ingest has committed it.
    pub(crate) async fn publish_raw(&self, key: &[u8], payload: Vec<u8>) {
        let p = self.bus.publish(key, payload).await.unwrap();
        assert!(
            self.progress
                .wait_committed(p.partition, p.offset, Duration::from_secs(30))
                .await
        );
    }

    /// A range around [`T0`] with label `filters`.
    pub(crate) fn range(&self, filters: &[(&str, &str)]) -> QueryRange {
        QueryRange {
            scope: self.scope.clone(),
            from_ns: T0 - 10_000_000_000_000,
            to_ns: T0 + 10_000_000_000_000,
            filters: filters
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The flamegraph of [`Pipeline::range`] as collapsed stacks.
    pub(crate) async fn collapsed(&self, filters: &[(&str, &str)]) -> String {
        let wire = self
            .query
            .send(FlamegraphQuery(self.range(filters), Granularity::Function))
            .await
            .unwrap()
            .unwrap();
        let bytes = wire.to_bytes();
        let mut out = Vec::new();
        read(&bytes, |g| g.write_collapsed(&mut out))
            .unwrap()
            .unwrap();
        String::from_utf8(out).unwrap()
    }
}

/// `zeros` bytes of zeros as zstd: a few dozen KB on the wire, streamed
/// so that the zeros are never held at once.
pub(crate) fn zstd_bomb(zeros: usize) -> Vec<u8> {
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..zeros.div_ceil(chunk.len()) {
        std::io::Write::write_all(&mut encoder, &chunk).unwrap();
    }
    encoder.finish().unwrap()
}

/// This process's peak resident memory so far (`VmHWM`), in bytes: what
/// an allocation made and freed between two readings still shows.
pub(crate) fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kb * 1024
}
