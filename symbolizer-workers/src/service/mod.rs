//! The symbolizer worker: an actix actor that answers batched lookups of
//! addresses in files, from the object store's symbol files (kept loaded
//! in a cache bounded by bytes), with debuginfod as a fallback.
//!
//! It runs on an arbiter (thread) of its own, so that lookups never hold
//! up the actor that asked. Several lookups may be in flight at once:
//! each [`Resolve`] runs as its own future over shared state.
//!
//! # Examples
//!
//! ```no_run
//! # async fn example(objects: std::sync::Arc<dyn kiln_storage::ObjectStore>) -> Result<(), Box<dyn std::error::Error>> {
//! use kiln_symbolizer_workers::{FileAddrs, Resolve, Symbolizer, SymbolizerConfig};
//!
//! let symbolizer = Symbolizer::spawn(objects, SymbolizerConfig::default());
//! let answer = symbolizer
//!     .send(Resolve {
//!         tenant: "acme".into(),
//!         files: vec![FileAddrs { file: kiln_model::FileId(7), build_id: None, addrs: vec![0x1130] }],
//!         debuginfod_wait: None,
//!     })
//!     .await??;
//! if let Some(chains) = &answer[0] {
//!     println!("{:?}", chains[0]); // outermost function first
//! }
//! # Ok(()) }
//! ```

mod expiring;
mod frames;
mod loader;

pub use frames::{FrameAddr, SymbolizeError, symbolize_frames};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, Arbiter, Context, Handler, Message, ResponseFuture};
use kiln_model::FileId;
use kiln_storage::{ObjectStore, StoreError};

use crate::debuginfod::Debuginfod;
use crate::ksym::{Ksym, KsymFile};
use loader::Loader;

/// How the symbolizer loads and caches.
#[derive(Debug, Clone)]
pub struct SymbolizerConfig {
    /// Decompressed symbol bytes kept loaded (all files together).
    pub cache_bytes: u64,
    /// How long a file without symbols is believed to have none (an
    /// upload tells the symbolizer at once; this bounds other ways).
    pub missing_ttl: Duration,
    /// Where to fetch symbols of files that have none; `None`: nowhere.
    pub debuginfod: Option<Debuginfod>,
    /// How long a lookup waits for the debuginfod fetches it started (all
    /// of them together) before answering without (they go on in the
    /// background).
    pub debuginfod_wait: Duration,
    /// How long a build id no server had is not asked for again.
    pub debuginfod_missing_ttl: Duration,
    /// debuginfod fetches running at once.
    pub debuginfod_concurrency: usize,
}

impl Default for SymbolizerConfig {
    fn default() -> Self {
        Self {
            cache_bytes: 512 << 20,
            missing_ttl: Duration::from_secs(5),
            debuginfod: None,
            debuginfod_wait: Duration::from_secs(2),
            debuginfod_missing_ttl: Duration::from_secs(600),
            debuginfod_concurrency: 4,
        }
    }
}

impl SymbolizerConfig {
    /// Timeout of one debuginfod request (a large debug file must fit).
    pub const DEBUGINFOD_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

    /// The defaults, asking the debuginfod servers `urls` (none: no
    /// fallback).
    pub fn with_debuginfod(urls: Vec<String>) -> Self {
        Self {
            debuginfod: Debuginfod::new(urls, Self::DEBUGINFOD_REQUEST_TIMEOUT),
            ..Self::default()
        }
    }

    /// The defaults, asking the debuginfod servers listed in the
    /// `DEBUGINFOD_URLS` environment variable (space separated), as every
    /// elfutils-based tool does.
    pub fn from_env() -> Self {
        let urls = std::env::var("DEBUGINFOD_URLS").unwrap_or_default();
        Self::with_debuginfod(Debuginfod::parse_urls(&urls))
    }
}

/// One level of an inline chain, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedFrame {
    /// Function name (demangled), when known.
    pub function: Option<String>,
    /// Source file path, when known.
    pub file: Option<String>,
    /// Source line; 0 when unknown.
    pub line: u32,
}

impl From<ResolvedFrame> for kiln_model::Symbol {
    /// One level of a chain as stores keep it: a function the symbols do
    /// not name (they cover the address with lines only) as an empty name.
    fn from(frame: ResolvedFrame) -> Self {
        kiln_model::Symbol {
            function: frame.function.unwrap_or_default(),
            file: frame.file,
            line: frame.line,
        }
    }
}

/// The inline chain of each of `addrs` in `ksym`, outermost first (empty
/// where no range covers the address), with owned names: what a
/// [`Resolve`] answers for one file.
pub fn resolve_chains(ksym: &Ksym<'_>, addrs: &[u64]) -> Vec<Vec<ResolvedFrame>> {
    let mut chains = vec![Vec::new(); addrs.len()];
    ksym.lookup_many(addrs, |i, frames| {
        // ksym answers innermost first; stacks are root first.
        chains[i] = frames
            .iter()
            .rev()
            .map(|f| ResolvedFrame {
                function: f.function().map(Cow::into_owned),
                file: f.path(),
                line: f.line,
            })
            .collect();
    });
    chains
}

/// Addresses to resolve in one file.
#[derive(Debug, Clone)]
pub struct FileAddrs {
    /// The file.
    pub file: FileId,
    /// Its GNU build id in hex, when known (lets debuginfod be asked).
    pub build_id: Option<String>,
    /// File-relative addresses.
    pub addrs: Vec<u64>,
}

/// For each file of `files`, in order: `None` when it has no symbols,
/// else per address its inline chain, **outermost first** (empty where
/// the symbols do not cover the address).
pub type Resolved = Vec<Option<Vec<Vec<ResolvedFrame>>>>;

/// Resolves addresses of a tenant's files.
#[derive(Debug, Message)]
#[rtype(result = "Result<Resolved, StoreError>")]
pub struct Resolve {
    /// Whose files: the tenant's own symbols come before global ones.
    pub tenant: String,
    /// The files and their addresses.
    pub files: Vec<FileAddrs>,
    /// How long this lookup waits for the debuginfod fetches it starts;
    /// `None`: [`SymbolizerConfig::debuginfod_wait`]. The ingest pipeline
    /// passes zero: it never waits for the network, the fetches go on in
    /// the background and the symbols they store serve later frames and
    /// queries.
    pub debuginfod_wait: Option<Duration>,
}

/// New symbols were stored for a file: forget what is cached of it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SymbolsStored {
    /// Whose symbols; `None` for the global store (every tenant's view of
    /// the file changes).
    pub tenant: Option<String>,
    /// The file.
    pub file: FileId,
}

/// The symbolizer worker actor.
#[derive(Debug)]
pub struct Symbolizer {
    loader: Arc<Loader>,
}

impl Symbolizer {
    /// A symbolizer over `objects`; start it with [`Actor::start`] or
    /// [`spawn`](Self::spawn).
    pub fn new(objects: Arc<dyn ObjectStore>, config: SymbolizerConfig) -> Self {
        Self {
            loader: Arc::new(Loader::new(objects, config)),
        }
    }

    /// Starts a symbolizer on an arbiter of its own. Must be called inside
    /// an actix system.
    pub fn spawn(objects: Arc<dyn ObjectStore>, config: SymbolizerConfig) -> Addr<Symbolizer> {
        let arbiter = Arbiter::new();
        Symbolizer::start_in_arbiter(&arbiter.handle(), move |_| Symbolizer::new(objects, config))
    }
}

impl Actor for Symbolizer {
    type Context = Context<Self>;
}

impl Handler<Resolve> for Symbolizer {
    type Result = ResponseFuture<Result<Resolved, StoreError>>;

    fn handle(&mut self, msg: Resolve, _: &mut Context<Self>) -> Self::Result {
        let loader = Arc::clone(&self.loader);
        Box::pin(async move {
            let mut resolved = Vec::with_capacity(msg.files.len());
            let deadline = loader.debuginfod_deadline(msg.debuginfod_wait);
            for file in &msg.files {
                let loaded = loader
                    .load(&msg.tenant, file.file, file.build_id.as_deref(), deadline)
                    .await?;
                let ksym = loaded.as_deref().map(KsymFile::ksym);
                resolved.push(ksym.map(|ksym| resolve_chains(&ksym, &file.addrs)));
            }
            Ok(resolved)
        })
    }
}

impl Handler<SymbolsStored> for Symbolizer {
    type Result = ();

    fn handle(&mut self, msg: SymbolsStored, _: &mut Context<Self>) {
        self.loader.forget(msg.tenant.as_deref(), msg.file);
    }
}
