//! [`MetadataStore`] on PostgreSQL: tenants, projects, API keys and tenant
//! limits, through the statements of [`schema`].

use std::time::SystemTime;

use async_trait::async_trait;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{PostgresMetadataStore, schema};
use crate::access::{Grant, Roles};
use crate::api_key::{ApiKey, KeyHash};
use crate::error::{DecodeError, StoreError};
use crate::limits::TenantLimits;
use crate::metadata::{ApiKeyInfo, MetadataStore, NewApiKey, validate_label, validate_roles};
use crate::scope::Scope;

#[async_trait]
impl MetadataStore for PostgresMetadataStore {
    async fn create_tenant(&self, tenant: &str) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "create a tenant";
        let client = self.db.client(op).await?;
        let inserted = prepared_execute(&client, schema::INSERT_TENANT, &[&tenant])
            .await
            .map_err(|e| StoreError::postgres(op, e))?;
        if inserted == 0 {
            return Err(StoreError::AlreadyExists {
                what: "tenant",
                name: tenant.to_owned(),
            });
        }
        Ok(())
    }

    async fn list_tenants(&self) -> Result<Vec<String>, StoreError> {
        let op = "list tenants";
        let client = self.db.client(op).await?;
        prepared_query(&client, schema::LIST_TENANTS, &[])
            .await
            .and_then(|rows| rows.iter().map(|row| row.try_get(0)).collect())
            .map_err(|e| StoreError::postgres(op, e))
    }

    async fn create_project(&self, scope: &Scope) -> Result<(), StoreError> {
        let op = "create a project";
        let client = self.db.client(op).await?;
        let inserted = prepared_execute(
            &client,
            schema::INSERT_PROJECT,
            &[&scope.tenant(), &scope.project()],
        )
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::FOREIGN_KEY_VIOLATION) => StoreError::NotFound {
                what: "tenant",
                name: scope.tenant().to_owned(),
            },
            _ => StoreError::postgres(op, e),
        })?;
        if inserted == 0 {
            return Err(StoreError::AlreadyExists {
                what: "project",
                name: scope.to_string(),
            });
        }
        Ok(())
    }

    async fn list_projects(&self, tenant: &str) -> Result<Vec<String>, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "list projects";
        let client = self.db.client(op).await?;
        prepared_query(&client, schema::LIST_PROJECTS, &[&tenant])
            .await
            .and_then(|rows| rows.iter().map(|row| row.try_get(0)).collect())
            .map_err(|e| StoreError::postgres(op, e))
    }

    async fn create_api_key(
        &self,
        scope: &Scope,
        label: &str,
        roles: Roles,
    ) -> Result<NewApiKey, StoreError> {
        validate_label(label)?;
        validate_roles(roles)?;
        let op = "create an api key";
        let key = ApiKey::generate()?;
        let hash = key.hash();
        let client = self.db.client(op).await?;
        // `RETURNING` gives exactly one row, or the insert failed.
        let row = prepared_query_one(
            &client,
            schema::INSERT_API_KEY,
            &[
                &scope.tenant(),
                &scope.project(),
                &&hash.0[..],
                &key.prefix(),
                &label,
                &i16::from(roles.bits()),
            ],
        )
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::FOREIGN_KEY_VIOLATION) => StoreError::NotFound {
                what: "project",
                name: scope.to_string(),
            },
            _ => StoreError::postgres(op, e),
        })?;
        let pg = |e| StoreError::postgres(op, e);
        let info = ApiKeyInfo {
            id: row.try_get(0).map_err(pg)?,
            scope: scope.clone(),
            label: label.to_owned(),
            prefix: key.prefix().to_owned(),
            roles,
            created_at: row.try_get(1).map_err(pg)?,
            last_used: None,
            revoked: false,
        };
        Ok(NewApiKey { key, info })
    }

    async fn list_api_keys(&self, tenant: &str) -> Result<Vec<ApiKeyInfo>, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "list api keys";
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let rows = prepared_query(&client, schema::LIST_API_KEYS, &[&tenant])
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|row| {
                let project: String = row.try_get(1).map_err(pg)?;
                let id = row.try_get(0).map_err(pg)?;
                Ok(ApiKeyInfo {
                    id,
                    scope: Scope::new(tenant, project)?,
                    label: row.try_get(2).map_err(pg)?,
                    prefix: row.try_get(3).map_err(pg)?,
                    roles: roles_of(tenant, id, row.try_get(6).map_err(pg)?)?,
                    created_at: row.try_get::<_, SystemTime>(4).map_err(pg)?,
                    last_used: row.try_get(7).map_err(pg)?,
                    revoked: row.try_get(5).map_err(pg)?,
                })
            })
            .collect()
    }

    async fn revoke_api_key(&self, tenant: &str, id: i64) -> Result<bool, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "revoke an api key";
        let client = self.db.client(op).await?;
        let revoked = prepared_execute(&client, schema::REVOKE_API_KEY, &[&tenant, &id])
            .await
            .map_err(|e| StoreError::postgres(op, e))?;
        Ok(revoked > 0)
    }

    async fn grant_of(&self, hash: &KeyHash) -> Result<Option<Grant>, StoreError> {
        let op = "verify an api key";
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let rows = prepared_query(&client, schema::GRANT_OF_KEY, &[&&hash.0[..]])
            .await
            .map_err(pg)?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let tenant: String = row.try_get(0).map_err(pg)?;
        let project: String = row.try_get(1).map_err(pg)?;
        let key_id: i64 = row.try_get(3).map_err(pg)?;
        Ok(Some(Grant {
            roles: roles_of(&tenant, key_id, row.try_get(2).map_err(pg)?)?,
            scope: Scope::new(tenant, project)?,
            key_id,
        }))
    }

    async fn record_key_use(
        &self,
        tenant: &str,
        id: i64,
        at: SystemTime,
    ) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "record an api key's use";
        let client = self.db.client(op).await?;
        prepared_execute(&client, schema::RECORD_KEY_USE, &[&tenant, &id, &at])
            .await
            .map_err(|e| StoreError::postgres(op, e))?;
        Ok(())
    }

    async fn set_tenant_limits(
        &self,
        tenant: &str,
        limits: &TenantLimits,
    ) -> Result<(), StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "set tenant limits";
        let big = |value: Option<u64>, what: &'static str| {
            value
                .map(|v| {
                    i64::try_from(v).map_err(|_| StoreError::InvalidArgument {
                        what,
                        reason: format!("{v} is above the largest storable value {}", i64::MAX),
                    })
                })
                .transpose()
        };
        let small = |value: Option<u32>, what: &'static str| {
            value
                .map(|v| {
                    i32::try_from(v).map_err(|_| StoreError::InvalidArgument {
                        what,
                        reason: format!("{v} is above the largest storable value {}", i32::MAX),
                    })
                })
                .transpose()
        };
        let samples = big(limits.ingest_samples_per_s, "ingest_samples_per_s")?;
        let bytes = big(limits.ingest_bytes_per_s, "ingest_bytes_per_s")?;
        let queries = small(limits.max_concurrent_queries, "max_concurrent_queries")?;
        let retention = small(limits.retention_days, "retention_days")?;
        let stored = big(limits.max_stored_bytes, "max_stored_bytes")?;
        let client = self.db.client(op).await?;
        prepared_execute(
            &client,
            schema::UPSERT_TENANT_LIMITS,
            &[&tenant, &samples, &bytes, &queries, &retention, &stored],
        )
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::FOREIGN_KEY_VIOLATION) => StoreError::NotFound {
                what: "tenant",
                name: tenant.to_owned(),
            },
            _ => StoreError::postgres(op, e),
        })?;
        Ok(())
    }

    async fn tenant_limits(&self, tenant: &str) -> Result<TenantLimits, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "read tenant limits";
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let rows = prepared_query(&client, schema::TENANT_LIMITS, &[&tenant])
            .await
            .map_err(pg)?;
        let Some(row) = rows.first() else {
            return Err(StoreError::NotFound {
                what: "tenant",
                name: tenant.to_owned(),
            });
        };
        // Written from u64 and u32 values, so never negative; a negative
        // one (written by hand) reads as no limit rather than a huge one.
        let big = |i| -> Result<Option<u64>, StoreError> {
            Ok(row
                .try_get::<_, Option<i64>>(i)
                .map_err(pg)?
                .and_then(|v| u64::try_from(v).ok()))
        };
        let small = |i| -> Result<Option<u32>, StoreError> {
            Ok(row
                .try_get::<_, Option<i32>>(i)
                .map_err(pg)?
                .and_then(|v| u32::try_from(v).ok()))
        };
        Ok(TenantLimits {
            ingest_samples_per_s: big(0)?,
            ingest_bytes_per_s: big(1)?,
            max_concurrent_queries: small(2)?,
            retention_days: small(3)?,
            max_stored_bytes: big(4)?,
        })
    }
}

/// A key's stored roles, or `Corrupt` naming the key.
fn roles_of(tenant: &str, id: i64, bits: i16) -> Result<Roles, StoreError> {
    u8::try_from(bits)
        .ok()
        .and_then(Roles::from_bits)
        .ok_or_else(|| StoreError::Corrupt {
            what: "api key roles",
            key: format!("{tenant}/{id}"),
            reason: DecodeError::OutOfRange {
                field: "roles",
                value: bits as u64,
            },
        })
}

/// Prepares (once per connection) and executes `sql`.
async fn prepared_execute(
    client: &deadpool_postgres::Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, params).await
}

/// Prepares (once per connection) and runs query `sql`, which returns
/// exactly one row (an error otherwise).
async fn prepared_query_one(
    client: &deadpool_postgres::Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_one(&statement, params).await
}

/// Prepares (once per connection) and runs query `sql`.
async fn prepared_query(
    client: &deadpool_postgres::Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query(&statement, params).await
}
