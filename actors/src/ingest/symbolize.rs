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
use kiln_model::{FileId, Frame, FrameId, Symbol};
use kiln_storage::StoredFrame;
use kiln_symbolizer_workers::{FrameAddr, ResolvedFrame, Symbolizer, symbolize_frames};
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
        .map(|(tenant, frames)| lookup(symbolizer, tenant, frames));
    for named in join_all(lookups).await {
        for ((b, f), chain) in named {
            if let Some(chain) = chain {
                out[b].frames[f].symbols = chain.into_iter().map(Symbol::from).collect();
            }
        }
    }
    out
}

/// The address frames of `batches`, grouped by tenant, with the build ids
/// of their files where a batch of the poll carried the executable.
fn address_frames(batches: &[Symbolized]) -> HashMap<String, Vec<FrameAddr<Slot>>> {
    let mut build_ids: HashMap<(&str, FileId), &str> = HashMap::new();
    for batch in batches {
        let tenant = batch.decoded.header.scope.tenant();
        for executable in &batch.decoded.batch.executables {
            if let Some(id) = &executable.build_id {
                build_ids.entry((tenant, executable.file_id)).or_insert(id);
            }
        }
    }
    let mut by_tenant: HashMap<String, Vec<FrameAddr<Slot>>> = HashMap::new();
    for (b, batch) in batches.iter().enumerate() {
        let tenant = batch.decoded.header.scope.tenant();
        for (f, row) in batch.frames.iter().enumerate() {
            let Frame::Address { file_id, addr, .. } = row.frame else {
                continue;
            };
            by_tenant
                .entry(tenant.to_owned())
                .or_default()
                .push(FrameAddr {
                    key: (b, f),
                    file: file_id,
                    build_id: build_ids.get(&(tenant, file_id)).map(|id| (*id).to_owned()),
                    addr,
                });
        }
    }
    by_tenant
}

/// One tenant's lookup: each frame's chain (outermost first), or `None`
/// where its file has no symbols at hand, or for every frame when the
/// lookup failed or took too long.
async fn lookup(
    symbolizer: &Addr<Symbolizer>,
    tenant: String,
    frames: Vec<FrameAddr<Slot>>,
) -> Vec<(Slot, Option<Vec<ResolvedFrame>>)> {
    let slots: Vec<Slot> = frames.iter().map(|f| f.key).collect();
    let named = symbolize_frames(symbolizer, &tenant, frames, Some(Duration::ZERO));
    match tokio::time::timeout(LOOKUP_WAIT, named).await {
        Ok(Ok(named)) => return named,
        Ok(Err(e)) => {
            warn!(tenant, error = %e, "symbol lookup failed; frames written unsymbolized");
        }
        Err(_) => {
            debug!(
                tenant,
                "symbol lookup still loading; frames written unsymbolized"
            );
        }
    }
    slots.into_iter().map(|slot| (slot, None)).collect()
}
