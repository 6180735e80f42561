//! The `ObjectStore` conformance suite.

use bytes::Bytes;
use kiln_model::FileId;

use super::{Check, Names, ensure, ensure_eq, run_checks};
use crate::object::ObjectStore;
use crate::object_key::ObjectKey;

/// Runs every `ObjectStore` check against `store`; panics naming each check
/// that failed.
///
/// Covers put/get/overwrite/delete/exists, sorted listing by prefix (plain
/// string prefixes, tenant prefixes that must not leak), the symbol key
/// helpers and a 20 MiB object. Objects are written under
/// `conformance/<run>/`, `tenants/<run>-…/` and `global/`; the large and
/// global ones are deleted again.
pub async fn object_store(store: &dyn ObjectStore) {
    run_checks!(
        "ObjectStore",
        store,
        [
            put_get_round_trip,
            missing_keys,
            overwrite_replaces,
            delete_removes,
            list_is_sorted_and_filtered,
            tenant_prefixes_do_not_leak,
            symbol_keys_round_trip,
            large_object,
        ]
    );
}

async fn expect_object(store: &dyn ObjectStore, key: &ObjectKey, expected: &[u8]) -> Check {
    let got = store.get(key).await?;
    ensure!(
        got.as_deref() == Some(expected),
        "get {key}: got {}, expected {} bytes",
        describe(got.as_deref()),
        expected.len()
    );
    ensure!(
        store.exists(key).await?,
        "exists {key} is false after a put"
    );
    Ok(())
}

async fn expect_absent(store: &dyn ObjectStore, key: &ObjectKey) -> Check {
    let got = store.get(key).await?;
    ensure!(
        got.is_none(),
        "get {key}: got {}, expected none",
        describe(got.as_deref())
    );
    ensure!(!store.exists(key).await?, "exists {key} is true");
    Ok(())
}

fn describe(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "none".into(),
        Some(b) if b.len() <= 32 => format!("{b:?}"),
        Some(b) => format!("{} bytes", b.len()),
    }
}

async fn put_get_round_trip(store: &dyn ObjectStore, names: &Names) -> Check {
    let every_byte: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let binary = names.key("binary");
    store.put(&binary, Bytes::from(every_byte.clone())).await?;
    expect_object(store, &binary, &every_byte).await?;

    let empty = names.key("empty");
    store.put(&empty, Bytes::new()).await?;
    expect_object(store, &empty, b"").await?;

    let deep = names.key("a/b/c/d/e.ksym");
    store.put(&deep, Bytes::from_static(b"deep")).await?;
    expect_object(store, &deep, b"deep").await
}

async fn missing_keys(store: &dyn ObjectStore, names: &Names) -> Check {
    expect_absent(store, &names.key("never-written")).await?;
    expect_absent(store, &names.key("no/such/dir/object")).await?;
    // Deleting what is not there is fine.
    store.delete(&names.key("never-written")).await?;
    store.delete(&names.key("no/such/dir/object")).await?;
    Ok(())
}

async fn overwrite_replaces(store: &dyn ObjectStore, names: &Names) -> Check {
    let key = names.key("object");
    store.put(&key, Bytes::from(vec![b'a'; 4096])).await?;
    // Shorter than the first: nothing of the old object may remain.
    store.put(&key, Bytes::from_static(b"second")).await?;
    expect_object(store, &key, b"second").await?;
    ensure_eq!(
        store.list(&names.key_prefix()).await?,
        vec![key],
        "list after an overwrite"
    );
    Ok(())
}

async fn delete_removes(store: &dyn ObjectStore, names: &Names) -> Check {
    let key = names.key("dir/object");
    let sibling = names.key("dir/sibling");
    store.put(&key, Bytes::from_static(b"x")).await?;
    store.put(&sibling, Bytes::from_static(b"y")).await?;
    store.delete(&key).await?;
    expect_absent(store, &key).await?;
    expect_object(store, &sibling, b"y").await?;
    store.delete(&key).await?;
    ensure_eq!(
        store.list(&names.key_prefix()).await?,
        vec![sibling],
        "list after a delete"
    );
    Ok(())
}

async fn list_is_sorted_and_filtered(store: &dyn ObjectStore, names: &Names) -> Check {
    let p = names.key_prefix();
    // Written out of order; "a/10" sorts between "a/1" and "a/2" as a
    // string does. No key is also a directory of another ("a/1" and
    // "a/1/x"): S3 allows that, a file system does not, and Kiln's own keys
    // never need it.
    for rest in ["b", "a/2", "c/d/e", "a/10", "ab", "a/1", "a-", "a/1x/y"] {
        store
            .put(&names.key(rest), Bytes::from(rest.as_bytes().to_vec()))
            .await?;
    }
    let keys = |rests: &[&str]| -> Vec<ObjectKey> { rests.iter().map(|r| names.key(r)).collect() };
    ensure_eq!(
        store.list(&p).await?,
        keys(&["a-", "a/1", "a/10", "a/1x/y", "a/2", "ab", "b", "c/d/e"]),
        "list {p:?}"
    );
    ensure_eq!(
        store.list(&format!("{p}a/")).await?,
        keys(&["a/1", "a/10", "a/1x/y", "a/2"]),
        "list of a directory"
    );
    ensure_eq!(
        store.list(&format!("{p}a/1")).await?,
        keys(&["a/1", "a/10", "a/1x/y"]),
        "list of a partial segment"
    );
    ensure_eq!(
        store.list(&format!("{p}a")).await?,
        keys(&["a-", "a/1", "a/10", "a/1x/y", "a/2", "ab"]),
        "list without a trailing '/' is a plain string prefix"
    );
    ensure_eq!(
        store.list(&format!("{p}c/d/e")).await?,
        keys(&["c/d/e"]),
        "list of a whole key"
    );
    ensure_eq!(
        store.list(&format!("{p}zz")).await?,
        vec![],
        "list of a prefix nothing has"
    );
    Ok(())
}

async fn tenant_prefixes_do_not_leak(store: &dyn ObjectStore, names: &Names) -> Check {
    let (a, ab) = (names.tenant("a"), names.tenant("ab"));
    let key_a = ObjectKey::tenant_symbols(&a, FileId(1))?;
    let key_ab = ObjectKey::tenant_symbols(&ab, FileId(2))?;
    store.put(&key_a, Bytes::from_static(b"a")).await?;
    store.put(&key_ab, Bytes::from_static(b"ab")).await?;
    ensure_eq!(
        store.list(&format!("tenants/{a}/")).await?,
        vec![key_a.clone()],
        "list of tenant {a}"
    );
    ensure_eq!(
        store.list(&format!("tenants/{ab}/")).await?,
        vec![key_ab.clone()],
        "list of tenant {ab}"
    );
    ensure_eq!(
        store.list(&format!("tenants/{a}")).await?,
        vec![key_a, key_ab],
        "list without the trailing '/' matches both, as a string prefix does"
    );
    Ok(())
}

async fn symbol_keys_round_trip(store: &dyn ObjectStore, names: &Names) -> Check {
    let file_id = FileId(names.unique());
    let tenant_key = ObjectKey::tenant_symbols(&names.tenant("a"), file_id)?;
    let global_key = ObjectKey::global_symbols(file_id);
    store
        .put(&tenant_key, Bytes::from_static(b"tenant"))
        .await?;
    store
        .put(&global_key, Bytes::from_static(b"global"))
        .await?;
    expect_object(store, &tenant_key, b"tenant").await?;
    expect_object(store, &global_key, b"global").await?;
    let listed = store.list(global_key.as_str()).await?;
    ensure_eq!(listed, vec![global_key.clone()], "list of a global key");
    store.delete(&global_key).await?;
    expect_absent(store, &global_key).await
}

async fn large_object(store: &dyn ObjectStore, names: &Names) -> Check {
    const LEN: usize = 20 * 1024 * 1024;
    // A pattern that differs at every offset of a small period, so a
    // misplaced chunk shows.
    let bytes: Vec<u8> = (0..LEN)
        .map(|i| (i % 251) as u8 ^ (i >> 16) as u8)
        .collect();
    let key = names.key("large");
    store.put(&key, Bytes::from(bytes.clone())).await?;
    let got = store.get(&key).await?;
    let Some(got) = got else {
        return Err(super::Failure(format!("get {key}: none after a put")));
    };
    ensure!(
        got.len() == LEN,
        "get {key}: {} bytes, expected {LEN}",
        got.len()
    );
    if let Some(i) = (0..LEN).find(|&i| got[i] != bytes[i]) {
        return Err(super::Failure(format!(
            "get {key}: differs at byte {i} of {LEN}"
        )));
    }
    store.delete(&key).await?;
    expect_absent(store, &key).await
}
