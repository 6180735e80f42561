//! Kiln's actors and HTTP API: the ingest pipeline (`BusConsumer`: decode,
//! ahead on the blocking pool, then dedup → symbolize → write → commit, in
//! order), the query cluster (`QueryCoordinator` over `Aggregator`s) and
//! the actix-web routes that front them. [`start_embedded`] wires them to
//! the embedded bus and stores in one process, which is what `kiln up`
//! runs; [`roles`] starts the same parts as separate processes (gateway,
//! worker, query node) on the engines [`backends`] opens by URL (Kafka,
//! PostgreSQL, S3). Every process serves its metrics for operators at
//! `GET /metrics` ([`telemetry`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use kiln_actors::{EmbeddedOptions, start_embedded};
//!
//! let options = EmbeddedOptions::new("/tmp/kiln".into(), "127.0.0.1:7070".parse()?);
//! let running = start_embedded(options).await?; // inside an actix system
//! println!("serving on http://{}", running.local_addr);
//! running.server.await?;
//! # Ok(()) }
//! ```

mod admin_token;
pub mod backends;
pub mod envelope;
mod fast_hash;
pub mod global_symbols;
pub mod http;
pub mod ingest;
pub mod otlp_grpc;
pub mod query;
mod regions;
pub mod retention;
pub mod roles;
pub mod rollup;
mod server;
pub mod telemetry;

/// Entry points for the fuzz targets (`fuzz/`) into decoders that are
/// otherwise crate-private. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    /// Decodes a peer's scan (`POST /internal/v1/scan`'s body,
    /// `query/wire.rs`): its scope as `tenant/project`, or the error.
    pub fn decode_scan(bytes: &[u8]) -> Result<String, String> {
        crate::query::decode_scan(bytes)
            .map(|scan| {
                format!(
                    "{}/{}",
                    scan.range.scope.tenant(),
                    scan.range.scope.project()
                )
            })
            .map_err(|e| e.to_string())
    }
}

pub use server::{
    ADMIN_TOKEN_FILE, API_KEY_FILE, BUS_KEY_FILE, DEFAULT_PROJECT, DEFAULT_TENANT, EmbeddedOptions,
    METADATA_FILE, Running, ServerError, start_embedded,
};
