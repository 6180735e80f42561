//! Global symbols across regions: the symbols of public distro libraries
//! (`global/<file_id>.ksym`, filled by `kiln symbols crawl` and the admin
//! upload) are the same for every tenant, so every region keeps them all,
//! and a tenant's libc frames are named in whichever region it is homed.
//!
//! **Pull, not push.** Every `every`, each region asks each peer region
//! for the file ids in its global store (`GET /api/v1/symbols/global`),
//! fetches those it lacks (`GET /api/v1/symbols/global/{file_id}`), checks
//! each as it checks a tenant's ksym upload (inflated within the upload
//! limit, `Ksym::verify`), stores it and tells its query side. A region
//! that was down catches up by itself on return; what a region stores it
//! has checked itself; and uploads need no fan-out that a peer's outage
//! would fail. Both requests need the admin token, which the regions of a
//! deployment share (`--admin-token` / `KILN_ADMIN_TOKEN`).
//!
//! Only global symbols move: a tenant's own symbols stay in its home
//! region, as its profiles do.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::time::Duration;

use actix::Addr;
use kiln_model::FileId;
use kiln_storage::{ObjectKey, ObjectStore};
use kiln_symbolizer_workers::{MAX_KSYM_UPLOAD, StoredError, stored_from_ksym};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tracing::{info, warn};

use crate::admin_token::AdminToken;
use crate::query::{QueryCoordinator, SymbolsStored};
use crate::regions::Regions;

/// How often a region pulls by default (`--global-symbols-every`).
pub const GLOBAL_SYMBOLS_INTERVAL: Duration = Duration::from_secs(600);

/// The answer of `GET /api/v1/symbols/global`.
#[derive(Debug, Serialize, Deserialize)]
pub struct GlobalSymbolList {
    /// Every file id the global store has symbols for, sorted.
    pub file_ids: Vec<FileId>,
}

/// What one pull did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PullReport {
    /// Symbol files fetched and stored.
    pub fetched: u64,
    /// Bytes stored for them.
    pub bytes: u64,
    /// Peers or files that failed, with why (the others went on).
    pub failed: Vec<String>,
}

/// The pull job of one process.
#[derive(Debug, Clone)]
pub struct GlobalSymbolSync {
    objects: Arc<dyn ObjectStore>,
    regions: Regions,
    admin_token: AdminToken,
    query: Addr<QueryCoordinator>,
}

impl GlobalSymbolSync {
    /// A job storing into `objects` what the peers of `regions` have,
    /// asking them with `admin_token`, and telling `query` of each file.
    pub fn new(
        objects: Arc<dyn ObjectStore>,
        regions: Regions,
        admin_token: AdminToken,
        query: Addr<QueryCoordinator>,
    ) -> Self {
        GlobalSymbolSync {
            objects,
            regions,
            admin_token,
            query,
        }
    }

    /// Pulls now and then `every`, on the current actix runtime.
    pub fn spawn(&self, every: Duration) {
        let job = self.clone();
        actix_rt::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                job.pull_once().await;
            }
        });
    }

    /// One pull from every peer region.
    pub async fn pull_once(&self) -> PullReport {
        let mut report = PullReport::default();
        let have = match global_file_ids(&*self.objects).await {
            Ok(ids) => ids,
            Err(e) => {
                report.failed.push(format!("listing the global store: {e}"));
                return report;
            }
        };
        let mut have: BTreeSet<FileId> = have.into_iter().collect();
        for (region, url) in self.regions.peers() {
            if let Err(e) = self.pull_from(url, &mut have, &mut report).await {
                warn!(region, error = %e, "global symbols: pulling from a peer region failed");
                report.failed.push(format!("{region}: {e}"));
            }
        }
        if report.fetched > 0 {
            info!(
                files = report.fetched,
                bytes = report.bytes,
                "global symbols: stored what peer regions had"
            );
        }
        report
    }

    async fn pull_from(
        &self,
        url: &str,
        have: &mut BTreeSet<FileId>,
        report: &mut PullReport,
    ) -> Result<(), String> {
        let body = self
            .get(&format!("{url}/api/v1/symbols/global"))
            .await?
            .bytes()
            .await
            .map_err(|e| format!("reading the list of global symbols: {e}"))?;
        let list: GlobalSymbolList = serde_json::from_slice(&body)
            .map_err(|e| format!("the list of global symbols: {e}"))?;
        for id in list.file_ids {
            if have.contains(&id) {
                continue;
            }
            match self.fetch(url, id).await {
                Ok(bytes) => {
                    report.fetched += 1;
                    report.bytes += bytes;
                    have.insert(id);
                }
                Err(e) => report.failed.push(format!("{id} from {url}: {e}")),
            }
        }
        Ok(())
    }

    /// Fetches, checks and stores one file's symbols; their stored bytes.
    async fn fetch(&self, url: &str, id: FileId) -> Result<u64, String> {
        let body = self
            .get(&format!("{url}/api/v1/symbols/global/{id}"))
            .await?
            .bytes()
            .await
            .map_err(|e| format!("reading the symbols: {e}"))?;
        // Inflating and checking are CPU-bound: off the event loop.
        let stored = actix_web::web::block(move || check_stored(&body))
            .await
            .map_err(|e| format!("symbol worker failed: {e}"))??;
        let bytes = stored.len() as u64;
        self.objects
            .put(&ObjectKey::global_symbols(id), stored.into())
            .await
            .map_err(|e| format!("object store: {e}"))?;
        if let Err(e) = self
            .query
            .send(SymbolsStored {
                tenant: None,
                file_id: id,
            })
            .await
        {
            warn!(file_id = %id, error = %e, "queries were not told of new symbols");
        }
        Ok(bytes)
    }

    async fn get(&self, url: &str) -> Result<reqwest::Response, String> {
        let response = self
            .regions
            .client()
            .get(url)
            .bearer_auth(self.admin_token.expose())
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(format!("GET {url}: HTTP {status}: {text}"));
        }
        Ok(response)
    }
}

/// The file ids of the global store, sorted.
pub(crate) async fn global_file_ids(
    objects: &dyn ObjectStore,
) -> Result<Vec<FileId>, kiln_storage::StoreError> {
    let mut ids: Vec<FileId> = objects
        .list("global/")
        .await?
        .iter()
        .filter_map(|key| {
            let name = key.as_str().strip_prefix("global/")?;
            name.strip_suffix(".ksym")?.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Checks symbols as a peer stored them (zstd-compressed ksym): inflated
/// within the ksym upload limit, then read and verified as a tenant's
/// upload is; the bytes to store.
fn check_stored(compressed: &[u8]) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    zstd::stream::Decoder::new(compressed)
        .and_then(|d| d.take(MAX_KSYM_UPLOAD as u64 + 1).read_to_end(&mut raw))
        .map_err(|e| format!("the symbols do not inflate: {e}"))?;
    if raw.len() > MAX_KSYM_UPLOAD {
        return Err(format!("the symbols inflate past {MAX_KSYM_UPLOAD} bytes"));
    }
    match stored_from_ksym(&raw) {
        Ok(stored) => Ok(stored.compressed),
        Err(StoredError::Ksym(e)) => Err(format!("not a valid ksym file: {e}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a peer sends is checked as a tenant's upload is: damage is
    /// refused with what is wrong, never stored.
    #[test]
    fn pulled_symbols_are_checked_before_they_are_stored() {
        let err = check_stored(b"not zstd").unwrap_err();
        assert!(err.contains("do not inflate"), "{err}");
        let not_ksym = zstd::encode_all(&b"KSYM? no"[..], 3).unwrap();
        let err = check_stored(&not_ksym).unwrap_err();
        assert!(err.contains("not a valid ksym"), "{err}");
    }

    #[tokio::test]
    async fn the_global_store_lists_its_file_ids_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let objects = kiln_storage::LocalObjectStore::open(dir.path()).unwrap();
        for id in [7u128, 3] {
            let key = ObjectKey::global_symbols(FileId(id));
            objects
                .put(&key, bytes::Bytes::from_static(b"x"))
                .await
                .unwrap();
        }
        let tenant = ObjectKey::tenant_symbols("acme", FileId(5)).unwrap();
        objects
            .put(&tenant, bytes::Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert_eq!(
            global_file_ids(&objects).await.unwrap(),
            vec![FileId(3), FileId(7)]
        );
    }
}
