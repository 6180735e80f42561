//! The local object store: one file per object under a root directory.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::StoreError;
use crate::object::ObjectStore;
use crate::object_key::ObjectKey;

/// Names of files being written start with this; [`list`](ObjectStore::list)
/// skips them and keys may not use it, so a half-written object is never
/// seen as an object.
const TEMP_PREFIX: &str = ".kiln-tmp.";

/// Makes temporary names unique within this process (the process id makes
/// them unique between processes sharing a root).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// An [`ObjectStore`] in a local directory: the object `a/b/c` is the file
/// `<root>/a/b/c`.
///
/// Keys are validated ([`ObjectKey`]), so no key names a path outside the
/// root. A put writes a temporary file in the object's directory, fsyncs it,
/// renames it over the object and fsyncs the directory: readers see the old
/// object or the new one, and after a crash one of the two is there.
///
/// Unlike S3, a file system cannot hold both `a` and `a/b`: putting one
/// while the other exists fails with [`StoreError::Io`]. Kiln's own keys
/// (`global/<id>.ksym`, `tenants/<t>/<id>.ksym`) never collide that way.
/// Directories emptied by deletes are left in place (removing them would
/// race with a concurrent put into them).
///
/// The methods run file system calls on Tokio's blocking pool, so they must
/// be called from within a Tokio runtime.
#[derive(Debug, Clone)]
pub struct LocalObjectStore {
    root: Arc<Path>,
}

impl LocalObjectStore {
    /// Opens (creating when missing) the store rooted at `root`.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(root).map_err(|e| StoreError::io("create", root, e))?;
        // Absolute, so that a later change of the working directory cannot
        // move the store.
        let root = fs::canonicalize(root).map_err(|e| StoreError::io("resolve", root, e))?;
        Ok(LocalObjectStore { root: root.into() })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of `key`. Validated keys are relative and free of `..`, so
    /// the path is inside the root; keys that would look like temporary
    /// files are refused.
    fn path_of(&self, key: &ObjectKey) -> Result<PathBuf, StoreError> {
        if key.segments().any(|s| s.starts_with(TEMP_PREFIX)) {
            return Err(StoreError::InvalidKey {
                key: key.to_string(),
                reason: format!(
                    "path segments starting with {TEMP_PREFIX:?} are reserved by the local object store"
                ),
            });
        }
        Ok(self.root.join(key.as_str()))
    }

    /// Runs blocking file system work on Tokio's blocking pool.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        tokio::task::spawn_blocking(work).await?
    }
}

#[async_trait]
impl ObjectStore for LocalObjectStore {
    async fn put(&self, key: &ObjectKey, bytes: Bytes) -> Result<(), StoreError> {
        let path = self.path_of(key)?;
        let root = Arc::clone(&self.root);
        self.run(move || write_atomically(&root, &path, &bytes))
            .await
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>, StoreError> {
        let path = self.path_of(key)?;
        self.run(move || match fs::read(&path) {
            Ok(bytes) => Ok(Some(Bytes::from(bytes))),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(StoreError::io("read", path, e)),
        })
        .await
    }

    async fn exists(&self, key: &ObjectKey) -> Result<bool, StoreError> {
        let path = self.path_of(key)?;
        self.run(move || match fs::metadata(&path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if is_absent(&e) => Ok(false),
            Err(e) => Err(StoreError::io("inspect", path, e)),
        })
        .await
    }

    async fn delete(&self, key: &ObjectKey) -> Result<(), StoreError> {
        let path = self.path_of(key)?;
        self.run(move || {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if is_absent(&e) => return Ok(()),
                Err(e) => return Err(StoreError::io("delete", path, e)),
            }
            // Make the removal itself durable.
            sync_parent(&path)
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>, StoreError> {
        let root = Arc::clone(&self.root);
        let prefix = prefix.to_owned();
        self.run(move || list_under(&root, &prefix)).await
    }
}

/// Whether an error means "no object there": nothing at the path, a file
/// where a directory was expected, or a directory where the file would be.
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory | io::ErrorKind::IsADirectory
    )
}

/// Creates the missing directories between `root` and `path`'s parent,
/// writes `bytes` to a temporary file beside `path`, and renames it into
/// place, fsyncing every step that a crash could otherwise lose.
fn write_atomically(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(root);
    create_dirs(root, dir)?;
    let temp = dir.join(format!(
        "{TEMP_PREFIX}{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_synced(&temp, bytes)
        .map_err(|e| StoreError::io("write", &temp, e))
        .and_then(|()| fs::rename(&temp, path).map_err(|e| StoreError::io("rename", path, e)));
    if let Err(e) = written {
        // Best effort: the write already failed, and list skips leftovers.
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    sync_dir(dir)
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = File::create_new(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Creates each missing directory from `root` down to `dir`, fsyncing its
/// parent after creating it so the new entry survives a crash.
fn create_dirs(root: &Path, dir: &Path) -> Result<(), StoreError> {
    let Ok(relative) = dir.strip_prefix(root) else {
        return Ok(());
    };
    let mut current = root.to_path_buf();
    for part in relative.components() {
        let parent = current.clone();
        current.push(part);
        match fs::create_dir(&current) {
            Ok(()) => sync_dir(&parent)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !current.is_dir() {
                    return Err(StoreError::io(
                        "create directory",
                        &current,
                        io::Error::new(
                            io::ErrorKind::NotADirectory,
                            "an object already has this name",
                        ),
                    ));
                }
            }
            Err(e) => return Err(StoreError::io("create directory", &current, e)),
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("sync directory", dir, e))
}

fn sync_parent(path: &Path) -> Result<(), StoreError> {
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// The keys starting with `prefix`, sorted. Walks only the directory the
/// prefix fully names (everything before its last '/') and, below it, only
/// directories that can hold matching keys.
fn list_under(root: &Path, prefix: &str) -> Result<Vec<ObjectKey>, StoreError> {
    let (start_key, start_dir) = match prefix.rsplit_once('/') {
        None => (String::new(), root.to_path_buf()),
        Some((dir, _)) => match ObjectKey::new(dir) {
            Ok(dir) => (format!("{dir}/"), root.join(dir.as_str())),
            // No valid key lies below an invalid path (`../`, `a//`, …).
            Err(_) => return Ok(Vec::new()),
        },
    };
    let mut keys = Vec::new();
    // (directory, the key prefix its entries get)
    let mut pending = vec![(start_dir, start_key)];
    while let Some((dir, dir_key)) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if is_absent(&e) => continue,
            Err(e) => return Err(StoreError::io("list", dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("list", &dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::warn!(dir = %dir.display(), name = ?entry.file_name(), "skipping a file name that is not UTF-8");
                continue;
            };
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let key = format!("{dir_key}{name}");
            let file_type = entry
                .file_type()
                .map_err(|e| StoreError::io("inspect", entry.path(), e))?;
            if file_type.is_dir() {
                let key_dir = format!("{key}/");
                if key_dir.starts_with(prefix) || prefix.starts_with(&key_dir) {
                    pending.push((entry.path(), key_dir));
                }
            } else if file_type.is_file() && key.starts_with(prefix) {
                // Files put there by hand may not be valid keys; they are
                // not objects.
                if let Ok(key) = ObjectKey::new(&key) {
                    keys.push(key);
                }
            }
        }
    }
    keys.sort();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> (tempfile::TempDir, LocalObjectStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalObjectStore::open(&dir.path().join("objects")).unwrap();
        (dir, store)
    }

    fn key(k: &str) -> ObjectKey {
        ObjectKey::new(k).unwrap()
    }

    /// Objects are plain files at the key's path.
    #[tokio::test]
    async fn objects_are_files_at_their_key_path() {
        let (_dir, store) = open();
        store
            .put(&key("tenants/a/x.ksym"), Bytes::from_static(b"sym"))
            .await
            .unwrap();
        let path = store.root().join("tenants").join("a").join("x.ksym");
        assert_eq!(fs::read(path).unwrap(), b"sym");
    }

    /// Escapes are refused when the key is made, before any path exists.
    #[test]
    fn traversal_is_refused() {
        for bad in ["../x", "/etc/passwd", "a/../../x", "a\\..\\x"] {
            assert!(ObjectKey::new(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn temporary_names_are_reserved_and_hidden() {
        let (_dir, store) = open();
        let err = store
            .put(&key("a/.kiln-tmp.1.2"), Bytes::new())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("invalid object key"), "{err}");

        // A temporary file left by a crash is not an object.
        store.put(&key("a/b"), Bytes::new()).await.unwrap();
        fs::write(store.root().join("a/.kiln-tmp.9.9"), b"partial").unwrap();
        assert_eq!(store.list("").await.unwrap(), vec![key("a/b")]);
        assert_eq!(store.list("a/").await.unwrap(), vec![key("a/b")]);
    }

    #[tokio::test]
    async fn no_temporary_file_is_left_behind() {
        let (_dir, store) = open();
        store
            .put(&key("d/o"), Bytes::from_static(b"1"))
            .await
            .unwrap();
        store
            .put(&key("d/o"), Bytes::from_static(b"2"))
            .await
            .unwrap();
        let names: Vec<_> = fs::read_dir(store.root().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["o"]);
    }

    /// A file system cannot hold both `a` and `a/b`: the put fails with an
    /// error naming the path, and nothing else changes.
    #[tokio::test]
    async fn object_and_directory_of_the_same_name_conflict_cleanly() {
        let (_dir, store) = open();
        store
            .put(&key("a/b"), Bytes::from_static(b"x"))
            .await
            .unwrap();
        let err = store.put(&key("a"), Bytes::new()).await.unwrap_err();
        assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
        let err = store.put(&key("a/b/c"), Bytes::new()).await.unwrap_err();
        assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
        // The directory `a` is not an object, and reading through the file
        // `a/b` finds nothing.
        assert_eq!(store.get(&key("a")).await.unwrap(), None);
        assert!(!store.exists(&key("a")).await.unwrap());
        assert_eq!(store.get(&key("a/b/c")).await.unwrap(), None);
        store.delete(&key("a")).await.unwrap();
        store.delete(&key("a/b/c")).await.unwrap();
        assert_eq!(store.list("").await.unwrap(), vec![key("a/b")]);
    }

    #[tokio::test]
    async fn odd_prefixes_list_nothing() {
        let (_dir, store) = open();
        store.put(&key("a/b"), Bytes::new()).await.unwrap();
        for prefix in ["../", "/a", "a//", "./a", "..", "a/b/"] {
            assert_eq!(store.list(prefix).await.unwrap(), vec![], "{prefix:?}");
        }
        assert_eq!(store.list("a/b").await.unwrap(), vec![key("a/b")]);
    }
}
