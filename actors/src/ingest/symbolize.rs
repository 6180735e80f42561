//! The symbolize stage, between `Deduper` and `Writer`: the address
//! frames about to be written whose files already have symbols get their
//! inline chains, so that their rows carry them (DESIGN.md's `frames …
//! | symbol list`) and queries read names instead of looking them up.
//!
//! Ingest never waits for symbols that are not there. Each poll makes one
//! batched lookup per tenant through the [`Symbolizer`] (the one the query
//! side uses, where both run in one process), which answers from the
//! symbol files it has loaded or can read from the object store; it waits
//! for no debuginfod fetch (those it starts go on in the background), and
//! the whole lookup is cut off after [`LOOKUP_WAIT`]. Frames whose files
//! have no symbols yet, and all frames of a lookup that failed or ran out
//! of time, are written unsymbolized: the query path symbolizes those when
//! it reads them, as it does frames that arrived before their symbols.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use actix::Addr;
use futures_util::future::join_all;
use kiln_model::{Batch, FileId, Frame, FrameId, Symbol};
use kiln_storage::StoredFrame;
use kiln_symbolizer_workers::{FileAddrs, Resolve, ResolvedFrame, Symbolizer};
use tracing::{debug, warn};

use super::decoder::Decoded;

/// Longest a poll waits for its lookups. Symbols already loaded answer in
/// microseconds; this bounds the first read of a large symbol file from a
/// slow object store (the read goes on, and the next poll finds it loaded).
const LOOKUP_WAIT: Duration = Duration::from_secs(1);

/// A decoded batch ready for the writer: its frame dictionary as rows,
/// symbolized where symbols were at hand, without the frames an earlier
/// batch of the same poll carries (the batch's own `frames` are moved out
/// into them).
#[derive(Debug)]
pub(crate) struct Symbolized {
    /// The batch, without its frames.
    pub decoded: Decoded,
    /// Its frames, to be written.
    pub frames: Vec<StoredFrame>,
}

/// Where each frame to symbolize is: batch, then frame, within a poll.
type Slot = (usize, usize);

/// One tenant's address frames in one file.
#[derive(Debug)]
struct FileFrames {
    file: FileId,
    /// The file's GNU build id when a batch of the poll carried its
    /// executable (lets the symbolizer start a debuginfod fetch).
    build_id: Option<String>,
    addrs: Vec<u64>,
    /// Where the frame of each address is.
    slots: Vec<Slot>,
}

/// Turns each batch's frames into rows, with the symbols of those whose
/// files have some.
pub(crate) async fn symbolize(
    symbolizer: &Addr<Symbolizer>,
    batches: Vec<Decoded>,
) -> Vec<Symbolized> {
    // Batches of one poll (hosts running the same binaries) often carry
    // the same frames: each is written, and looked up, once.
    let mut seen: HashSet<(String, FrameId)> = HashSet::new();
    let mut out: Vec<Symbolized> = batches
        .into_iter()
        .map(|mut decoded| {
            let tenant = decoded.header.scope.tenant().to_owned();
            let frames = std::mem::take(&mut decoded.batch.frames)
                .into_iter()
                .filter(|f| seen.insert((tenant.clone(), f.id)))
                .map(StoredFrame::from)
                .collect();
            Symbolized { decoded, frames }
        })
        .collect();
    let by_tenant = address_frames(&out);
    let lookups = by_tenant
        .into_iter()
        .map(|(tenant, files)| lookup(symbolizer, tenant, files));
    for (files, resolved) in join_all(lookups).await {
        for (file, chains) in files.into_iter().zip(resolved) {
            let Some(chains) = chains else { continue };
            for ((b, f), chain) in file.slots.into_iter().zip(chains) {
                out[b].frames[f].symbols = chain.into_iter().map(Symbol::from).collect();
            }
        }
    }
    out
}

/// The address frames of `batches`, grouped by tenant and file.
fn address_frames(batches: &[Symbolized]) -> HashMap<String, Vec<FileFrames>> {
    let mut by_tenant: HashMap<&str, HashMap<FileId, FileFrames>> = HashMap::new();
    for (b, batch) in batches.iter().enumerate() {
        let tenant = batch.decoded.header.scope.tenant();
        let files = by_tenant.entry(tenant).or_default();
        for (f, row) in batch.frames.iter().enumerate() {
            let Frame::Address { file_id, addr, .. } = row.frame else {
                continue;
            };
            let file = files.entry(file_id).or_insert_with(|| FileFrames {
                file: file_id,
                build_id: None,
                addrs: Vec::new(),
                slots: Vec::new(),
            });
            file.addrs.push(addr);
            file.slots.push((b, f));
        }
    }
    for batch in batches {
        let tenant = batch.decoded.header.scope.tenant();
        if let Some(files) = by_tenant.get_mut(tenant) {
            add_build_ids(&batch.decoded.batch, files);
        }
    }
    by_tenant
        .into_iter()
        .filter(|(_, files)| !files.is_empty())
        .map(|(tenant, files)| (tenant.to_owned(), files.into_values().collect()))
        .collect()
}

fn add_build_ids(batch: &Batch, files: &mut HashMap<FileId, FileFrames>) {
    for executable in &batch.executables {
        if let Some(file) = files.get_mut(&executable.file_id) {
            file.build_id = file.build_id.take().or(executable.build_id.clone());
        }
    }
}

/// One tenant's lookup: per file, in order, the chains of its addresses
/// (outermost first), or `None` when the file has no symbols at hand —
/// or for every file, when the lookup failed or took too long.
async fn lookup(
    symbolizer: &Addr<Symbolizer>,
    tenant: String,
    files: Vec<FileFrames>,
) -> (Vec<FileFrames>, Vec<Option<Vec<Vec<ResolvedFrame>>>>) {
    let request = Resolve {
        tenant: tenant.clone(),
        files: files
            .iter()
            .map(|f| FileAddrs {
                file: f.file,
                build_id: f.build_id.clone(),
                addrs: f.addrs.clone(),
            })
            .collect(),
        debuginfod_wait: Some(Duration::ZERO),
    };
    let resolved = match tokio::time::timeout(LOOKUP_WAIT, symbolizer.send(request)).await {
        Ok(Ok(Ok(resolved))) => resolved,
        Ok(Ok(Err(e))) => {
            warn!(tenant, error = %e, "symbol lookup failed; frames written unsymbolized");
            Vec::new()
        }
        Ok(Err(e)) => {
            warn!(tenant, error = %e, "symbolizer unavailable; frames written unsymbolized");
            Vec::new()
        }
        Err(_) => {
            debug!(
                tenant,
                "symbol lookup still loading; frames written unsymbolized"
            );
            Vec::new()
        }
    };
    (files, resolved)
}
