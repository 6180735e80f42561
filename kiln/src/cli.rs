//! Command-line interface: every flag also reads an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kiln: continuous profiling for CPU and GPU workloads.
///
/// `kiln up` runs the whole backend on this machine (embedded bus and
/// stores on local disk) and serves the HTTP API. `kiln import` sends
/// profiles you already have (collapsed stacks, perf script, pprof);
/// `kiln flamegraph` reads them back.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, long_about, propagate_version = true)]
pub(crate) struct Cli {
    /// More log output (-v debug, -vv trace). KILN_LOG overrides it with a
    /// tracing filter, e.g. KILN_LOG=kiln_actors=debug.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run Kiln on this machine: ingest, storage, queries and the HTTP API
    /// in one process, with all data under --data-dir.
    Up(UpArgs),
    /// Import profile files into a running Kiln.
    Import(ImportArgs),
    /// Print a flamegraph (collapsed stacks or JSON) from a running Kiln.
    Flamegraph(FlamegraphArgs),
    /// Work with symbols: upload them, check what an ELF file's symbols say.
    #[command(subcommand)]
    Symbols(SymbolsCommand),
    /// Export what Kiln recorded to other tools' formats.
    #[command(subcommand)]
    Export(ExportCommand),
    /// Look at what the CUDA injection library (libkiln_cuda.so) sends,
    /// without the agent: for debugging the library and its CUPTI use.
    #[command(subcommand)]
    Gpu(GpuCommand),
    /// Distributed mode: accept agent batches and imports onto the bus.
    Gateway(GatewayArgs),
    /// Distributed mode: write batches from the bus to the store (run as
    /// many as the bus has partitions, at most).
    Worker(WorkerArgs),
    /// Distributed mode: answer queries from the store.
    Query(QueryArgs),
    /// Manage a shared profile store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Tenants and their limits (the operator, with the admin token).
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// API keys: make, list and revoke them.
    #[command(subcommand)]
    Key(KeyCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum TenantCommand {
    /// Create a tenant with a project, and print a new key with ingest and
    /// read rights on it as the last line of output.
    Create(TenantCreateArgs),
    /// List the tenants and their projects.
    List(OperatorArgs),
    /// Show a tenant's limits: as set, and as they apply.
    Limits(TenantNameArgs),
    /// Set a tenant's limits. Every limit not given goes back to the
    /// server's default.
    SetLimits(SetLimitsArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeyCommand {
    /// Make a key; its secret is printed once, as the last line.
    Create(KeyCreateArgs),
    /// List keys (never their secrets).
    List(KeyListArgs),
    /// Revoke a key by its id: requests with it are refused from then on
    /// (on other nodes within 10 s).
    Revoke(KeyRevokeArgs),
}

/// The server and the operator's credential.
#[derive(Debug, Args)]
pub(crate) struct OperatorArgs {
    #[command(flatten)]
    pub server: ServerArg,

    /// The server's admin token. Default: the one `kiln up` keeps in
    /// DATA_DIR/admin-token, when this machine has it.
    #[arg(long, env = "KILN_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct TenantCreateArgs {
    #[command(flatten)]
    pub operator: OperatorArgs,

    /// The tenant's first project.
    #[arg(long, default_value = "default")]
    pub project: String,

    /// In a deployment with regions, the tenant's home region, where its
    /// profiles, symbols and metrics are kept (default: the region of
    /// --server). The server passes the request on to that region.
    #[arg(long)]
    pub home_region: Option<String>,

    /// The tenant's name: lowercase letters, digits, '-' and '_'.
    pub name: String,
}

#[derive(Debug, Args)]
pub(crate) struct TenantNameArgs {
    #[command(flatten)]
    pub operator: OperatorArgs,

    /// The tenant.
    pub name: String,
}

#[derive(Debug, Args)]
pub(crate) struct SetLimitsArgs {
    #[command(flatten)]
    pub operator: OperatorArgs,

    /// Samples per second the tenant may send (all its agents and imports).
    #[arg(long)]
    pub ingest_samples_per_s: Option<u64>,

    /// Request bytes per second the tenant may send, as sent (compressed).
    #[arg(long)]
    pub ingest_bytes_per_s: Option<u64>,

    /// Queries of the tenant's that may run at once on one query node.
    #[arg(long)]
    pub max_concurrent_queries: Option<u32>,

    /// Days of the tenant's data kept: its queries read no further back,
    /// and the hourly retention job deletes older data.
    #[arg(long)]
    pub retention_days: Option<u32>,

    /// Bytes of samples and metric points the tenant may keep stored;
    /// over it, its ingest, imports and symbol uploads get 429.
    #[arg(long)]
    pub max_stored_bytes: Option<u64>,

    /// The tenant.
    pub name: String,
}

/// Whose keys: a tenant named with the admin token (the operator), or
/// without `--tenant`, the tenant of `--api-key` (a key with the admin role).
#[derive(Debug, Args)]
pub(crate) struct KeyScopeArgs {
    #[command(flatten)]
    pub operator: OperatorArgs,

    /// The tenant (needs the admin token). Without it: the tenant of
    /// --api-key, which must have the admin role.
    #[arg(long)]
    pub tenant: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct KeyCreateArgs {
    #[command(flatten)]
    pub scope: KeyScopeArgs,

    /// The project the key grants. Default: the operator's "default", or
    /// the project of --api-key.
    #[arg(long)]
    pub project: Option<String>,

    /// What the key may do: ingest (agents, imports, symbol uploads), read
    /// (queries, the UI), admin (the tenant's keys), comma-separated.
    #[arg(long, default_value = "ingest,read")]
    pub roles: String,

    /// What the key is for, shown in listings.
    #[arg(long, default_value = "")]
    pub label: String,
}

#[derive(Debug, Args)]
pub(crate) struct KeyListArgs {
    #[command(flatten)]
    pub scope: KeyScopeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct KeyRevokeArgs {
    #[command(flatten)]
    pub scope: KeyScopeArgs,

    /// The key's id (`kiln key list` shows it).
    pub id: i64,
}

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Create or upgrade the store's schema (idempotent).
    Migrate(MigrateArgs),
}

/// `--bus`: where gateways publish and workers consume.
#[derive(Debug, Args)]
pub(crate) struct BusArg {
    /// The ingest bus: kafka://HOST:PORT[,HOST:PORT…][/TOPIC][?partitions=N]
    /// (the topic is created when missing), or file:///DIR for the
    /// embedded bus (one process only).
    #[arg(long, env = "KILN_BUS", value_parser = parse_bus_url)]
    pub bus: kiln_actors::backends::BusUrl,
}

/// `--store` and `--objects`: where profiles and symbol files live.
#[derive(Debug, Args)]
pub(crate) struct StoresArgs {
    /// The profile store: postgres://USER@HOST:PORT/DB,
    /// scylla://HOST:PORT/KEYSPACE, or file:///DIR for the embedded store
    /// (one process only).
    #[arg(long, env = "KILN_STORE", value_parser = parse_store_url)]
    pub store: kiln_actors::backends::StoreUrl,

    /// The object store (symbol files): s3://BUCKET?endpoint=URL (keys in
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or file:///DIR.
    #[arg(long, env = "KILN_OBJECTS", value_parser = parse_objects_url)]
    pub objects: kiln_actors::backends::ObjectsUrl,
}

/// `--debuginfod-urls`: where the symbols of files that have none are
/// fetched from (`kiln up`, `kiln worker`, `kiln query`).
#[derive(Debug, Args)]
pub(crate) struct DebuginfodArg {
    /// debuginfod servers to fetch the symbols of files that have none
    /// from, space separated (elfutils' DEBUGINFOD_URLS syntax), e.g.
    /// "https://debuginfod.debian.net". Fetched symbols go to the global
    /// store.
    #[arg(long, env = "DEBUGINFOD_URLS")]
    pub debuginfod_urls: Option<String>,
}

impl DebuginfodArg {
    /// The symbolizer's configuration: the defaults, with these servers.
    pub(crate) fn symbolizer_config(&self) -> kiln_symbolizer_workers::SymbolizerConfig {
        let urls = self.debuginfod_urls.as_deref().unwrap_or_default();
        kiln_symbolizer_workers::SymbolizerConfig::with_debuginfod(
            kiln_symbolizer_workers::debuginfod::Debuginfod::parse_urls(urls),
        )
    }
}

/// The limits of tenants that have none of their own (`kiln tenant
/// set-limits` sets a tenant's).
#[derive(Debug, Args)]
pub(crate) struct QuotaArgs {
    /// Samples per second a tenant may send, by default.
    #[arg(long, env = "KILN_DEFAULT_INGEST_SAMPLES_PER_S", default_value_t = kiln_actors::http::QuotaDefaults::default().ingest_samples_per_s)]
    pub default_ingest_samples_per_s: u64,

    /// Request bytes per second a tenant may send (as sent), by default.
    #[arg(long, env = "KILN_DEFAULT_INGEST_BYTES_PER_S", default_value_t = kiln_actors::http::QuotaDefaults::default().ingest_bytes_per_s)]
    pub default_ingest_bytes_per_s: u64,

    /// Queries a tenant may run at once on one query node, by default.
    #[arg(long, env = "KILN_DEFAULT_MAX_CONCURRENT_QUERIES", default_value_t = kiln_actors::http::QuotaDefaults::default().max_concurrent_queries)]
    pub default_max_concurrent_queries: u32,

    /// Days of a tenant's data kept, by default: queries read no further
    /// back, and the query role's hourly retention job deletes older data
    /// (none: all data, kept).
    #[arg(long, env = "KILN_DEFAULT_RETENTION_DAYS")]
    pub default_retention_days: Option<u32>,

    /// Bytes of samples and metric points a tenant may keep stored, by
    /// default (none: no limit).
    #[arg(long, env = "KILN_DEFAULT_MAX_STORED_BYTES")]
    pub default_max_stored_bytes: Option<u64>,
}

/// How a query node admits and answers queries (`kiln up`, `kiln query`).
#[derive(Debug, Args)]
pub(crate) struct QueryLimitArgs {
    /// The longest span of data one query reads (`400d`, `90d`): a query
    /// whose range holds data over a longer span gets a 400 saying so (a
    /// longer range over less data is narrowed to the data and answered).
    #[arg(long, env = "KILN_MAX_QUERY_RANGE", default_value = "400d", value_parser = humantime::parse_duration)]
    pub max_query_range: std::time::Duration,

    /// How often this node sums each written hour into rollups, which
    /// queries of long ranges read instead of samples (`0s`: never; a
    /// pass can still be asked for with `POST /api/v1/admin/rollups`).
    #[arg(long, env = "KILN_ROLLUP_EVERY", default_value = "5m", value_parser = humantime::parse_duration)]
    pub rollup_every: std::time::Duration,
}

impl QuotaArgs {
    /// The defaults given.
    pub(crate) fn defaults(&self) -> kiln_actors::http::QuotaDefaults {
        kiln_actors::http::QuotaDefaults {
            ingest_samples_per_s: self.default_ingest_samples_per_s,
            ingest_bytes_per_s: self.default_ingest_bytes_per_s,
            max_concurrent_queries: self.default_max_concurrent_queries,
            retention_days: self.default_retention_days,
            max_stored_bytes: self.default_max_stored_bytes,
        }
    }
}

impl QueryLimitArgs {
    /// How often the rollup job runs; `None` for `0s`.
    pub(crate) fn rollup_every(&self) -> Option<std::time::Duration> {
        (!self.rollup_every.is_zero()).then_some(self.rollup_every)
    }

    /// How queries are admitted.
    pub(crate) fn query_options(&self) -> kiln_actors::query::QueryOptions {
        kiln_actors::query::QueryOptions {
            max_range: self.max_query_range,
            ..Default::default()
        }
    }
}

/// `--admin-token` of the processes that serve symbol uploads.
#[derive(Debug, Args)]
pub(crate) struct AdminTokenArg {
    /// The token that writes to the global symbol store (`kiln symbols
    /// crawl`) must present, as "Authorization: Bearer TOKEN"; at least 16
    /// characters. Without one, `kiln up` uses the token in DATA_DIR/
    /// admin-token (made on first start) and `kiln gateway` and `kiln
    /// query` refuse global writes.
    #[arg(long, env = "KILN_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// What GET /metrics shows of per-tenant series (ingest volume,
    /// refusals) to a scraper without the admin token: `hashed` names each
    /// tenant by a hash keyed with the admin token (stable across nodes
    /// and restarts), `operator-only` leaves them out. A scrape with
    /// "Authorization: Bearer ADMIN_TOKEN" always sees tenants' names.
    #[arg(long, env = "KILN_METRICS_TENANTS", value_enum, default_value_t = MetricsTenants::Hashed)]
    pub metrics_tenants: MetricsTenants,
}

/// `--metrics-tenants`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MetricsTenants {
    /// Tenants named by a keyed hash.
    Hashed,
    /// Per-tenant series for the admin token only.
    OperatorOnly,
}

impl From<MetricsTenants> for kiln_actors::telemetry::TenantNames {
    fn from(choice: MetricsTenants) -> Self {
        match choice {
            MetricsTenants::Hashed => Self::Hashed,
            MetricsTenants::OperatorOnly => Self::OperatorOnly,
        }
    }
}

impl AdminTokenArg {
    /// The token given, checked.
    pub(crate) fn token(&self) -> anyhow::Result<Option<kiln_actors::http::AdminToken>> {
        use anyhow::Context;
        self.admin_token
            .as_deref()
            .map(kiln_actors::http::AdminToken::new)
            .transpose()
            .context("--admin-token")
    }
}

#[derive(Debug, Args)]
pub(crate) struct GatewayArgs {
    /// Address to serve the ingest, import and symbol endpoints on.
    #[arg(long, env = "KILN_LISTEN", default_value = "127.0.0.1:7071")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub bus: BusArg,
    #[command(flatten)]
    pub stores: StoresArgs,
    /// Query nodes to tell of symbol uploads here (agents upload where
    /// they send), as their peer listeners' http://HOST:PORT (the
    /// --advertise of each), comma separated: their queries then show the
    /// new names at once. Needs --cluster-secret.
    #[arg(
        long,
        env = "KILN_QUERY_NODES",
        value_delimiter = ',',
        requires = "cluster_secret"
    )]
    pub query_nodes: Vec<String>,
    /// The query nodes' cluster secret (as given to `kiln query`).
    #[arg(
        long,
        env = "KILN_CLUSTER_SECRET",
        hide_env_values = true,
        requires = "query_nodes"
    )]
    pub cluster_secret: Option<String>,
    #[command(flatten)]
    pub metadata: MetadataArg,
    #[command(flatten)]
    pub bus_key: BusKeyArg,
    #[command(flatten)]
    pub admin: AdminTokenArg,
    #[command(flatten)]
    pub quota: QuotaArgs,
    #[command(flatten)]
    pub regions: RegionArgs,
    /// Where to serve OTLP profiles over gRPC as well (ProfilesService/
    /// Export, cleartext HTTP/2: put TLS on the load balancer), e.g.
    /// 0.0.0.0:4317. Default: not served; OTLP/HTTP is served on --listen.
    #[arg(long, env = "KILN_OTLP_GRPC_LISTEN", value_name = "ADDR")]
    pub otlp_grpc_listen: Option<SocketAddr>,
}

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// Address to serve the worker's metrics (GET /metrics, for
    /// Prometheus: its consumer lag, stage times, dead letters) and health
    /// check (GET /healthz) on. Give each worker on one host its own.
    #[arg(long, env = "KILN_LISTEN", default_value = "127.0.0.1:7073")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub bus: BusArg,
    #[command(flatten)]
    pub stores: StoresArgs,
    #[command(flatten)]
    pub bus_key: BusKeyArg,
    #[command(flatten)]
    pub debuginfod: DebuginfodArg,
    /// How long a poll of the bus that found only a few records waits for
    /// more before decoding them (0s: never). Fuller polls cost less CPU
    /// per sample; the price is up to this much more latency when the bus
    /// is quiet.
    #[arg(long, env = "KILN_INGEST_LINGER", default_value = "200ms", value_parser = humantime::parse_duration)]
    pub ingest_linger: std::time::Duration,
}

/// `--metadata`: where tenants, keys and limits live (gateways and query
/// nodes check every request's key there).
#[derive(Debug, Args)]
pub(crate) struct MetadataArg {
    /// The metadata store: postgres://USER@HOST:PORT/DB (its schema is
    /// made by `kiln store migrate --store` on the same database), or
    /// file:///PATH/metadata.json (one process only).
    #[arg(long, env = "KILN_METADATA", value_parser = parse_metadata_url)]
    pub metadata: kiln_actors::backends::MetadataUrl,
}

/// `--bus-key`: what gateways sign bus records with and workers check.
#[derive(Debug, Args)]
pub(crate) struct BusKeyArg {
    /// The key bus records are signed with (HMAC-SHA256): the same on
    /// every gateway and worker, at least 16 characters. A worker stores
    /// only records signed with it, so the tenant a record names is the
    /// one a gateway authenticated. Prefer the environment variable.
    #[arg(long, env = "KILN_BUS_KEY", hide_env_values = true)]
    pub bus_key: String,
}

impl BusKeyArg {
    /// The key given, checked.
    pub(crate) fn key(&self) -> anyhow::Result<kiln_actors::envelope::BusKey> {
        use anyhow::Context;
        kiln_actors::envelope::BusKey::new(&self.bus_key).context("--bus-key")
    }
}

#[derive(Debug, Args)]
pub(crate) struct QueryArgs {
    /// Address to serve the query API on.
    #[arg(long, env = "KILN_LISTEN", default_value = "127.0.0.1:7072")]
    pub listen: SocketAddr,
    /// Aggregator actors that share each query's partition scans. Default:
    /// one per core.
    #[arg(long, env = "KILN_AGGREGATORS")]
    pub aggregators: Option<usize>,
    #[command(flatten)]
    pub stores: StoresArgs,
    #[command(flatten)]
    pub peers: PeersArgs,
    #[command(flatten)]
    pub debuginfod: DebuginfodArg,
    #[command(flatten)]
    pub metadata: MetadataArg,
    #[command(flatten)]
    pub admin: AdminTokenArg,
    #[command(flatten)]
    pub quota: QuotaArgs,
    #[command(flatten)]
    pub query_limits: QueryLimitArgs,
    #[command(flatten)]
    pub regions: RegionArgs,
}

/// `--region` and `--peer-region`: one region of a deployment with
/// several, each a whole Kiln holding its own tenants' data.
#[derive(Debug, Args)]
pub(crate) struct RegionArgs {
    /// This deployment's region (e.g. eu-west-1): keys made here carry it
    /// (kiln_REGION_…), so every region can tell where a key's tenant
    /// lives. A request with another region's key is forwarded to that
    /// region (--peer-region) and nothing of it is kept here.
    #[arg(long, env = "KILN_REGION")]
    pub region: Option<String>,
    /// Another region's public URL, as NAME=http(s)://HOST[:PORT] (repeat
    /// the flag, or comma separated): where requests with that region's
    /// keys are forwarded.
    #[arg(
        long = "peer-region",
        env = "KILN_PEER_REGIONS",
        value_delimiter = ',',
        value_name = "NAME=URL",
        requires = "region"
    )]
    pub peer_regions: Vec<String>,
    /// How often the global symbols (public distro libraries) that peer
    /// regions have and this one lacks are pulled, checked and stored
    /// here, so every region names libc frames alike. Query nodes and
    /// `kiln up` pull; it needs the admin token, the same in every region.
    #[arg(
        long,
        env = "KILN_GLOBAL_SYMBOLS_EVERY",
        default_value = "10m",
        value_parser = humantime::parse_duration,
        requires = "region"
    )]
    pub global_symbols_every: std::time::Duration,
}

impl RegionArgs {
    /// The region set-up given, checked; `None` without `--region`.
    pub(crate) fn regions(&self) -> anyhow::Result<Option<kiln_actors::http::region::Regions>> {
        use anyhow::Context;
        self.region
            .as_deref()
            .map(|here| kiln_actors::http::region::Regions::new(here, &self.peer_regions))
            .transpose()
            .context("--region/--peer-region")
    }
}

/// `--peers` and what goes with it: query nodes that share scans.
#[derive(Debug, Args)]
pub(crate) struct PeersArgs {
    /// Every query node of the cluster, as http://HOST:PORT, comma
    /// separated (give every node the same list). Each query's partition
    /// scans are spread over them by rendezvous hashing; a node that fails
    /// has its scans done by the asking node. Needs --advertise and
    /// --cluster-secret.
    #[arg(
        long,
        env = "KILN_PEERS",
        value_delimiter = ',',
        requires_all = ["advertise", "cluster_secret", "peer_listen"]
    )]
    pub peers: Vec<String>,

    /// Where this node serves its peers: a listener of its own, apart from
    /// the public API (--listen), so that it can be reachable on the
    /// cluster network only. Its routes (/internal/…) are not served on
    /// --listen, nor the API on this one.
    #[arg(long, env = "KILN_PEER_LISTEN", requires = "peers")]
    pub peer_listen: Option<SocketAddr>,

    /// This node's peer URL as its peers reach it (http://HOST:PORT, the
    /// --peer-listen address as seen from the other nodes).
    #[arg(long, env = "KILN_ADVERTISE", requires = "peers")]
    pub advertise: Option<String>,

    /// The secret query nodes present to each other's internal endpoints
    /// (the same on every node; 16 characters or more). Prefer the
    /// environment variable: arguments show in `ps`.
    #[arg(
        long,
        env = "KILN_CLUSTER_SECRET",
        hide_env_values = true,
        requires = "peers"
    )]
    pub cluster_secret: Option<String>,

    /// How long a peer has to answer a scan before this node does it
    /// itself (`10s`, `500ms`).
    #[arg(long, env = "KILN_PEER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub peer_timeout: std::time::Duration,
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// The profile store, as for `kiln worker --store`.
    #[arg(long, env = "KILN_STORE", value_parser = parse_store_url)]
    pub store: kiln_actors::backends::StoreUrl,
}

fn parse_bus_url(text: &str) -> Result<kiln_actors::backends::BusUrl, String> {
    kiln_actors::backends::parse_bus(text).map_err(|e| e.to_string())
}

fn parse_store_url(text: &str) -> Result<kiln_actors::backends::StoreUrl, String> {
    text.parse()
        .map_err(|e: kiln_actors::backends::BackendError| e.to_string())
}

fn parse_metadata_url(text: &str) -> Result<kiln_actors::backends::MetadataUrl, String> {
    text.parse()
        .map_err(|e: kiln_actors::backends::BackendError| e.to_string())
}

fn parse_objects_url(text: &str) -> Result<kiln_actors::backends::ObjectsUrl, String> {
    text.parse()
        .map_err(|e: kiln_actors::backends::BackendError| e.to_string())
}

#[derive(Debug, Subcommand)]
pub(crate) enum SymbolsCommand {
    /// Resolve addresses in an ELF file to their inline chains (function,
    /// file, line), innermost first, through the ksym format Kiln stores.
    ///
    /// Addresses are the ELF's own virtual addresses (as in its program
    /// headers; for a PIE or shared library, relative to its load base),
    /// in hex with or without 0x. The separate debug file is used when one
    /// is found by build id or .gnu_debuglink.
    Resolve(ResolveArgs),
    /// Upload the symbols of ELF files (executables, libraries, or their
    /// separate debug files) to a running Kiln, so that profiles of them
    /// show function names, files and lines — also profiles already
    /// stored. Files whose symbols the server has are skipped.
    Upload(UploadArgs),
    /// Fill the global symbol store (shared by all tenants) from Debian
    /// debug packages: the build-id debug files in `.deb` files, in
    /// directories of them, or in packages fetched by name with
    /// `apt-get download` (`libc6-dbg`, `libssl3-dbgsym=3.0.15-1`). Files
    /// whose symbols the store has are skipped.
    Crawl(CrawlArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ExportCommand {
    /// Write a GPU timeline (the file libkiln_cuda.so writes when
    /// KILN_CUDA_TIMELINE=path is set) as a Chrome/Perfetto trace JSON that
    /// ui.perfetto.dev opens: kernels per device and stream, their launches
    /// on the CPU threads, grid, block and correlation id.
    Perfetto(PerfettoArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum GpuCommand {
    /// Listen where libkiln_cuda.so sends its snapshots (instead of the
    /// agent) and print what they hold, decoded with the agent's own reader.
    ///
    /// Run the CUDA programs with CUDA_INJECTION64_PATH=…/libkiln_cuda.so
    /// and KILN_GPU_SOCKET set to --socket; each process is one connection.
    /// Every snapshot is printed as it arrives, and at the end, per
    /// connection: pids, snapshot sequences (and gaps), kernels with their
    /// launches, GPU time and launching threads, PC samples per function,
    /// stall reason and SASS instruction (named by nvdisasm from the cubins
    /// the library sent, when nvdisasm is on the PATH or in KILN_NVDISASM),
    /// every library counter, and the stacks the agent would fold them into
    /// (without their CPU part: that comes from the agent's eBPF uprobe).
    ///
    /// Stops once --connections connections have closed, or at --timeout.
    /// Exit status 0 when at least one process connected and every frame
    /// decoded; 1 otherwise, naming the frame and connection at fault (a
    /// connection that sends a bad frame is closed; the others go on).
    Dump(GpuDumpArgs),
}

#[derive(Debug, Args)]
pub(crate) struct GpuDumpArgs {
    /// The socket to listen on (what the CUDA processes have in
    /// KILN_GPU_SOCKET). A stale socket file is replaced; one an agent is
    /// listening on is not.
    #[arg(long, env = "KILN_GPU_SOCKET", default_value = kiln_cuda::socket::DEFAULT_SOCKET_PATH)]
    pub socket: PathBuf,

    /// Also write a JSON summary here, one object per connection (the GPU
    /// check kit's verify.py reads it).
    #[arg(long, value_name = "SUMMARY.json")]
    pub json: Option<PathBuf>,

    /// Accept this many connections (CUDA processes), refuse later ones,
    /// and stop once they have all closed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,

    /// Stop after this long even if connections are still open (`120s`,
    /// `2m`); what arrived until then is reported.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
}

#[derive(Debug, Args)]
pub(crate) struct PerfettoArgs {
    /// The timeline file (JSON lines, one kernel per line).
    #[arg(long, short)]
    pub input: PathBuf,

    /// Where to write the trace (`-` for stdout).
    #[arg(long, short)]
    pub output: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CrawlArgs {
    #[command(flatten)]
    pub server: ServerArg,

    /// The server's admin token (global writes need it). Default: the one
    /// `kiln up` keeps in DATA_DIR/admin-token (KILN_DATA_DIR, or the
    /// user's data directory), when this machine has it.
    #[arg(long, env = "KILN_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Upload even when the global store already has a file's symbols.
    #[arg(long)]
    pub force: bool,

    /// `.deb` files, directories holding `.deb` files, or package names
    /// (`NAME` or `NAME=VERSION`) to fetch with `apt-get download`.
    #[arg(required = true)]
    pub sources: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct UploadArgs {
    #[command(flatten)]
    pub server: ServerArg,

    /// Upload even when the server already has symbols for a file.
    #[arg(long)]
    pub force: bool,

    /// The ELF files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// One JSON object per line and address:
    /// {"addr":"0x…","frames":[{"function":…,"file":…,"line":…},…]}
    /// (function null when unknown, file the full path or null, line 0
    /// when unknown).
    #[arg(long)]
    pub json: bool,

    /// Print linkage (mangled) names as the symbols give them, like
    /// llvm-symbolizer --no-demangle.
    #[arg(long)]
    pub no_demangle: bool,

    /// A root directory of separate debug files (repeatable); default
    /// /usr/lib/debug.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,

    /// The ELF file.
    pub elf: PathBuf,

    /// Addresses, in hex.
    #[arg(required = true, value_parser = parse_hex)]
    pub addrs: Vec<u64>,
}

fn parse_hex(text: &str) -> Result<u64, String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    u64::from_str_radix(digits, 16).map_err(|e| format!("{text:?} is not a hex address: {e}"))
}

#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Address to serve the API and UI on.
    #[arg(long, env = "KILN_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,

    /// Where to serve OTLP profiles over gRPC (ProfilesService/Export:
    /// the OpenTelemetry eBPF profiler, the collector's otlp exporter), or
    /// "off". Default 127.0.0.1:4317, OTLP's port; when another collector
    /// holds it, kiln up says so and runs without gRPC (OTLP/HTTP at
    /// /v1development/profiles is always served).
    #[arg(long, env = "KILN_OTLP_GRPC_LISTEN", value_name = "ADDR|off", value_parser = parse_grpc_listen)]
    pub otlp_grpc_listen: Option<GrpcListen>,

    /// Where Kiln keeps its data (bus log, profile store, objects).
    /// Default: the user's data directory, e.g. ~/.local/share/kiln.
    #[arg(long, env = "KILN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Do not profile this machine. By default `kiln up` also runs the eBPF
    /// agent (needs root, or CAP_BPF and CAP_PERFMON; without them it logs
    /// why and the server runs on).
    #[arg(long, env = "KILN_NO_AGENT")]
    pub no_agent: bool,

    /// Sampling frequency of the local agent, in Hz per CPU.
    #[arg(long, env = "KILN_AGENT_FREQUENCY", default_value_t = kiln_agent::DEFAULT_FREQUENCY_HZ)]
    pub agent_frequency: u64,

    /// Profile only the processes of this cgroup v2 directory and the
    /// cgroups below it (a container, a systemd unit), not the whole
    /// machine: e.g. /sys/fs/cgroup/system.slice/nginx.service.
    #[arg(long, env = "KILN_AGENT_CGROUP", value_name = "PATH")]
    pub agent_cgroup: Option<PathBuf>,

    /// Directory of the built web UI (scripts/build-ui.sh writes it).
    /// Default: frontend/dist of the checkout Kiln was built from.
    #[arg(long, env = "KILN_UI_DIR")]
    pub ui_dir: Option<PathBuf>,

    #[command(flatten)]
    pub debuginfod: DebuginfodArg,

    #[command(flatten)]
    pub admin: AdminTokenArg,

    #[command(flatten)]
    pub quota: QuotaArgs,

    #[command(flatten)]
    pub query_limits: QueryLimitArgs,

    #[command(flatten)]
    pub regions: RegionArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ServerArg {
    /// URL of the Kiln server.
    #[arg(long, env = "KILN_SERVER", default_value = "http://127.0.0.1:7070")]
    pub server: String,

    /// The API key to send (`kiln tenant create` and `kiln key create`
    /// print one). Default: the key a local `kiln up` keeps in
    /// DATA_DIR/api-key, when this machine has it.
    #[arg(long, env = "KILN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// Profile file formats `kiln import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ImportFormat {
    /// Guess from the contents: pprof (gzipped or not), perf script, or
    /// collapsed stacks.
    Auto,
    /// Brendan Gregg's collapsed (folded) stacks: `a;b;c 12` per line.
    Collapsed,
    /// The text of `perf script` after `perf record -g`.
    PerfScript,
    /// pprof's profile.proto, gzipped or not.
    Pprof,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    pub server: ServerArg,

    /// Format of the files.
    #[arg(long, short, value_enum, default_value_t = ImportFormat::Auto)]
    pub format: ImportFormat,

    /// Sampling frequency in Hz, for formats that do not record it (turns
    /// sample counts into CPU time). Default: 100.
    #[arg(long)]
    pub frequency: Option<f64>,

    /// A label to attach to every sample, as NAME=VALUE (repeatable),
    /// e.g. --label host=web-1.
    #[arg(long = "label", short, value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// The files to import.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// `root;…;leaf count` per line, one line per distinct stack.
    Collapsed,
    /// Nested JSON, d3-flamegraph style.
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct FlamegraphArgs {
    #[command(flatten)]
    pub server: ServerArg,

    /// Start of the range: RFC 3339, unix seconds, now or now-<duration>.
    #[arg(long, default_value = "now-1h")]
    pub from: String,

    /// End of the range.
    #[arg(long, default_value = "now")]
    pub to: String,

    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Collapsed)]
    pub format: OutputFormat,

    /// Only samples with this label, as NAME=VALUE (repeatable).
    #[arg(long = "filter", value_parser = parse_label)]
    pub filters: Vec<(String, String)>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn addresses_are_hex_with_or_without_prefix() {
        assert_eq!(parse_hex("0x1f").unwrap(), 0x1f);
        assert_eq!(parse_hex("1F").unwrap(), 0x1f);
        assert!(parse_hex("0xzz").is_err());
        assert!(parse_hex("").is_err());
    }

    /// Guards "kiln query takes --debuginfod-urls as kiln up does" and the
    /// admin token on the roles that serve symbol uploads.
    #[test]
    fn query_and_up_share_the_symbol_flags() {
        let urls = "http://a.example http://b.example";
        let query = Cli::try_parse_from([
            "kiln",
            "query",
            "--store",
            "file:///tmp/kiln-store",
            "--objects",
            "file:///tmp/kiln-objects",
            "--debuginfod-urls",
            urls,
            "--admin-token",
            "0123456789abcdef",
            "--metadata",
            "file:///tmp/kiln-metadata.json",
        ])
        .unwrap();
        let Command::Query(query) = query.command else {
            panic!("not a query command");
        };
        assert_eq!(query.debuginfod.debuginfod_urls.as_deref(), Some(urls));
        assert!(query.debuginfod.symbolizer_config().debuginfod.is_some());
        assert!(query.admin.token().unwrap().is_some());

        let up = Cli::try_parse_from(["kiln", "up", "--debuginfod-urls", urls]).unwrap();
        let Command::Up(up) = up.command else {
            panic!("not an up command");
        };
        assert_eq!(up.debuginfod.debuginfod_urls.as_deref(), Some(urls));
        let short = AdminTokenArg {
            admin_token: Some("short".into()),
            metrics_tenants: MetricsTenants::Hashed,
        };
        assert!(short.token().is_err());
        assert_eq!(up.admin.metrics_tenants, MetricsTenants::Hashed);
        let up = Cli::try_parse_from(["kiln", "up", "--metrics-tenants", "operator-only"]).unwrap();
        let Command::Up(up) = up.command else {
            panic!("not an up command");
        };
        assert_eq!(up.admin.metrics_tenants, MetricsTenants::OperatorOnly);
    }

    #[test]
    fn labels_need_a_name() {
        assert!(parse_label("=x").is_err());
        assert!(parse_label("x").is_err());
        assert_eq!(parse_label("a=b=c").unwrap(), ("a".into(), "b=c".into()));
    }
}

/// `kiln up --otlp-grpc-listen`: an address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrpcListen {
    /// Not served.
    Off,
    /// Served there.
    At(SocketAddr),
}

/// `kiln up`'s gRPC address when none is given: OTLP's own port, on
/// loopback as the rest of `kiln up`.
pub(crate) const DEFAULT_OTLP_GRPC_LISTEN: &str = "127.0.0.1:4317";

fn parse_grpc_listen(text: &str) -> Result<GrpcListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(GrpcListen::Off);
    }
    text.parse().map(GrpcListen::At).map_err(|_| {
        format!("{text:?} is neither an address (HOST:PORT, e.g. 127.0.0.1:4317) nor \"off\"")
    })
}
