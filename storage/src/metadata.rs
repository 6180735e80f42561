//! The `MetadataStore` trait: tenants, projects, API keys, and the symbol
//! status of executables.

use std::time::SystemTime;

use async_trait::async_trait;
use kiln_model::FileId;

use crate::api_key::ApiKey;
use crate::error::StoreError;
use crate::scope::Scope;

/// Where an executable's symbols stand. The numbers are stored: never
/// renumbered, only added to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SymbolStatus {
    /// Nobody has looked for symbols yet (every executable starts here).
    Pending = 0,
    /// A symbol file is in the object store.
    Symbolized = 1,
    /// Symbols were looked for (upload, debuginfod, distro crawl) and not
    /// found.
    Missing = 2,
}

impl SymbolStatus {
    /// The status with stored number `n`.
    pub fn from_number(n: i16) -> Option<SymbolStatus> {
        match n {
            0 => Some(SymbolStatus::Pending),
            1 => Some(SymbolStatus::Symbolized),
            2 => Some(SymbolStatus::Missing),
            _ => None,
        }
    }

    /// The stored number.
    pub fn number(self) -> i16 {
        self as i16
    }
}

/// An API key as listed: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    /// The key's id within its tenant, to revoke it by.
    pub id: i64,
    /// The tenant and project the key grants.
    pub scope: Scope,
    /// What its creator called it (`"prod agents"`).
    pub label: String,
    /// Its first characters, to tell keys apart (`kiln_1a2b3c4`).
    pub prefix: String,
    /// When it was created.
    pub created_at: SystemTime,
    /// Whether it has been revoked.
    pub revoked: bool,
}

/// A key just created: the secret, shown once, and what is stored of it.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    /// The secret key. Stores keep only its hash: lost, it cannot be
    /// recovered, only replaced.
    pub key: ApiKey,
    /// What a listing shows of it.
    pub info: ApiKeyInfo,
}

/// Longest API key label, in bytes.
pub const MAX_LABEL_LEN: usize = 200;

/// Tenants, projects and API keys: who may write and read which scope; and
/// the symbol status of executables, which the symbolizer workers keep.
///
/// Implementations: `PostgresMetadataStore`. An embedded one (for
/// `kiln up`, in the fjall database) is still to come; until then a
/// single-process server runs with one fixed scope and no keys. Both are
/// meant to pass `conformance::metadata_store` (feature `conformance`).
///
/// Tenant and project names are checked as [`Scope`] checks them.
#[async_trait]
pub trait MetadataStore: Send + Sync + std::fmt::Debug + 'static {
    /// Creates a tenant; [`StoreError::AlreadyExists`] when it exists.
    async fn create_tenant(&self, tenant: &str) -> Result<(), StoreError>;

    /// Every tenant's name, sorted.
    async fn list_tenants(&self) -> Result<Vec<String>, StoreError>;

    /// Creates a project of an existing tenant: [`StoreError::NotFound`]
    /// when the tenant does not exist, [`StoreError::AlreadyExists`] when
    /// the project does.
    async fn create_project(&self, scope: &Scope) -> Result<(), StoreError>;

    /// The tenant's project names, sorted (empty for an unknown tenant).
    async fn list_projects(&self, tenant: &str) -> Result<Vec<String>, StoreError>;

    /// Creates an API key granting `scope`, which must exist
    /// ([`StoreError::NotFound`] otherwise). `label` is free text of at
    /// most [`MAX_LABEL_LEN`] bytes without control characters.
    async fn create_api_key(&self, scope: &Scope, label: &str) -> Result<NewApiKey, StoreError>;

    /// The tenant's keys, revoked ones included, oldest first.
    async fn list_api_keys(&self, tenant: &str) -> Result<Vec<ApiKeyInfo>, StoreError>;

    /// Revokes the tenant's key `id`. `false` when the tenant has no live
    /// key of that id (never created, another tenant's, or already revoked).
    async fn revoke_api_key(&self, tenant: &str, id: i64) -> Result<bool, StoreError>;

    /// The scope a key grants, or `None` when it grants nothing (unknown,
    /// malformed or revoked). The one way a request gets its tenant.
    async fn verify_api_key(&self, key: &str) -> Result<Option<Scope>, StoreError>;

    /// Sets the symbol status of the tenant's executable `file_id`; `false`
    /// when the tenant has no such executable.
    async fn set_symbol_status(
        &self,
        tenant: &str,
        file_id: FileId,
        status: SymbolStatus,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` of the tenant's executables with `status`, in file id
    /// order: the symbolizer's work queue (`Pending` ones to look up).
    async fn executables_with_status(
        &self,
        tenant: &str,
        status: SymbolStatus,
        limit: u32,
    ) -> Result<Vec<FileId>, StoreError>;

    /// Symbol status of the tenant's executables, in the order of `ids`,
    /// `None` where the tenant has no such executable.
    async fn symbol_status(
        &self,
        tenant: &str,
        ids: &[FileId],
    ) -> Result<Vec<Option<SymbolStatus>>, StoreError>;
}

/// Checks an API key label against [`MetadataStore::create_api_key`]'s rules.
pub(crate) fn validate_label(label: &str) -> Result<(), StoreError> {
    let invalid = |reason: String| StoreError::InvalidArgument {
        what: "api key label",
        reason,
    };
    if label.len() > MAX_LABEL_LEN {
        return Err(invalid(format!(
            "it is {} bytes long, the limit is {MAX_LABEL_LEN}",
            label.len()
        )));
    }
    if let Some(c) = label.chars().find(|c| c.is_control()) {
        return Err(invalid(format!("it contains the control character {c:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbol_status_numbers_round_trip() {
        for status in [
            SymbolStatus::Pending,
            SymbolStatus::Symbolized,
            SymbolStatus::Missing,
        ] {
            assert_eq!(SymbolStatus::from_number(status.number()), Some(status));
        }
        assert_eq!(SymbolStatus::from_number(3), None);
    }

    #[test]
    fn labels_are_checked() {
        validate_label("prod agents ∞").unwrap();
        validate_label("").unwrap();
        assert!(validate_label("a\0b").is_err());
        assert!(validate_label("line\nbreak").is_err());
        assert!(validate_label(&"x".repeat(MAX_LABEL_LEN + 1)).is_err());
    }
}
