//! The `MetadataStore` trait: tenants, projects, API keys and per-tenant
//! limits.

use std::time::SystemTime;

use async_trait::async_trait;

use crate::access::{Grant, Roles};
use crate::api_key::{ApiKey, KeyHash};
use crate::error::StoreError;
use crate::limits::TenantLimits;
use crate::scope::Scope;

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
    /// What it may do.
    pub roles: Roles,
    /// When it was created.
    pub created_at: SystemTime,
    /// When a request last presented it, as recorded (callers record at
    /// most about once a minute per key); `None` when never.
    pub last_used: Option<SystemTime>,
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

/// Tenants, projects, API keys and per-tenant limits: who may write and
/// read which scope, and how much.
///
/// Implementations: [`EmbeddedMetadataStore`](crate::EmbeddedMetadataStore)
/// (one file, for `kiln up`) and [`PostgresMetadataStore`](crate::PostgresMetadataStore).
/// Both pass `conformance::metadata_store` (feature `conformance`).
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

    /// Creates an API key granting `roles` on `scope`, which must exist
    /// ([`StoreError::NotFound`] otherwise). `label` is free text of at
    /// most [`MAX_LABEL_LEN`] bytes without control characters; `roles`
    /// must not be empty.
    async fn create_api_key(
        &self,
        scope: &Scope,
        label: &str,
        roles: Roles,
    ) -> Result<NewApiKey, StoreError>;

    /// The tenant's keys, revoked ones included, oldest first.
    async fn list_api_keys(&self, tenant: &str) -> Result<Vec<ApiKeyInfo>, StoreError>;

    /// Revokes the tenant's key `id`. `false` when the tenant has no live
    /// key of that id (never created, another tenant's, or already revoked).
    async fn revoke_api_key(&self, tenant: &str, id: i64) -> Result<bool, StoreError>;

    /// What the key with hash `hash` grants, or `None` when it grants
    /// nothing (unknown or revoked).
    async fn grant_of(&self, hash: &KeyHash) -> Result<Option<Grant>, StoreError>;

    /// What `key` grants, or `None` when it grants nothing (unknown,
    /// malformed or revoked). The one way a request gets its tenant.
    async fn verify_api_key(&self, key: &str) -> Result<Option<Grant>, StoreError> {
        // A string not shaped like a key is refused without a lookup.
        match KeyHash::of_key(key) {
            Some(hash) => self.grant_of(&hash).await,
            None => Ok(None),
        }
    }

    /// Records that the tenant's key `id` was presented at `at` (shown as
    /// [`ApiKeyInfo::last_used`]). Unknown keys are ignored.
    async fn record_key_use(&self, tenant: &str, id: i64, at: SystemTime)
    -> Result<(), StoreError>;

    /// Sets the tenant's limits (replacing all of them: a `None` field
    /// means the server's default); [`StoreError::NotFound`] when the
    /// tenant does not exist.
    async fn set_tenant_limits(
        &self,
        tenant: &str,
        limits: &TenantLimits,
    ) -> Result<(), StoreError>;

    /// The tenant's limits (all `None` when never set);
    /// [`StoreError::NotFound`] when the tenant does not exist.
    async fn tenant_limits(&self, tenant: &str) -> Result<TenantLimits, StoreError>;
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

/// Checks a new key's roles: a key that may do nothing is a mistake.
pub(crate) fn validate_roles(roles: Roles) -> Result<(), StoreError> {
    match roles.is_empty() {
        true => Err(StoreError::InvalidArgument {
            what: "api key roles",
            reason: "a key needs at least one role (ingest, read, admin)".to_owned(),
        }),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_checked() {
        validate_label("prod agents ∞").unwrap();
        validate_label("").unwrap();
        assert!(validate_label("a\0b").is_err());
        assert!(validate_label("line\nbreak").is_err());
        assert!(validate_label(&"x".repeat(MAX_LABEL_LEN + 1)).is_err());
    }
}
