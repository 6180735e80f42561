//! Naming a set of address frames in one batched [`Resolve`]: the one path
//! the ingest pipeline (before it writes frames) and queries (as they read
//! frames ingest left unnamed) both take. Frames are grouped by file, each
//! file asked for once with all its addresses, and the answers handed
//! back to each frame's key.

use std::collections::HashMap;
use std::time::Duration;

use actix::{Addr, MailboxError};
use kiln_model::FileId;
use kiln_storage::StoreError;

use super::{FileAddrs, Resolve, ResolvedFrame, Symbolizer};

/// A frame to name: the caller's key for it, and where its code is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameAddr<K> {
    /// What the caller knows the frame by (a frame id, a slot in a batch).
    pub key: K,
    /// The file the address is in.
    pub file: FileId,
    /// The file's GNU build id, when known (lets the symbolizer start a
    /// debuginfod fetch).
    pub build_id: Option<String>,
    /// File-relative address.
    pub addr: u64,
}

/// Why a set of frames could not be named.
#[derive(Debug, thiserror::Error)]
pub enum SymbolizeError {
    /// Reading symbol files failed.
    #[error("reading symbols failed: {0}")]
    Store(#[from] StoreError),
    /// The symbolizer actor is gone (the process is shutting down).
    #[error("the symbolizer is unavailable: {0}")]
    Unavailable(#[from] MailboxError),
}

/// Each frame's key with its inline chain (outermost first; empty where
/// the file's symbols do not cover the address), or `None` where its file
/// has no symbols at hand. `debuginfod_wait` as [`Resolve`]'s.
pub async fn symbolize_frames<K>(
    symbolizer: &Addr<Symbolizer>,
    tenant: &str,
    frames: impl IntoIterator<Item = FrameAddr<K>>,
    debuginfod_wait: Option<Duration>,
) -> Result<Vec<(K, Option<Vec<ResolvedFrame>>)>, SymbolizeError> {
    let mut by_file: HashMap<FileId, (FileAddrs, Vec<K>)> = HashMap::new();
    for frame in frames {
        let (file, keys) = by_file.entry(frame.file).or_insert_with(|| {
            let addrs = FileAddrs {
                file: frame.file,
                build_id: None,
                addrs: Vec::new(),
            };
            (addrs, Vec::new())
        });
        file.build_id = file.build_id.take().or(frame.build_id);
        file.addrs.push(frame.addr);
        keys.push(frame.key);
    }
    if by_file.is_empty() {
        return Ok(Vec::new());
    }
    let (files, keys): (Vec<FileAddrs>, Vec<Vec<K>>) = by_file.into_values().unzip();
    let resolved = symbolizer
        .send(Resolve {
            tenant: tenant.to_owned(),
            files,
            debuginfod_wait,
        })
        .await??;
    let mut out = Vec::with_capacity(keys.iter().map(Vec::len).sum());
    for (keys, chains) in keys.into_iter().zip(resolved) {
        match chains {
            Some(chains) => out.extend(keys.into_iter().zip(chains.into_iter().map(Some))),
            None => out.extend(keys.into_iter().map(|k| (k, None))),
        }
    }
    Ok(out)
}
