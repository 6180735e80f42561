//! `kiln gateway`, `kiln worker`, `kiln query` and `kiln store migrate`:
//! the processes of a distributed deployment, on backends named by URL.

use std::sync::Arc;

use anyhow::Context;
use kiln_actors::backends;
use kiln_actors::ingest::PipelineConfig;
use kiln_actors::query::{ClusterSecret, PeerOptions, QueryNodes};
use kiln_actors::roles::{self, HttpOptions};
use kiln_ingest_bus::Bus;
use kiln_storage::{ObjectStore, ProfileStore};

use crate::cli::{GatewayArgs, MigrateArgs, PeersArgs, QueryArgs, StoresArgs, WorkerArgs};

pub(crate) fn gateway(args: GatewayArgs) -> anyhow::Result<()> {
    let query_nodes = match args.cluster_secret {
        // clap makes --query-nodes and --cluster-secret require each other.
        None => None,
        Some(secret) => Some(QueryNodes {
            urls: args.query_nodes,
            secret: ClusterSecret::new(secret).context("--cluster-secret")?,
        }),
    };
    actix_rt::System::new().block_on(async move {
        let bus = open_bus(&args.bus.bus).await?;
        let bus_key = args.bus_key.key()?;
        let (store, objects) = open_stores(&args.stores).await?;
        let metadata = args.metadata.metadata.open().await?;
        let mut http = HttpOptions::new(args.listen);
        http.admin_token = args.admin.token()?;
        http.metrics_tenants = args.admin.metrics_tenants.into();
        http.quota = args.quota.defaults();
        http.regions = args.regions.regions()?;
        http.otlp_grpc_listen = args.otlp_grpc_listen;
        let running =
            roles::start_gateway(bus, store, objects, metadata, query_nodes, http, bus_key)
                .await
                .context("starting the gateway")?;
        println!("Kiln gateway is up: http://{}/", running.local_addr);
        println!("  bus:     {}", args.bus.bus);
        if let Some(grpc) = &running.otlp_grpc {
            println!("  otlp:    grpc {}", grpc.local_addr);
        }
        let served = running.server.await.context("serving HTTP");
        if let Some(grpc) = running.otlp_grpc {
            grpc.stop();
        }
        served
    })
}

pub(crate) fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    crate::allocator::keep_freed_memory();
    actix_rt::System::new().block_on(async move {
        let bus = open_bus(&args.bus.bus).await?;
        let bus_key = args.bus_key.key()?;
        let (store, objects) = open_stores(&args.stores).await?;
        let running = roles::start_worker(
            bus,
            store,
            objects,
            args.debuginfod.symbolizer_config(),
            bus_key,
            args.listen,
            PipelineConfig {
                linger: args.ingest_linger,
                ..PipelineConfig::default()
            },
        )
        .await
        .context("starting the worker")?;
        println!("Kiln worker is up: http://{}/", running.local_addr);
        println!("  bus:     {}", args.bus.bus);
        println!("  store:   {}", args.stores.store);
        println!("  metrics: http://{}/metrics", running.local_addr);
        // The server stops on SIGINT or SIGTERM. Nothing needs flushing on
        // the way out: what was not committed is read again by the worker
        // that takes over the partitions.
        running.server.await.context("serving HTTP")
    })
}

pub(crate) fn query(args: QueryArgs) -> anyhow::Result<()> {
    let peers = peer_options(args.peers)?;
    actix_rt::System::new().block_on(async move {
        let (store, objects) = open_stores(&args.stores).await?;
        let metadata = args.metadata.metadata.open().await?;
        let mut http = HttpOptions::new(args.listen);
        let aggregators = args.aggregators.unwrap_or(http.workers).max(1);
        http.workers = http.workers.max(1);
        http.admin_token = args.admin.token()?;
        http.metrics_tenants = args.admin.metrics_tenants.into();
        http.quota = args.quota.defaults();
        http.query = args.query_limits.query_options();
        http.rollup_every = args.query_limits.rollup_every();
        http.regions = args.regions.regions()?;
        http.global_symbols_every = args.regions.global_symbols_every;
        let symbolizer = args.debuginfod.symbolizer_config();
        let running = roles::start_query(
            store,
            objects,
            metadata,
            aggregators,
            symbolizer,
            peers.clone(),
            http,
        )
        .await
        .context("starting the query node")?;
        println!("Kiln query node is up: http://{}/", running.local_addr);
        println!("  store:   {}", args.stores.store);
        if let Some(peers) = peers {
            println!(
                "  peers:   {} (this node: {}, served on {})",
                peers.peers.join(","),
                peers.advertise,
                running
                    .peer_addr
                    .map_or_else(String::new, |a| a.to_string())
            );
        }
        running.server.await.context("serving HTTP")
    })
}

fn peer_options(args: PeersArgs) -> anyhow::Result<Option<PeerOptions>> {
    let (Some(advertise), Some(secret), Some(listen)) =
        (args.advertise, args.cluster_secret, args.peer_listen)
    else {
        // clap makes --peers require all three.
        return Ok(None);
    };
    let options = PeerOptions {
        listen,
        advertise,
        peers: args.peers,
        secret: ClusterSecret::new(secret).context("--cluster-secret")?,
        timeout: args.peer_timeout,
    };
    options.validate().context("--peers or --advertise")?;
    Ok(Some(options))
}

pub(crate) fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    actix_rt::System::new().block_on(async move {
        args.store.migrate().await?;
        println!("{}: schema is up to date", args.store);
        Ok(())
    })
}

async fn open_bus(url: &backends::BusUrl) -> anyhow::Result<Arc<dyn Bus>> {
    Ok(backends::open_bus(url).await?)
}

async fn open_stores(
    args: &StoresArgs,
) -> anyhow::Result<(Arc<dyn ProfileStore>, Arc<dyn ObjectStore>)> {
    Ok((args.store.open().await?, args.objects.open()?))
}
