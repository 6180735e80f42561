//! Query-time symbolization of address frames, so that frames which
//! arrived before their symbols show names once the symbols are uploaded,
//! with nothing re-ingested.
//!
//! Symbols are loaded per (tenant, file) — the tenant's own ksym first,
//! then the global one — decompressed once and kept in a bounded cache;
//! files without symbols are remembered for a short while only, so a
//! query does not go to the object store for each of them, and an upload
//! shows within [`MISSING_TTL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_model::FileId;
use kiln_storage::{ObjectKey, ObjectStore, StoreError};
use kiln_symbolizer_workers::Ksym;

use super::cache::BoundedCache;

/// Decompressed ksym files kept.
const LOADED_FILES: usize = 64;
/// How long a file without symbols is believed to have none.
pub(crate) const MISSING_TTL: Duration = Duration::from_secs(5);
/// Largest decompressed ksym accepted (a hostile object cannot exhaust
/// memory).
const MAX_KSYM_BYTES: u64 = 1 << 30;

/// One level of an inline chain, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Symbol {
    pub(crate) function: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) line: u32,
}

type Key = (String, FileId);

/// Loads and caches symbol files; answers batched lookups.
#[derive(Debug)]
pub(crate) struct Symbolizer {
    objects: Arc<dyn ObjectStore>,
    /// Verified, decompressed ksym bytes.
    loaded: Mutex<BoundedCache<Key, Arc<[u8]>>>,
    /// Files found without symbols, and when.
    missing: Mutex<HashMap<Key, Instant>>,
}

impl Symbolizer {
    pub(crate) fn new(objects: Arc<dyn ObjectStore>) -> Self {
        Self {
            objects,
            loaded: Mutex::new(BoundedCache::new(LOADED_FILES)),
            missing: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets what is known of `file`'s symbols: new ones were stored.
    pub(crate) fn forget(&self, tenant: &str, file: FileId) {
        let key = (tenant.to_owned(), file);
        self.loaded.lock().expect("ksym cache lock").remove(&key);
        self.missing
            .lock()
            .expect("missing cache lock")
            .remove(&key);
    }

    /// The inline chain of each of `addrs` in `file`, **outermost first**
    /// (empty where the symbols do not cover the address), or `None` when
    /// the file has no symbols.
    pub(crate) async fn lookup(
        &self,
        tenant: &str,
        file: FileId,
        addrs: &[u64],
    ) -> Result<Option<Vec<Vec<Symbol>>>, StoreError> {
        let Some(bytes) = self.load(tenant, file).await? else {
            return Ok(None);
        };
        // Verified when loaded, so this cannot fail.
        let Ok(ksym) = Ksym::open(&bytes) else {
            return Ok(None);
        };
        let mut frames = Vec::new();
        let chains = addrs
            .iter()
            .map(|&addr| {
                ksym.lookup(addr, &mut frames);
                // ksym answers innermost first; stacks are root first.
                frames
                    .iter()
                    .rev()
                    .map(|f| Symbol {
                        function: f.function.map(str::to_owned),
                        file: f.path(),
                        line: f.line,
                    })
                    .collect()
            })
            .collect();
        Ok(Some(chains))
    }

    async fn load(&self, tenant: &str, file: FileId) -> Result<Option<Arc<[u8]>>, StoreError> {
        let key = (tenant.to_owned(), file);
        if let Some(bytes) = self.loaded.lock().expect("ksym cache lock").get(&key) {
            return Ok(Some(bytes.clone()));
        }
        {
            let mut missing = self.missing.lock().expect("missing cache lock");
            match missing.get(&key) {
                Some(at) if at.elapsed() < MISSING_TTL => return Ok(None),
                Some(_) => {
                    missing.remove(&key);
                }
                None => {}
            }
        }
        let bytes = match self.fetch(tenant, file).await? {
            Some(bytes) => bytes,
            None => {
                let mut missing = self.missing.lock().expect("missing cache lock");
                // Expired entries go when the map grows; it only holds
                // files that queries touched in the last few seconds.
                if missing.len() >= 4096 {
                    missing.retain(|_, at| at.elapsed() < MISSING_TTL);
                }
                missing.insert(key, Instant::now());
                return Ok(None);
            }
        };
        self.loaded
            .lock()
            .expect("ksym cache lock")
            .insert(key, bytes.clone());
        Ok(Some(bytes))
    }

    /// The tenant's symbols, else the global ones, decompressed and
    /// verified. A stored file that does not verify is logged and treated
    /// as missing: a query must not fail because of one bad upload.
    async fn fetch(&self, tenant: &str, file: FileId) -> Result<Option<Arc<[u8]>>, StoreError> {
        for key in [
            ObjectKey::tenant_symbols(tenant, file)?,
            ObjectKey::global_symbols(file),
        ] {
            let Some(compressed) = self.objects.get(&key).await? else {
                continue;
            };
            // Decompressing and verifying a large file is CPU work: off
            // the actor's thread.
            let decoded = tokio::task::spawn_blocking(move || decode(&compressed))
                .await
                .unwrap_or_else(|e| Err(format!("decoder failed: {e}")));
            match decoded {
                Ok(bytes) => return Ok(Some(bytes.into())),
                Err(e) => tracing::warn!(key = key.as_str(), error = %e, "unusable symbol file"),
            }
        }
        Ok(None)
    }
}

fn decode(compressed: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    zstd::Decoder::new(compressed)
        .map_err(|e| e.to_string())?
        .take(MAX_KSYM_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ksym::open(&bytes)
        .and_then(|k| k.verify())
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}
