//! The embedded metadata store: tenants, projects, keys and limits in one
//! JSON file, for `kiln up`.
//!
//! Metadata is small (a laptop has one tenant and a few keys) and changes
//! rarely, so the whole document lives in memory and every change rewrites
//! the file: to a temporary file, fsynced, renamed over the old one, the
//! directory fsynced. A crash leaves either the old document or the new
//! one, never half of either. Keys are kept as their SHA-256 only, as in
//! every store (see `api_key`).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::access::{Grant, Roles};
use crate::api_key::{ApiKey, KeyHash};
use crate::error::StoreError;
use crate::limits::TenantLimits;
use crate::metadata::{ApiKeyInfo, MetadataStore, NewApiKey, validate_label, validate_roles};
use crate::scope::Scope;

/// The document's format; raise it when a field changes meaning.
const FORMAT_VERSION: u32 = 1;

/// A [`MetadataStore`] in one file (`metadata.json` under a data
/// directory). Cloning is cheap and shares the document. Only one process
/// may use a file at a time (`kiln up` holds its data directory).
#[derive(Debug, Clone)]
pub struct EmbeddedMetadataStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    state: Mutex<State>,
}

/// The document and an index of its keys by hash.
#[derive(Debug, Default)]
struct State {
    doc: Document,
    by_hash: HashMap<KeyHash, usize>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    format_version: u32,
    tenants: BTreeMap<String, TenantRecord>,
    /// Every tenant's keys, in creation order. A key's id is its position
    /// plus one: ids are unique across tenants, as in PostgreSQL, so an id
    /// alone never names another tenant's key.
    keys: Vec<KeyRecord>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantRecord {
    created_at_ns: u64,
    /// Project name → creation time.
    projects: BTreeMap<String, u64>,
    #[serde(default)]
    limits: TenantLimits,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyRecord {
    tenant: String,
    id: i64,
    project: String,
    /// SHA-256 of the key, hex.
    hash: String,
    prefix: String,
    label: String,
    roles: u8,
    created_at_ns: u64,
    last_used_ns: Option<u64>,
    revoked_at_ns: Option<u64>,
}

impl EmbeddedMetadataStore {
    /// Opens the store in `path`, a file created on the first change.
    /// Fails when the file exists and does not hold a document of this
    /// build's format.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let doc = match std::fs::read(path) {
            Ok(bytes) => parse(path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Document {
                format_version: FORMAT_VERSION,
                ..Document::default()
            },
            Err(source) => {
                return Err(StoreError::Io {
                    op: "read",
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let mut by_hash = HashMap::with_capacity(doc.keys.len());
        for (i, key) in doc.keys.iter().enumerate() {
            let hash = KeyHash::from_hex(&key.hash).ok_or_else(|| corrupt(path, "a key hash"))?;
            by_hash.insert(hash, i);
        }
        Ok(EmbeddedMetadataStore {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                state: Mutex::new(State { doc, by_hash }),
            }),
        })
    }

    /// Runs `change` on the document and writes it back when it returns
    /// `Ok`; on a failed write the change is undone (the document is read
    /// again from the file), so memory never runs ahead of disk.
    async fn change<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut State) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut state = inner.lock();
            let answer = change(&mut state)?;
            if let Err(e) = write_document(&inner.path, &state.doc) {
                // Roll back to what the file holds.
                if let Ok(fresh) = EmbeddedMetadataStore::open(&inner.path) {
                    *state = std::mem::take(&mut *fresh.inner.lock());
                }
                return Err(e);
            }
            Ok(answer)
        })
        .await?
    }

    /// Reads the document.
    fn read<T>(&self, read: impl FnOnce(&State) -> T) -> T {
        read(&self.inner.lock())
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the document half
        // changed on disk (it is written whole), so the data is usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl MetadataStore for EmbeddedMetadataStore {
    async fn create_tenant(&self, tenant: &str) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let tenant = tenant.to_owned();
        self.change(move |state| {
            if state.doc.tenants.contains_key(&tenant) {
                return Err(StoreError::AlreadyExists {
                    what: "tenant",
                    name: tenant,
                });
            }
            let record = TenantRecord {
                created_at_ns: stamp_now(),
                ..TenantRecord::default()
            };
            state.doc.tenants.insert(tenant, record);
            Ok(())
        })
        .await
    }

    async fn list_tenants(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.read(|state| state.doc.tenants.keys().cloned().collect()))
    }

    async fn create_project(&self, scope: &Scope) -> Result<(), StoreError> {
        let scope = scope.clone();
        self.change(move |state| {
            let tenant = tenant_mut(state, scope.tenant())?;
            if tenant.projects.contains_key(scope.project()) {
                return Err(StoreError::AlreadyExists {
                    what: "project",
                    name: scope.to_string(),
                });
            }
            tenant
                .projects
                .insert(scope.project().to_owned(), stamp_now());
            Ok(())
        })
        .await
    }

    async fn list_projects(&self, tenant: &str) -> Result<Vec<String>, StoreError> {
        Scope::validate_tenant(tenant)?;
        Ok(self.read(|state| {
            state
                .doc
                .tenants
                .get(tenant)
                .map(|t| t.projects.keys().cloned().collect())
                .unwrap_or_default()
        }))
    }

    async fn create_api_key(
        &self,
        scope: &Scope,
        label: &str,
        roles: Roles,
    ) -> Result<NewApiKey, StoreError> {
        validate_label(label)?;
        validate_roles(roles)?;
        let key = ApiKey::generate()?;
        let (scope, label) = (scope.clone(), label.to_owned());
        self.change(move |state| {
            let project_exists = state
                .doc
                .tenants
                .get(scope.tenant())
                .is_some_and(|t| t.projects.contains_key(scope.project()));
            if !project_exists {
                return Err(StoreError::NotFound {
                    what: "project",
                    name: scope.to_string(),
                });
            }
            let id = state.doc.keys.len() as i64 + 1;
            let created_at_ns = stamp_now();
            let hash = key.hash();
            state.by_hash.insert(hash, state.doc.keys.len());
            state.doc.keys.push(KeyRecord {
                tenant: scope.tenant().to_owned(),
                id,
                project: scope.project().to_owned(),
                hash: hash.to_hex(),
                prefix: key.prefix().to_owned(),
                label: label.clone(),
                roles: roles.bits(),
                created_at_ns,
                last_used_ns: None,
                revoked_at_ns: None,
            });
            let info = ApiKeyInfo {
                id,
                scope,
                label,
                prefix: key.prefix().to_owned(),
                roles,
                created_at: time_of(created_at_ns),
                last_used: None,
                revoked: false,
            };
            Ok(NewApiKey { key, info })
        })
        .await
    }

    async fn list_api_keys(&self, tenant: &str) -> Result<Vec<ApiKeyInfo>, StoreError> {
        Scope::validate_tenant(tenant)?;
        self.read(|state| {
            state
                .doc
                .keys
                .iter()
                .filter(|k| k.tenant == tenant)
                .map(|k| {
                    Ok(ApiKeyInfo {
                        id: k.id,
                        scope: Scope::new(&k.tenant, &k.project)?,
                        label: k.label.clone(),
                        prefix: k.prefix.clone(),
                        roles: roles_of(&self.inner.path, k)?,
                        created_at: time_of(k.created_at_ns),
                        last_used: k.last_used_ns.map(time_of),
                        revoked: k.revoked_at_ns.is_some(),
                    })
                })
                .collect()
        })
    }

    async fn revoke_api_key(&self, tenant: &str, id: i64) -> Result<bool, StoreError> {
        Scope::validate_tenant(tenant)?;
        let tenant = tenant.to_owned();
        self.change(move |state| {
            let live = state
                .doc
                .keys
                .iter_mut()
                .find(|k| k.tenant == tenant && k.id == id && k.revoked_at_ns.is_none());
            Ok(match live {
                Some(key) => {
                    key.revoked_at_ns = Some(stamp_now());
                    true
                }
                None => false,
            })
        })
        .await
    }

    async fn grant_of(&self, hash: &KeyHash) -> Result<Option<Grant>, StoreError> {
        self.read(|state| {
            let Some(key) = state.by_hash.get(hash).map(|&i| &state.doc.keys[i]) else {
                return Ok(None);
            };
            if key.revoked_at_ns.is_some() {
                return Ok(None);
            }
            Ok(Some(Grant {
                scope: Scope::new(&key.tenant, &key.project)?,
                roles: roles_of(&self.inner.path, key)?,
                key_id: key.id,
            }))
        })
    }

    async fn record_key_use(
        &self,
        tenant: &str,
        id: i64,
        at: SystemTime,
    ) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let tenant = tenant.to_owned();
        self.change(move |state| {
            if let Some(key) = state
                .doc
                .keys
                .iter_mut()
                .find(|k| k.tenant == tenant && k.id == id)
            {
                key.last_used_ns = Some(ns_of(at));
            }
            Ok(())
        })
        .await
    }

    async fn set_tenant_limits(
        &self,
        tenant: &str,
        limits: &TenantLimits,
    ) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let (tenant, limits) = (tenant.to_owned(), *limits);
        self.change(move |state| {
            tenant_mut(state, &tenant)?.limits = limits;
            Ok(())
        })
        .await
    }

    async fn tenant_limits(&self, tenant: &str) -> Result<TenantLimits, StoreError> {
        Scope::validate_tenant(tenant)?;
        self.read(|state| {
            state
                .doc
                .tenants
                .get(tenant)
                .map(|t| t.limits)
                .ok_or_else(|| StoreError::NotFound {
                    what: "tenant",
                    name: tenant.to_owned(),
                })
        })
    }
}

fn tenant_mut<'a>(state: &'a mut State, tenant: &str) -> Result<&'a mut TenantRecord, StoreError> {
    state
        .doc
        .tenants
        .get_mut(tenant)
        .ok_or_else(|| StoreError::NotFound {
            what: "tenant",
            name: tenant.to_owned(),
        })
}

fn roles_of(path: &Path, key: &KeyRecord) -> Result<Roles, StoreError> {
    Roles::from_bits(key.roles).ok_or_else(|| corrupt(path, "a key's roles"))
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Document, StoreError> {
    let doc: Document = serde_json::from_slice(bytes).map_err(|e| StoreError::Backend {
        backend: "metadata file",
        op: "parse the metadata document",
        source: format!("{}: {e}", path.display()).into(),
    })?;
    if doc.format_version != FORMAT_VERSION {
        return Err(StoreError::IncompatibleFormat {
            path: path.to_owned(),
            found: doc.format_version,
            expected: FORMAT_VERSION,
        });
    }
    Ok(doc)
}

fn corrupt(path: &Path, what: &str) -> StoreError {
    StoreError::Backend {
        backend: "metadata file",
        op: "read the metadata document",
        source: format!("{}: {what} does not decode", path.display()).into(),
    }
}

/// Writes `doc` to `path` so that a crash leaves the old file or the new
/// one: temporary file, fsync, rename, fsync of the directory.
fn write_document(path: &Path, doc: &Document) -> Result<(), StoreError> {
    let io = |op, path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io { op, path, source }
    };
    let bytes = serde_json::to_vec_pretty(doc).expect("the document serializes");
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let temp = path.with_extension("json.tmp");
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Owner only: the file holds key hashes, which are not secrets,
        // but names of every tenant.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io("create", &temp))?;
        file.write_all(&bytes).map_err(io("write", &temp))?;
        file.sync_all().map_err(io("sync", &temp))?;
    }
    std::fs::rename(&temp, path).map_err(io("rename", &temp))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))
}

/// [`kiln_model::now_ns`] as the metadata's records keep times.
fn stamp_now() -> u64 {
    u64::try_from(kiln_model::now_ns()).unwrap_or(0)
}

fn ns_of(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

fn time_of(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards "what kiln up created is there after a restart".
    #[tokio::test]
    async fn survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.json");
        let store = EmbeddedMetadataStore::open(&path).unwrap();
        store.create_tenant("acme").await.unwrap();
        let scope = Scope::new("acme", "web").unwrap();
        store.create_project(&scope).await.unwrap();
        let key = store
            .create_api_key(&scope, "agents", Roles::INGEST_READ)
            .await
            .unwrap();
        drop(store);
        let again = EmbeddedMetadataStore::open(&path).unwrap();
        let grant = again.verify_api_key(key.key.expose()).await.unwrap();
        assert_eq!(grant.map(|g| g.scope), Some(scope));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(key.key.expose()), "the key itself is stored");
    }

    #[tokio::test]
    async fn damaged_files_are_refused_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.json");
        std::fs::write(&path, b"{\"format_version\": 1, \"tenants\": ").unwrap();
        let err = EmbeddedMetadataStore::open(&path).unwrap_err();
        assert!(format!("{:?}", err).contains("metadata.json"), "{err:?}");
        std::fs::write(&path, br#"{"format_version":9,"tenants":{},"keys":[]}"#).unwrap();
        assert!(matches!(
            EmbeddedMetadataStore::open(&path),
            Err(StoreError::IncompatibleFormat { found: 9, .. })
        ));
    }

    #[tokio::test]
    async fn conforms() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedMetadataStore::open(&dir.path().join("metadata.json")).unwrap();
        crate::conformance::metadata_store(&store).await;
    }
}
