//! Object keys: validated relative paths, safe as file paths and S3 keys.

use std::fmt;

use kiln_model::FileId;

use crate::error::StoreError;
use crate::scope::Scope;

/// Longest key, in bytes (S3 allows 1024).
pub const MAX_KEY_LEN: usize = 1024;

/// The key of one object: a '/'-separated relative path.
///
/// Validation makes a key safe to map onto a file system: no empty, `.` or
/// `..` segments, no leading '/', no backslash, NUL or control characters,
/// at most [`MAX_KEY_LEN`] bytes. A key can therefore never name anything
/// outside the store's root. Keys order like their strings, which is the
/// order [`ObjectStore::list`](crate::ObjectStore::list) returns.
///
/// # Examples
///
/// ```
/// use kiln_model::FileId;
/// use kiln_storage::ObjectKey;
///
/// let key = ObjectKey::tenant_symbols("acme", FileId(0xab))?;
/// assert_eq!(key.as_str(), "tenants/acme/000000000000000000000000000000ab.ksym");
/// assert!(ObjectKey::new("../etc/passwd").is_err());
/// # Ok::<(), kiln_storage::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey(String);

impl ObjectKey {
    /// A key, once `key` passes validation; the error names the problem.
    pub fn new(key: &str) -> Result<ObjectKey, StoreError> {
        validate(key).map_err(|reason| StoreError::InvalidKey {
            key: shorten(key),
            reason,
        })?;
        Ok(ObjectKey(key.to_owned()))
    }

    /// Where a tenant's own symbol file for `file_id` lives:
    /// `tenants/<tenant>/<file_id>.ksym`. Fails only for an invalid tenant.
    pub fn tenant_symbols(tenant: &str, file_id: FileId) -> Result<ObjectKey, StoreError> {
        Scope::validate_tenant(tenant)?;
        Ok(ObjectKey(format!("tenants/{tenant}/{file_id}.ksym")))
    }

    /// Where the shared symbol file of a public (distro) library lives:
    /// `global/<file_id>.ksym`.
    pub fn global_symbols(file_id: FileId) -> ObjectKey {
        ObjectKey(format!("global/{file_id}.ksym"))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's '/'-separated segments, none of them empty.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

fn validate(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("it is empty".into());
    }
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "it is {} bytes long, the limit is {MAX_KEY_LEN}",
            key.len()
        ));
    }
    if key.starts_with('/') {
        return Err("it starts with '/'; keys are relative paths".into());
    }
    for c in key.chars() {
        match c {
            '\\' => return Err("it contains a backslash; segments are separated by '/'".into()),
            '\0' => return Err("it contains a NUL character".into()),
            c if c.is_control() => {
                return Err(format!(
                    "it contains the control character U+{:04X}",
                    u32::from(c)
                ));
            }
            _ => {}
        }
    }
    for segment in key.split('/') {
        match segment {
            "" => return Err("it has an empty path segment (\"//\" or a trailing '/')".into()),
            "." | ".." => return Err(format!("it has a {segment:?} path segment")),
            _ => {}
        }
    }
    Ok(())
}

/// The key for an error message: long keys are cut at 200 bytes.
fn shorten(key: &str) -> String {
    const KEEP: usize = 200;
    if key.len() <= KEEP {
        return key.to_owned();
    }
    let mut end = KEEP;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(key: &str) -> String {
        match ObjectKey::new(key) {
            Err(StoreError::InvalidKey { reason, .. }) => reason,
            other => panic!("{key:?} was accepted: {other:?}"),
        }
    }

    #[test]
    fn accepts_ordinary_paths() {
        for key in [
            "a",
            "a/b/c.ksym",
            ".hidden",
            "a/..b/c..",
            "ünï/cödé",
            "a b/c",
        ] {
            assert_eq!(ObjectKey::new(key).unwrap().as_str(), key);
        }
        ObjectKey::new(&"k".repeat(MAX_KEY_LEN)).unwrap();
    }

    /// Guards the file-system mapping of the local store: none of these may
    /// name a path outside its root.
    #[test]
    fn refuses_escapes_and_oddities_with_a_reason() {
        assert!(reason("").contains("empty"));
        assert!(reason("/etc/passwd").contains("starts with '/'"));
        assert!(reason("../x").contains("\"..\" path segment"));
        assert!(reason("a/../../x").contains("\"..\" path segment"));
        assert!(reason("a/./b").contains("\".\" path segment"));
        assert!(reason(".").contains("\".\" path segment"));
        assert!(reason("a//b").contains("empty path segment"));
        assert!(reason("a/").contains("empty path segment"));
        assert!(reason("a\\..\\b").contains("backslash"));
        assert!(reason("a\0b").contains("NUL"));
        assert!(reason("a\nb").contains("U+000A"));
        assert!(reason("a\u{7f}b").contains("U+007F"));
        assert!(reason(&"k".repeat(MAX_KEY_LEN + 1)).contains("1025 bytes"));
    }

    #[test]
    fn long_keys_are_shortened_in_errors() {
        let err = ObjectKey::new(&format!("/{}", "é".repeat(600))).unwrap_err();
        let StoreError::InvalidKey { key, .. } = err else {
            panic!("{err:?}")
        };
        assert!(key.len() <= 204 && key.ends_with('…'));
    }

    #[test]
    fn symbol_keys_follow_the_design() {
        let id = FileId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(
            ObjectKey::tenant_symbols("acme", id).unwrap().as_str(),
            "tenants/acme/0123456789abcdef0011223344556677.ksym"
        );
        assert_eq!(
            ObjectKey::global_symbols(id).as_str(),
            "global/0123456789abcdef0011223344556677.ksym"
        );
        assert!(ObjectKey::tenant_symbols("../x", id).is_err());
        // The helpers bypass `new`; their output must still pass it.
        ObjectKey::new(ObjectKey::tenant_symbols("a", id).unwrap().as_str()).unwrap();
        ObjectKey::new(ObjectKey::global_symbols(id).as_str()).unwrap();
    }
}
