//! OTLP profiles over gRPC: `ProfilesService/Export` on a listener of its
//! own (`--otlp-grpc-listen`), what the OpenTelemetry eBPF profiler and
//! the collector's `otlp` exporter send.
//!
//! A request takes the OTLP/HTTP route's path from the bytes on: the same
//! credential check (an ingest key in the `authorization` metadata), the
//! same region forwarding, tenant quotas (bytes as sent, gRPC framing and
//! compression included; sample rows), conversion and publishing
//! ([`crate::http::otlp::convert_and_publish`]), and the same refusal
//! metrics. Errors are gRPC statuses with a `RetryInfo` where a retry
//! helps ([`status`]).
//!
//! The server is tonic's, on a multi-threaded tokio runtime of its own on
//! a dedicated thread: actix's HTTP server speaks HTTP/2 only behind TLS
//! and cannot send the trailers gRPC answers with. It serves cleartext
//! HTTP/2 (h2c); TLS ends at a load balancer in front, as for HTTP.

mod codec;
mod service;
mod status;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::http::{AppState, IngestState};

/// How long a stopping listener waits for calls in flight.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take, conversion and publishing included.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Calls served at once on one connection (a collector multiplexes).
const CALLS_PER_CONNECTION: usize = 32;
/// How often an idle connection is pinged, so dead senders are noticed.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// A running gRPC listener. Dropping it stops the listener without
/// waiting; [`OtlpGrpc::stop`] waits for calls in flight.
#[derive(Debug)]
pub struct OtlpGrpc {
    /// Where it listens.
    pub local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpGrpc {
    /// Stops accepting calls and waits (up to 5 s) for those in flight.
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for OtlpGrpc {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `listen` and serves `ProfilesService/Export` there for the
/// process whose HTTP routes have `state` and `ingest`.
pub fn serve(
    listen: SocketAddr,
    state: AppState,
    ingest: IngestState,
) -> std::io::Result<OtlpGrpc> {
    // Bound here, so that a taken port is the caller's error at start-up.
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let local_addr = listener.local_addr()?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("kiln-otlp-grpc")
        .enable_all()
        .build()?;
    let (stop, stopped) = oneshot::channel();
    let service = service::ProfilesService::new(state, ingest);
    let thread = std::thread::Builder::new()
        .name("kiln-otlp-grpc".to_owned())
        .spawn(move || {
            runtime.block_on(run(listener, service, stopped));
            runtime.shutdown_timeout(SHUTDOWN_TIMEOUT);
        })?;
    info!(%local_addr, "serving OTLP profiles over gRPC");
    Ok(OtlpGrpc {
        local_addr,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Serves until `stopped`, then lets calls in flight finish for up to
/// [`SHUTDOWN_TIMEOUT`].
async fn run(
    listener: std::net::TcpListener,
    service: service::ProfilesService,
    stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            warn!(error = %e, "the OTLP gRPC listener cannot start");
            return;
        }
    };
    let (drain, draining) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .timeout(CALL_TIMEOUT)
        .concurrency_limit_per_connection(CALLS_PER_CONNECTION)
        .http2_keepalive_interval(Some(KEEPALIVE))
        .add_service(service)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            async {
                let _ = draining.await;
            },
        );
    tokio::pin!(server);
    tokio::select! {
        served = &mut server => {
            if let Err(e) = served {
                warn!(error = %e, "the OTLP gRPC listener failed");
            }
            return;
        }
        _ = stopped => {}
    }
    let _ = drain.send(());
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, server)
        .await
        .is_err()
    {
        warn!("OTLP gRPC calls still in flight after 5 s were dropped");
    }
}
