//! Turning stack ids into frames a person can read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kiln_model::{FileId, Frame, FrameId, FrameKind, StackId};
use kiln_storage::{ProfileStore, StoreError};

use super::cache::BoundedCache;

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
/// cached entry never goes stale.
const CACHE_SIZE: usize = 1 << 20;
/// Ids asked of the store in one call.
const CHUNK: usize = 4096;

/// Cached stacks and frames, keyed by tenant and id.
type StackCache = BoundedCache<(String, StackId), Arc<[FrameId]>>;
type FrameCache = BoundedCache<(String, FrameId), Arc<FrameLabel>>;

/// Resolves stacks to frame labels, with caches shared by all queries.
#[derive(Debug)]
pub(crate) struct Resolver {
    store: Arc<dyn ProfileStore>,
    stacks: Mutex<StackCache>,
    frames: Mutex<FrameCache>,
}

/// Resolved stacks: each stack id's frames (root first).
pub(crate) type Resolved = HashMap<StackId, Vec<Arc<FrameLabel>>>;

impl Resolver {
    pub(crate) fn new(store: Arc<dyn ProfileStore>) -> Self {
        Self {
            store,
            stacks: Mutex::new(BoundedCache::new(CACHE_SIZE)),
            frames: Mutex::new(BoundedCache::new(CACHE_SIZE)),
        }
    }

    /// Resolves `ids`. A stack or frame the store does not have (an agent
    /// believed it was sent earlier, and it was not) still shows, as a
    /// named placeholder, so that totals stay right.
    pub(crate) async fn resolve(
        &self,
        tenant: &str,
        ids: impl IntoIterator<Item = StackId>,
    ) -> Result<Resolved, StoreError> {
        let stacks = self.stacks_of(tenant, ids).await?;
        let frame_ids: HashSet<FrameId> = stacks
            .values()
            .flatten()
            .flat_map(|f| f.iter().copied())
            .collect();
        let labels = self.frames_of(tenant, frame_ids).await?;
        Ok(stacks
            .into_iter()
            .map(|(id, frames)| {
                let resolved = match frames {
                    Some(frames) => frames.iter().map(|f| labels[f].clone()).collect(),
                    None => vec![Arc::new(FrameLabel::synthetic(format!(
                        "[unknown stack {id}]"
                    )))],
                };
                (id, resolved)
            })
            .collect())
    }

    async fn stacks_of(
        &self,
        tenant: &str,
        ids: impl IntoIterator<Item = StackId>,
    ) -> Result<HashMap<StackId, Option<Arc<[FrameId]>>>, StoreError> {
        let mut found = HashMap::new();
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
        ids: HashSet<FrameId>,
    ) -> Result<HashMap<FrameId, Arc<FrameLabel>>, StoreError> {
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        {
            let cache = self.frames.lock().expect("frame cache lock");
            for id in ids {
                match cache.get(&(tenant.to_owned(), id)) {
                    Some(label) => {
                        found.insert(id, label.clone());
                    }
                    None => missing.push(id),
                }
            }
        }
        for chunk in missing.chunks(CHUNK) {
            let frames = self.store.get_frames(tenant, chunk).await?;
            let modules = self.module_names(tenant, frames.iter().flatten()).await?;
            let mut cache = self.frames.lock().expect("frame cache lock");
            for (&id, frame) in chunk.iter().zip(frames) {
                let label = match frame {
                    Some(frame) => {
                        let label = Arc::new(label_of(frame, &modules));
                        cache.insert((tenant.to_owned(), id), label.clone());
                        label
                    }
                    None => Arc::new(FrameLabel::synthetic(format!("[unknown frame {id}]"))),
                };
                found.insert(id, label);
            }
        }
        Ok(found)
    }

    /// Names of the executables that address frames point into.
    async fn module_names(
        &self,
        tenant: &str,
        frames: impl Iterator<Item = &Frame>,
    ) -> Result<HashMap<FileId, String>, StoreError> {
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
            .filter_map(|(id, e)| e.map(|e| (id, e.name)))
            .collect())
    }
}

fn label_of(frame: Frame, modules: &HashMap<FileId, String>) -> FrameLabel {
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
        } => {
            let module = modules.get(&file_id).cloned();
            let name = match &module {
                Some(m) => format!("{m}+{addr:#x}"),
                None => format!("{file_id}+{addr:#x}"),
            };
            FrameLabel {
                kind,
                name,
                module,
                file: None,
                line: 0,
            }
        }
    }
}
