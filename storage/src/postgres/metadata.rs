//! [`MetadataStore`] on PostgreSQL: tenants, projects and API keys, through
//! the statements of [`schema`].

use std::collections::HashMap;
use std::time::SystemTime;

use async_trait::async_trait;
use kiln_model::FileId;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::{PostgresMetadataStore, schema};
use crate::api_key::{self, ApiKey};
use crate::error::{DecodeError, StoreError};
use crate::metadata::{ApiKeyInfo, MetadataStore, NewApiKey, SymbolStatus, validate_label};
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

    async fn create_api_key(&self, scope: &Scope, label: &str) -> Result<NewApiKey, StoreError> {
        validate_label(label)?;
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
                &&hash[..],
                &key.prefix(),
                &label,
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
            created_at: row.try_get(1).map_err(pg)?,
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
                Ok(ApiKeyInfo {
                    id: row.try_get(0).map_err(pg)?,
                    scope: Scope::new(tenant, project)?,
                    label: row.try_get(2).map_err(pg)?,
                    prefix: row.try_get(3).map_err(pg)?,
                    created_at: row.try_get::<_, SystemTime>(4).map_err(pg)?,
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

    async fn verify_api_key(&self, key: &str) -> Result<Option<Scope>, StoreError> {
        // A string that is not shaped like a key is refused without asking
        // the database.
        let Some(hash) = api_key::hash(key) else {
            return Ok(None);
        };
        let op = "verify an api key";
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let rows = prepared_query(&client, schema::VERIFY_API_KEY, &[&&hash[..]])
            .await
            .map_err(pg)?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let tenant: String = row.try_get(0).map_err(pg)?;
        let project: String = row.try_get(1).map_err(pg)?;
        Scope::new(tenant, project).map(Some)
    }

    async fn set_symbol_status(
        &self,
        tenant: &str,
        file_id: FileId,
        status: SymbolStatus,
    ) -> Result<bool, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "set a symbol status";
        let client = self.db.client(op).await?;
        let updated = prepared_execute(
            &client,
            schema::SET_SYMBOL_STATUS,
            &[&tenant, &Uuid::from_u128(file_id.0), &status.number()],
        )
        .await
        .map_err(|e| StoreError::postgres(op, e))?;
        Ok(updated > 0)
    }

    async fn executables_with_status(
        &self,
        tenant: &str,
        status: SymbolStatus,
        limit: u32,
    ) -> Result<Vec<FileId>, StoreError> {
        Scope::validate_tenant(tenant)?;
        let op = "list executables by symbol status";
        let pg = |e| StoreError::postgres(op, e);
        let client = self.db.client(op).await?;
        let rows = prepared_query(
            &client,
            schema::EXECUTABLES_WITH_STATUS,
            &[&tenant, &status.number(), &i64::from(limit)],
        )
        .await
        .map_err(pg)?;
        rows.iter()
            .map(|row| Ok(FileId(row.try_get::<_, Uuid>(0).map_err(pg)?.as_u128())))
            .collect()
    }

    async fn symbol_status(
        &self,
        tenant: &str,
        ids: &[FileId],
    ) -> Result<Vec<Option<SymbolStatus>>, StoreError> {
        Scope::validate_tenant(tenant)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let op = "read symbol status";
        let pg = |e| StoreError::postgres(op, e);
        let uuids: Vec<Uuid> = ids.iter().map(|id| Uuid::from_u128(id.0)).collect();
        let client = self.db.client(op).await?;
        let rows = prepared_query(&client, schema::SYMBOL_STATUS, &[&tenant, &uuids])
            .await
            .map_err(pg)?;
        let mut found = HashMap::with_capacity(rows.len());
        for row in rows {
            let id = row.try_get::<_, Uuid>(0).map_err(pg)?.as_u128();
            let number: i16 = row.try_get(1).map_err(pg)?;
            let status = SymbolStatus::from_number(number).ok_or(StoreError::Corrupt {
                what: "symbol status",
                key: format!("{tenant}/{id:032x}"),
                reason: DecodeError::OutOfRange {
                    field: "symbol status",
                    // A negative number shows as its u64 bits; it is out of
                    // range either way.
                    value: number as u64,
                },
            })?;
            found.insert(id, status);
        }
        Ok(ids.iter().map(|id| found.get(&id.0).copied()).collect())
    }
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
