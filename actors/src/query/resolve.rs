//! Turning stack ids into frames a person can read.
//!
//! Address frames the ingest pipeline stored with their symbols are
//! labelled from those (when they have source lines: `is_final`); the
//! others are symbolized here, in one batched lookup per query, so that
//! frames that arrived before their symbols show names once the symbols
//! are uploaded. What is found is written back to the store, so that the
//! lookup is made once per frame, not once per query node and restart.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use actix::Addr;
use kiln_model::{Executable, FileId, Frame, FrameId, FrameKind, StackId, Symbol};
use kiln_storage::{ProfileStore, StoreError, StoredFrame};
use kiln_symbolizer_workers::{
    FrameAddr, ResolvedFrame, Symbolizer, SymbolsStored, symbolize_frames,
};
use tracing::{debug, warn};

use super::QueryError;
use super::cache::BoundedCache;
use crate::fast_hash::{FastMap, FastSet};
use crate::telemetry::QueryMetrics;

/// A frame as shown: kind, name and where it lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameLabel {
    /// What kind of code.
    pub kind: FrameKind,
    /// The function name, or `module+0xaddr` for an unsymbolized address.
    pub name: String,
    /// The binary or module.
    pub module: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line; 0 when unknown.
    pub line: u32,
}

impl FrameLabel {
    fn synthetic(name: String) -> Self {
        Self {
            kind: FrameKind::Label,
            name,
            module: None,
            file: None,
            line: 0,
        }
    }
}

/// Entries kept per cache; stacks and frames are content-addressed, so a
/// cached entry never goes stale — except the label of an address frame
/// without symbols, which is why those are cached as [`Entry::Address`]
/// and symbolized again on each query (cheaply: the symbolizer remembers
/// files without symbols for a few seconds).
const CACHE_SIZE: usize = 1 << 20;
/// Ids asked of the store in one call.
const CHUNK: usize = 4096;

/// The labels of one frame, root first: an address frame becomes its
/// inline chain, outermost function first.
pub(crate) type Labels = Arc<[Arc<FrameLabel>]>;

/// A cached frame.
#[derive(Debug, Clone)]
enum Entry {
    /// Final labels: a named frame, or an address with symbols.
    Labels(Labels),
    /// An address frame whose file had no symbols when last looked at.
    Address(Address),
}

/// An address frame, with the name and build id of its executable.
#[derive(Debug, Clone)]
struct Address {
    kind: FrameKind,
    file_id: FileId,
    addr: u64,
    module: Option<String>,
    /// In hex, as the agent reported it: lets the symbolizer ask
    /// debuginfod for the file's symbols.
    build_id: Option<String>,
}

impl Address {
    /// The frame it stands for.
    fn frame(&self) -> Frame {
        Frame::Address {
            kind: self.kind,
            file_id: self.file_id,
            addr: self.addr,
        }
    }
}

/// Cached stacks and frames, keyed by tenant and id.
type StackCache = BoundedCache<(String, StackId), Arc<[FrameId]>>;
type FrameCache = BoundedCache<(String, FrameId), Entry>;

/// Resolves stacks to frame labels, with caches shared by all queries.
#[derive(Debug)]
pub(crate) struct Resolver {
    store: Arc<dyn ProfileStore>,
    symbolizer: Addr<Symbolizer>,
    stacks: Mutex<StackCache>,
    frames: Mutex<FrameCache>,
}

/// Resolved stacks: each stack's frame ids and each frame's labels, kept
/// apart rather than expanded into a list of labels per stack, so that a
/// view does its work once per distinct frame (tens of thousands) and only
/// a lookup per frame of each stack (millions, for a million-node graph).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// Each stack's frames, root first. A stack the store lacks has one
    /// placeholder frame.
    pub stacks: FastMap<StackId, Arc<[FrameId]>>,
    /// The labels of every frame of those stacks (an address frame with
    /// symbols has one label per inline level, outermost first).
    pub labels: FastMap<FrameId, Labels>,
}

impl Resolved {
    /// The frames of `stack`, root first (none for a stack that was not
    /// resolved).
    pub(crate) fn frames(&self, stack: &StackId) -> &[FrameId] {
        self.stacks.get(stack).map_or(&[], |frames| frames)
    }

    /// The labels of `frame`, outermost first.
    pub(crate) fn labels(&self, frame: &FrameId) -> &[Arc<FrameLabel>] {
        self.labels.get(frame).map_or(&[], |labels| labels)
    }
}

impl Resolver {
    /// A resolver reading `store`, whose stack and frame caches count
    /// their lookups in `metrics`.
    pub(crate) fn new(
        store: Arc<dyn ProfileStore>,
        symbolizer: Addr<Symbolizer>,
        metrics: &QueryMetrics,
    ) -> Self {
        Self {
            store,
            symbolizer,
            stacks: Mutex::new(BoundedCache::counted(CACHE_SIZE, metrics.stacks.clone())),
            frames: Mutex::new(BoundedCache::counted(CACHE_SIZE, metrics.frames.clone())),
        }
    }

    /// Symbols for `file` were stored (perhaps better ones than before:
    /// the debug file after the stripped binary). Its loaded symbols and
    /// the labels made from them are dropped; the frame cache is cleared
    /// whole, since it is not indexed by file and uploads are rare.
    /// `tenant` is `None` for the global store.
    pub(crate) fn symbols_stored(&self, tenant: Option<&str>, file: FileId) {
        // Handled before any lookup sent after it: one mailbox.
        self.symbolizer.do_send(SymbolsStored {
            tenant: tenant.map(str::to_owned),
            file,
        });
        self.frames.lock().expect("frame cache lock").clear();
    }

    /// Resolves `ids`. A stack or frame the store does not have (an agent
    /// believed it was sent earlier, and it was not) still shows, as a
    /// named placeholder, so that totals stay right.
    pub(crate) async fn resolve(
        &self,
        tenant: &str,
        ids: impl IntoIterator<Item = StackId>,
    ) -> Result<Resolved, QueryError> {
        let stacks = self.stacks_of(tenant, ids).await?;
        let frame_ids: FastSet<FrameId> = stacks
            .values()
            .flatten()
            .flat_map(|f| f.iter().copied())
            .collect();
        let mut resolved = Resolved {
            stacks: FastMap::with_capacity_and_hasher(stacks.len(), Default::default()),
            labels: self.frames_of(tenant, frame_ids).await?,
        };
        for (id, frames) in stacks {
            let frames = frames.unwrap_or_else(|| {
                // A frame of its own (content-addressed like any other),
                // so that views need no special case.
                let name = format!("[unknown stack {id}]");
                let placeholder = Frame::Named {
                    kind: FrameKind::Label,
                    function: name.clone(),
                    module: None,
                    file: None,
                    line: 0,
                }
                .id();
                let label: Labels = Arc::new([Arc::new(FrameLabel::synthetic(name))]);
                resolved.labels.insert(placeholder, label);
                Arc::new([placeholder]) as Arc<[FrameId]>
            });
            resolved.stacks.insert(id, frames);
        }
        Ok(resolved)
    }

    async fn stacks_of(
        &self,
        tenant: &str,
        ids: impl IntoIterator<Item = StackId>,
    ) -> Result<FastMap<StackId, Option<Arc<[FrameId]>>>, StoreError> {
        let mut found = FastMap::default();
        let mut missing = Vec::new();
        {
            let cache = self.stacks.lock().expect("stack cache lock");
            for id in ids {
                match cache.get(&(tenant.to_owned(), id)) {
                    Some(frames) => {
                        found.insert(id, Some(frames.clone()));
                    }
                    None => missing.push(id),
                }
            }
            cache.record(found.len(), missing.len());
        }
        for chunk in missing.chunks(CHUNK) {
            let loaded = self.store.get_stacks(tenant, chunk).await?;
            let mut cache = self.stacks.lock().expect("stack cache lock");
            for (&id, frames) in chunk.iter().zip(loaded) {
                match frames {
                    Some(frames) => {
                        let frames: Arc<[FrameId]> = frames.into();
                        cache.insert((tenant.to_owned(), id), frames.clone());
                        found.insert(id, Some(frames));
                    }
                    // Not cached: it may arrive later.
                    None => {
                        found.insert(id, None);
                    }
                }
            }
        }
        Ok(found)
    }

    async fn frames_of(
        &self,
        tenant: &str,
        ids: FastSet<FrameId>,
    ) -> Result<FastMap<FrameId, Labels>, QueryError> {
        let mut found = FastMap::with_capacity_and_hasher(ids.len(), Default::default());
        let mut addresses = Vec::new();
        let mut missing = Vec::new();
        {
            let cache = self.frames.lock().expect("frame cache lock");
            for id in ids {
                match cache.get(&(tenant.to_owned(), id)) {
                    Some(Entry::Labels(labels)) => {
                        found.insert(id, labels.clone());
                    }
                    Some(Entry::Address(a)) => addresses.push((id, a.clone())),
                    None => missing.push(id),
                }
            }
            cache.record(found.len() + addresses.len(), missing.len());
        }
        for chunk in missing.chunks(CHUNK) {
            let rows = self.store.get_frames(tenant, chunk).await?;
            let executables = self
                .executables(tenant, rows.iter().flatten().map(|r| &r.frame))
                .await?;
            let mut cache = self.frames.lock().expect("frame cache lock");
            for (&id, row) in chunk.iter().zip(rows) {
                let Some(StoredFrame { frame, symbols, .. }) = row else {
                    let label = FrameLabel::synthetic(format!("[unknown frame {id}]"));
                    found.insert(id, Arc::new([Arc::new(label)]) as _);
                    continue;
                };
                let labels: Labels = match frame {
                    Frame::Address {
                        kind,
                        file_id,
                        addr,
                    } => {
                        let executable = executables.get(&file_id);
                        let address = Address {
                            kind,
                            file_id,
                            addr,
                            module: executable.map(|e| e.name.clone()),
                            build_id: executable.and_then(|e| e.build_id.clone()),
                        };
                        if !is_final(&symbols) {
                            addresses.push((id, address));
                            continue;
                        }
                        stored_labels(&address, symbols)
                    }
                    frame => Arc::new([Arc::new(named_label(frame))]) as _,
                };
                cache.insert((tenant.to_owned(), id), Entry::Labels(labels.clone()));
                found.insert(id, labels);
            }
        }
        found.extend(self.symbolize(tenant, addresses).await?);
        Ok(found)
    }

    /// Labels for address frames, named in one batched lookup
    /// ([`symbolize_frames`], as ingest names them). Frames whose file has symbols are cached for good;
    /// the others keep their address entry, to be tried again by a later
    /// query.
    async fn symbolize(
        &self,
        tenant: &str,
        addresses: Vec<(FrameId, Address)>,
    ) -> Result<Vec<(FrameId, Labels)>, QueryError> {
        let frames = addresses.into_iter().map(|(id, a)| FrameAddr {
            file: a.file_id,
            build_id: a.build_id.clone(),
            addr: a.addr,
            key: (id, a),
        });
        let named = symbolize_frames(&self.symbolizer, tenant, frames, None).await?;
        let mut out = Vec::with_capacity(named.len());
        let mut write_back = Vec::new();
        let mut cache = self.frames.lock().expect("frame cache lock");
        for ((id, a), chain) in named {
            match chain {
                Some(chain) => {
                    let symbols: Vec<Symbol> = chain.iter().cloned().map(Symbol::from).collect();
                    if is_final(&symbols) {
                        write_back.push(StoredFrame {
                            id,
                            frame: a.frame(),
                            symbols,
                        });
                    }
                    let labels = symbolized_labels(&a, chain);
                    cache.insert((tenant.to_owned(), id), Entry::Labels(labels.clone()));
                    out.push((id, labels));
                }
                None => {
                    let label = Arc::new(address_label(&a));
                    cache.insert((tenant.to_owned(), id), Entry::Address(a));
                    out.push((id, Arc::new([label]) as _));
                }
            }
        }
        drop(cache);
        self.write_back(tenant, write_back);
        Ok(out)
    }

    /// Stores frames with the symbols a query found for them (they were
    /// written before their file's symbols arrived), so that the next
    /// query node to read them — after a restart, on another node, past
    /// this cache — reads names instead of loading symbol files. In the
    /// background: the query does not wait, and a failed write only costs
    /// a later lookup. (A frame row is keyed by its id, so writing it
    /// again replaces it.)
    fn write_back(&self, tenant: &str, frames: Vec<StoredFrame>) {
        if frames.is_empty() {
            return;
        }
        let store = self.store.clone();
        let tenant = tenant.to_owned();
        tokio::spawn(async move {
            match store.put_frames(&tenant, &frames).await {
                Ok(()) => debug!(tenant, frames = frames.len(), "symbols written back"),
                Err(e) => warn!(tenant, error = %e, "writing symbols back failed"),
            }
        });
    }

    /// The executables that address frames point into, by file id.
    async fn executables(
        &self,
        tenant: &str,
        frames: impl Iterator<Item = &Frame>,
    ) -> Result<HashMap<FileId, Executable>, StoreError> {
        let files: Vec<FileId> = frames
            .filter_map(|f| match f {
                Frame::Address { file_id, .. } => Some(*file_id),
                Frame::Named { .. } => None,
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if files.is_empty() {
            return Ok(HashMap::new());
        }
        let executables = self.store.get_executables(tenant, &files).await?;
        Ok(files
            .into_iter()
            .zip(executables)
            .filter_map(|(id, e)| e.map(|e| (id, e)))
            .collect())
    }
}

fn named_label(frame: Frame) -> FrameLabel {
    match frame {
        Frame::Named {
            kind,
            function,
            module,
            file,
            line,
        } => FrameLabel {
            kind,
            name: function,
            module,
            file,
            line,
        },
        Frame::Address {
            kind,
            file_id,
            addr,
        } => address_label(&Address {
            kind,
            file_id,
            addr,
            module: None,
            build_id: None,
        }),
    }
}

/// `module+0xaddr` (or the file id when the executable is unknown).
fn address_label(a: &Address) -> FrameLabel {
    let name = match &a.module {
        Some(m) => format!("{m}+{:#x}", a.addr),
        None => format!("{}+{:#x}", a.file_id, a.addr),
    };
    FrameLabel {
        kind: a.kind,
        name,
        module: a.module.clone(),
        file: None,
        line: 0,
    }
}

/// Whether the symbols a frame was stored with are as good as symbols get,
/// so the query uses them without a lookup: they have source lines.
/// Names-only symbols (a stripped binary's, uploaded by the agent) are
/// looked up again, because the debug file may have been uploaded since.
fn is_final(symbols: &[Symbol]) -> bool {
    symbols.iter().any(|s| s.line != 0)
}

/// The labels of an address frame stored with its symbols (outermost
/// first), as [`symbolized_labels`] makes them from a lookup.
fn stored_labels(a: &Address, symbols: Vec<Symbol>) -> Labels {
    let chain = symbols
        .into_iter()
        .map(|s| ResolvedFrame {
            function: Some(s.function).filter(|f| !f.is_empty()),
            file: s.file,
            line: s.line,
        })
        .collect();
    symbolized_labels(a, chain)
}

/// One label per inline level (outermost first); the address label when
/// the symbols do not cover the address.
fn symbolized_labels(a: &Address, chain: Vec<ResolvedFrame>) -> Labels {
    if chain.is_empty() {
        return Arc::new([Arc::new(address_label(a))]);
    }
    chain
        .into_iter()
        .map(|s| {
            Arc::new(FrameLabel {
                kind: a.kind,
                name: s.function.unwrap_or_else(|| address_label(a).name),
                module: a.module.clone(),
                file: s.file,
                line: s.line,
            })
        })
        .collect()
}
