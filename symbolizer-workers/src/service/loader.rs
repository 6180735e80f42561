//! Loading symbol files: the tenant's own, else the global one, else —
//! when debuginfod servers are configured and the file's build id is
//! known — fetched from debuginfod into the global store.
//!
//! Loaded files are kept decompressed in a cache bounded by bytes; files
//! without symbols are remembered for [`SymbolizerConfig::missing_ttl`]
//! so a query does not go to the object store for each of them, and an
//! upload shows within that time (at once when [`Loader::forget`] is
//! told).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use kiln_model::FileId;
use kiln_storage::{ObjectKey, ObjectStore, StoreError};
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot};
use tokio::time::Instant;

use super::SymbolizerConfig;
use super::expiring::ExpiringSet;
use crate::debuginfod::Debuginfod;
use crate::ksym::KsymFile;
use crate::stored::{build_stored, decode_stored};

/// Files a "missing" set remembers before it is trimmed.
const MISSING_CAPACITY: usize = 1 << 16;

type Key = (String, FileId);

/// Weighs cached files by the memory they hold, or may come to hold as
/// their mangled names are decompressed (see [`KsymFile::memory`]), so
/// the bound is on memory.
#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl quick_cache::Weighter<Key, Arc<KsymFile>> for ByBytes {
    fn weight(&self, _: &Key, file: &Arc<KsymFile>) -> u64 {
        file.memory().max(1) as u64
    }
}

/// Loads and caches decompressed ksym files.
#[derive(Debug)]
pub(crate) struct Loader {
    objects: Arc<dyn ObjectStore>,
    loaded: quick_cache::sync::Cache<Key, Arc<KsymFile>, ByBytes>,
    /// (tenant, file) found without symbols, and when.
    missing: Mutex<ExpiringSet<Key>>,
    /// One lock per (tenant, file) being loaded now: lookups of a file
    /// another one is loading wait for it instead of reading and
    /// decompressing it again (the ingest pipeline stops waiting after a
    /// while and asks again with its next poll).
    loading: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    remote: Option<Remote>,
}

/// The debuginfod fallback and its bookkeeping.
#[derive(Debug)]
struct Remote {
    client: Debuginfod,
    /// Build ids no server had (or none could be asked for), by file.
    not_found: Mutex<ExpiringSet<FileId>>,
    /// Files being fetched now: a second query does not fetch again.
    in_flight: Mutex<HashSet<FileId>>,
    /// Fetches running at once.
    permits: Semaphore,
    config: SymbolizerConfig,
}

impl Loader {
    pub(crate) fn new(objects: Arc<dyn ObjectStore>, config: SymbolizerConfig) -> Self {
        let loaded =
            quick_cache::sync::Cache::with_weighter(64, config.cache_bytes.max(1), ByBytes);
        let remote = config.debuginfod.clone().map(|client| Remote {
            client,
            not_found: Mutex::new(ExpiringSet::new(
                config.debuginfod_missing_ttl,
                MISSING_CAPACITY,
            )),
            in_flight: Mutex::new(HashSet::new()),
            permits: Semaphore::new(config.debuginfod_concurrency.max(1)),
            config: config.clone(),
        });
        Self {
            objects,
            loaded,
            missing: Mutex::new(ExpiringSet::new(config.missing_ttl, MISSING_CAPACITY)),
            loading: Mutex::new(HashMap::new()),
            remote,
        }
    }

    /// Forgets what is known of `file`'s symbols for `tenant` (for every
    /// tenant when `None`): new ones were stored.
    pub(crate) fn forget(&self, tenant: Option<&str>, file: FileId) {
        let concerned = |k: &Key| k.1 == file && tenant.is_none_or(|t| k.0 == t);
        self.loaded.retain(|k, _| !concerned(k));
        self.missing
            .lock()
            .expect("missing lock")
            .retain(|k| !concerned(k));
    }

    /// When a lookup starting now stops waiting for debuginfod: one budget
    /// for all the files of a lookup, so that many new files cannot add up
    /// to a long wait. `wait` overrides the configured one.
    pub(crate) fn debuginfod_deadline(&self, wait: Option<Duration>) -> Instant {
        let wait = match (&self.remote, wait) {
            (None, _) => Duration::ZERO,
            (Some(_), Some(wait)) => wait,
            (Some(remote), None) => remote.config.debuginfod_wait,
        };
        Instant::now() + wait
    }

    /// The symbols of `file` for `tenant`; `build_id` (hex), when known,
    /// lets debuginfod be asked for files that have none, waiting for it
    /// until `deadline` at most.
    pub(crate) async fn load(
        self: &Arc<Self>,
        tenant: &str,
        file: FileId,
        build_id: Option<&str>,
        deadline: Instant,
    ) -> Result<Option<Arc<KsymFile>>, StoreError> {
        let key = (tenant.to_owned(), file);
        if let Some(known) = self.known(&key) {
            return Ok(known);
        }
        let lock = Arc::clone(
            self.loading
                .lock()
                .expect("loading lock")
                .entry(key.clone())
                .or_default(),
        );
        let _loading = lock.lock().await;
        // Whoever held the lock before may have loaded it.
        if let Some(known) = self.known(&key) {
            return Ok(known);
        }
        let found = self.load_now(&key, build_id, deadline).await;
        self.loading.lock().expect("loading lock").remove(&key);
        found
    }

    /// What is known of `key` without reading anything: its loaded
    /// symbols, or that it has none.
    fn known(&self, key: &Key) -> Option<Option<Arc<KsymFile>>> {
        if let Some(bytes) = self.loaded.get(key) {
            return Some(Some(bytes));
        }
        let missing = self.missing.lock().expect("missing lock").contains(key);
        missing.then_some(None)
    }

    /// Reads `key`'s symbols from the object store (or debuginfod) and
    /// remembers what was found.
    async fn load_now(
        self: &Arc<Self>,
        key: &Key,
        build_id: Option<&str>,
        deadline: Instant,
    ) -> Result<Option<Arc<KsymFile>>, StoreError> {
        let (tenant, file) = (key.0.as_str(), key.1);
        let mut found = self.fetch(tenant, file).await?;
        if found.is_none()
            && let Some(build_id) = build_id
            && self.ask_debuginfod(file, build_id, deadline).await
        {
            found = self.fetch(tenant, file).await?;
        }
        match &found {
            Some(bytes) => self.loaded.insert(key.clone(), bytes.clone()),
            None => self
                .missing
                .lock()
                .expect("missing lock")
                .insert(key.clone()),
        }
        Ok(found)
    }

    /// The tenant's symbols, else the global ones, decompressed (and
    /// upgraded, and stored again upgraded, when an earlier Kiln stored
    /// them in an earlier layout). A stored file that does not read is
    /// logged and treated as missing: a query must not fail because of
    /// one bad upload.
    async fn fetch(&self, tenant: &str, file: FileId) -> Result<Option<Arc<KsymFile>>, StoreError> {
        for key in [
            ObjectKey::tenant_symbols(tenant, file)?,
            ObjectKey::global_symbols(file),
        ] {
            let Some(compressed) = self.objects.get(&key).await? else {
                continue;
            };
            // Decompressing and checking a large file is CPU work: off
            // the actor's thread.
            match tokio::task::spawn_blocking(move || decode_stored(&compressed)).await {
                Ok(Ok(decoded)) => {
                    if let Some(upgraded) = decoded.upgraded {
                        self.store_upgraded(&key, upgraded).await;
                    }
                    return Ok(Some(Arc::new(decoded.file)));
                }
                Ok(Err(e)) => {
                    tracing::warn!(key = key.as_str(), error = %e, "unusable symbol file");
                }
                Err(e) => tracing::warn!(key = key.as_str(), error = %e, "symbol decoder failed"),
            }
        }
        Ok(None)
    }

    /// Stores a symbol file upgraded to the current layout in place of the
    /// earlier one, so that it is upgraded once rather than at every load.
    /// A failure is logged: the next load upgrades it again.
    async fn store_upgraded(&self, key: &ObjectKey, upgraded: Vec<u8>) {
        match self.objects.put(key, upgraded.into()).await {
            Ok(()) => tracing::info!(key = key.as_str(), "symbol file stored again upgraded"),
            Err(e) => {
                tracing::warn!(key = key.as_str(), error = %e, "upgraded symbol file not stored");
            }
        }
    }

    /// Starts fetching `file` from debuginfod, unless that is pointless or
    /// already under way, and waits for it until `deadline` at most;
    /// `true` when its symbols were stored within that time. A fetch that
    /// takes longer goes on, and later queries find what it stored.
    async fn ask_debuginfod(
        self: &Arc<Self>,
        file: FileId,
        build_id: &str,
        deadline: Instant,
    ) -> bool {
        let Some(remote) = &self.remote else {
            return false;
        };
        // The build id must be the one the file id was made from: ids come
        // from agents, which are not trusted to name the file truthfully.
        let Some(build_id) = parse_hex(build_id) else {
            return false;
        };
        if FileId::from_build_id(&build_id) != file {
            return false;
        }
        if remote
            .not_found
            .lock()
            .expect("not-found lock")
            .contains(&file)
            || !remote
                .in_flight
                .lock()
                .expect("in-flight lock")
                .insert(file)
        {
            return false;
        }
        let (done, stored) = oneshot::channel();
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let result = this.fetch_remote(file, build_id).await;
            let remote = this.remote.as_ref().expect("remote configured");
            remote
                .in_flight
                .lock()
                .expect("in-flight lock")
                .remove(&file);
            let ok = match result {
                Ok(true) => {
                    // Every tenant that looked for this file may look again.
                    this.missing
                        .lock()
                        .expect("missing lock")
                        .retain(|k| k.1 != file);
                    true
                }
                Ok(false) => {
                    remote
                        .not_found
                        .lock()
                        .expect("not-found lock")
                        .insert(file);
                    false
                }
                Err(e) => {
                    tracing::warn!(file_id = %file, error = %e, "debuginfod fetch failed");
                    remote
                        .not_found
                        .lock()
                        .expect("not-found lock")
                        .insert(file);
                    false
                }
            };
            let _ = done.send(ok);
        });
        matches!(
            tokio::time::timeout_at(deadline, stored).await,
            Ok(Ok(true))
        )
    }

    /// Fetches, extracts and stores globally the symbols of `build_id`;
    /// `false` when no server has it.
    async fn fetch_remote(&self, file: FileId, build_id: Vec<u8>) -> Result<bool, FetchError> {
        let remote = self.remote.as_ref().expect("remote configured");
        let _permit = remote
            .permits
            .acquire()
            .await
            .expect("semaphore never closed");
        let client = remote.client.clone();
        let built = tokio::task::spawn_blocking(move || {
            let Some(fetched) = client.fetch(&build_id)? else {
                return Ok(None);
            };
            let stored = build_stored(Path::new(&fetched.url), &fetched.data)?;
            Ok::<_, FetchError>(Some((fetched.url, stored)))
        })
        .await
        .map_err(|e| FetchError::Worker(e.to_string()))??;
        let Some((url, stored)) = built else {
            return Ok(false);
        };
        self.objects
            .put(&ObjectKey::global_symbols(file), stored.compressed.into())
            .await?;
        tracing::info!(
            file_id = %file,
            url,
            ranges = stored.ranges,
            dwarf = stored.dwarf,
            "symbols fetched from debuginfod"
        );
        Ok(true)
    }
}

/// Why a debuginfod fetch stored nothing.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error(transparent)]
    Debuginfod(#[from] crate::debuginfod::DebuginfodError),
    #[error("the fetched file is not usable as symbols")]
    Symbols(#[from] crate::stored::StoredError),
    #[error("cannot store the fetched symbols")]
    Store(#[from] StoreError),
    #[error("fetch worker failed: {0}")]
    Worker(String),
}

/// Bytes of a hex string (either case); `None` when it is not hex.
fn parse_hex(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ksym;
    use crate::table::{Function, Range, SymbolTable};

    /// Guards the write-back of upgrades: a file an earlier Kiln stored in
    /// ksym version 1 is read with its names, and stored again in the
    /// current version, so the next load has nothing to upgrade.
    #[tokio::test]
    async fn files_of_an_earlier_layout_are_stored_again_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let objects: Arc<dyn ObjectStore> =
            Arc::new(kiln_storage::LocalObjectStore::open(dir.path()).unwrap());
        let table = SymbolTable {
            functions: vec![Function {
                name: "main".into(),
                mangled: None,
            }],
            files: vec![],
            ranges: vec![Range {
                start: 0x1000,
                end: 0x1040,
                function: 0,
                lines: vec![],
                inlines: vec![],
            }],
        };
        let file = FileId::from_build_id(b"earlier");
        let key = ObjectKey::tenant_symbols("acme", file).unwrap();
        let v1 = zstd::encode_all(&ksym::v1::encode(&table)[..], 1).unwrap();
        objects.put(&key, v1.into()).await.unwrap();

        let loader = Arc::new(Loader::new(
            Arc::clone(&objects),
            SymbolizerConfig::default(),
        ));
        let loaded = loader
            .load("acme", file, None, Instant::now())
            .await
            .unwrap()
            .expect("the symbols are found");
        let mut frames = Vec::new();
        let symbols = loaded.ksym();
        symbols.lookup(0x1010, &mut frames);
        assert_eq!(frames[0].function().as_deref(), Some("main"));

        let stored = objects.get(&key).await.unwrap().unwrap();
        let stored = zstd::decode_all(&stored[..]).unwrap();
        assert_eq!(stored, ksym::encode(&table), "stored again, upgraded");
    }

    #[test]
    fn hex_parses_both_cases_and_refuses_junk() {
        assert_eq!(parse_hex("aBff00"), Some(vec![0xab, 0xff, 0]));
        assert_eq!(parse_hex("abc"), None);
        assert_eq!(parse_hex(""), None);
        assert_eq!(parse_hex("zz"), None);
        assert_eq!(parse_hex("é1"), None);
    }
}
