//! The `MetadataStore` conformance suite.

use std::time::{Duration, SystemTime};

use super::{Check, Failure, Names, ensure, ensure_eq, run_checks};
use crate::access::{Role, Roles};
use crate::api_key::KeyHash;
use crate::error::StoreError;
use crate::limits::TenantLimits;
use crate::metadata::MetadataStore;
use crate::scope::Scope;

/// The store under test.
#[derive(Clone, Copy)]
struct Stores<'a> {
    metadata: &'a dyn MetadataStore,
}

/// Runs every `MetadataStore` check against `metadata`; panics naming each
/// check that failed.
///
/// Covers tenant and project creation (duplicates, missing parents,
/// invalid names), API keys (verification to exactly their scope, wrong,
/// malformed and revoked keys refused, the secret never listed, tenants
/// unable to see or revoke each other's keys), key roles and last use,
/// and tenant limits.
pub async fn metadata_store(metadata: &dyn MetadataStore) {
    let stores = Stores { metadata };
    run_checks!(
        "MetadataStore",
        stores,
        [
            tenants_are_created_once_and_listed,
            projects_need_their_tenant,
            invalid_names_and_labels_are_refused,
            api_keys_verify_to_their_scope,
            wrong_keys_are_refused,
            revoked_keys_are_refused,
            tenants_cannot_touch_each_others_keys,
            keys_keep_their_roles_and_last_use,
            tenant_limits_are_kept,
        ]
    );
}

/// Whether `result` failed with the variant `matches` accepts.
fn failed_with(
    result: Result<impl std::fmt::Debug, StoreError>,
    matches: fn(&StoreError) -> bool,
    what: &str,
) -> Check {
    match result {
        Err(e) if matches(&e) => Ok(()),
        other => Err(Failure(format!("{what}: got {other:?}"))),
    }
}

/// Creates a tenant with one project.
async fn tenant_with_project(s: Stores<'_>, names: &Names, suffix: &str) -> Result<Scope, Failure> {
    let scope = names.scope(suffix, "web");
    s.metadata.create_tenant(scope.tenant()).await?;
    s.metadata.create_project(&scope).await?;
    Ok(scope)
}

async fn tenants_are_created_once_and_listed(s: Stores<'_>, names: &Names) -> Check {
    let (a, b) = (names.tenant("a"), names.tenant("b"));
    s.metadata.create_tenant(&b).await?;
    s.metadata.create_tenant(&a).await?;
    failed_with(
        s.metadata.create_tenant(&a).await,
        |e| matches!(e, StoreError::AlreadyExists { what: "tenant", .. }),
        "creating a tenant twice",
    )?;
    // Other runs' tenants may be listed too (a shared server): look at ours.
    let ours: Vec<String> = s
        .metadata
        .list_tenants()
        .await?
        .into_iter()
        .filter(|t| *t == a || *t == b)
        .collect();
    ensure_eq!(ours, vec![a, b], "tenants listed, sorted");
    Ok(())
}

async fn projects_need_their_tenant(s: Stores<'_>, names: &Names) -> Check {
    let missing = names.scope("missing", "web");
    failed_with(
        s.metadata.create_project(&missing).await,
        |e| matches!(e, StoreError::NotFound { what: "tenant", .. }),
        "a project of a tenant that does not exist",
    )?;
    let tenant = names.tenant("a");
    s.metadata.create_tenant(&tenant).await?;
    for project in ["web", "api", "batch"] {
        s.metadata
            .create_project(&names.scope("a", project))
            .await?;
    }
    failed_with(
        s.metadata.create_project(&names.scope("a", "web")).await,
        |e| {
            matches!(
                e,
                StoreError::AlreadyExists {
                    what: "project",
                    ..
                }
            )
        },
        "creating a project twice",
    )?;
    ensure_eq!(
        s.metadata.list_projects(&tenant).await?,
        vec!["api".to_owned(), "batch".into(), "web".into()],
        "projects listed, sorted"
    );
    // Another tenant, even one whose name extends this one's, has none.
    s.metadata.create_tenant(&names.tenant("ab")).await?;
    ensure_eq!(
        s.metadata.list_projects(&names.tenant("ab")).await?,
        Vec::<String>::new(),
        "projects of a tenant that created none"
    );
    ensure_eq!(
        s.metadata.list_projects(&names.tenant("zz")).await?,
        Vec::<String>::new(),
        "projects of a tenant that does not exist"
    );
    Ok(())
}

async fn invalid_names_and_labels_are_refused(s: Stores<'_>, names: &Names) -> Check {
    let invalid_name = |e: &StoreError| matches!(e, StoreError::InvalidName { .. });
    failed_with(
        s.metadata.create_tenant("Acme").await,
        invalid_name,
        "tenant \"Acme\"",
    )?;
    failed_with(
        s.metadata.create_tenant("").await,
        invalid_name,
        "tenant \"\"",
    )?;
    failed_with(
        s.metadata.list_projects("a/b").await,
        invalid_name,
        "projects of tenant \"a/b\"",
    )?;
    let scope = tenant_with_project(s, names, "a").await?;
    failed_with(
        s.metadata
            .create_api_key(&scope, "bad\nlabel", Roles::INGEST_READ)
            .await,
        |e| matches!(e, StoreError::InvalidArgument { .. }),
        "an api key label with a line break",
    )?;
    ensure!(
        s.metadata.list_api_keys(scope.tenant()).await?.is_empty(),
        "a refused key was stored"
    );
    Ok(())
}

async fn api_keys_verify_to_their_scope(s: Stores<'_>, names: &Names) -> Check {
    let scope = tenant_with_project(s, names, "a").await?;
    let other = names.scope("a", "api");
    s.metadata.create_project(&other).await?;
    failed_with(
        s.metadata
            .create_api_key(&names.scope("a", "nope"), "x", Roles::INGEST_READ)
            .await,
        |e| {
            matches!(
                e,
                StoreError::NotFound {
                    what: "project",
                    ..
                }
            )
        },
        "a key for a project that does not exist",
    )?;

    let web = s
        .metadata
        .create_api_key(&scope, "prod agents", Roles::INGEST_READ)
        .await?;
    let api = s
        .metadata
        .create_api_key(&other, "", Roles::INGEST_READ)
        .await?;
    ensure!(web.key != api.key, "two keys are equal");
    ensure_eq!(
        s.metadata
            .verify_api_key(web.key.expose())
            .await?
            .map(|g| g.scope),
        Some(scope.clone()),
        "scope of the first key"
    );
    ensure_eq!(
        s.metadata
            .verify_api_key(api.key.expose())
            .await?
            .map(|g| g.scope),
        Some(other.clone()),
        "scope of the second key"
    );
    ensure_eq!(web.info.scope, scope, "scope in the new key's info");
    ensure_eq!(
        web.info.prefix,
        web.key.prefix(),
        "prefix in the new key's info"
    );

    let listed = s.metadata.list_api_keys(scope.tenant()).await?;
    ensure_eq!(
        listed,
        vec![web.info.clone(), api.info.clone()],
        "keys listed, oldest first"
    );
    let secret_tail = &web.key.expose()[web.key.prefix().len()..];
    ensure!(
        !format!("{listed:?}").contains(secret_tail),
        "a listing shows a key's secret"
    );
    Ok(())
}

async fn wrong_keys_are_refused(s: Stores<'_>, names: &Names) -> Check {
    let scope = tenant_with_project(s, names, "a").await?;
    let new = s
        .metadata
        .create_api_key(&scope, "k", Roles::INGEST_READ)
        .await?;
    let key = new.key.expose();
    // The same key with its last digit changed, still well formed.
    let last = key.as_bytes()[key.len() - 1];
    let flipped = format!(
        "{}{}",
        &key[..key.len() - 1],
        if last == b'0' { '1' } else { '0' }
    );
    let wrong = [
        flipped.clone(),
        format!("kiln_{}", "0".repeat(64)),
        key.to_uppercase(),
        key[..key.len() - 1].to_owned(),
        format!("{key} "),
        String::new(),
        "kiln_".into(),
        new.key.prefix().to_owned(),
    ];
    for candidate in &wrong {
        ensure_eq!(
            s.metadata.verify_api_key(candidate).await?.map(|g| g.scope),
            None,
            "verification of the wrong key {candidate:?}"
        );
    }
    ensure_eq!(
        s.metadata.verify_api_key(key).await?.map(|g| g.scope),
        Some(scope),
        "the right key after wrong ones"
    );
    Ok(())
}

async fn revoked_keys_are_refused(s: Stores<'_>, names: &Names) -> Check {
    let scope = tenant_with_project(s, names, "a").await?;
    let kept = s
        .metadata
        .create_api_key(&scope, "kept", Roles::INGEST_READ)
        .await?;
    let revoked = s
        .metadata
        .create_api_key(&scope, "revoked", Roles::INGEST_READ)
        .await?;
    ensure!(
        s.metadata
            .revoke_api_key(scope.tenant(), revoked.info.id)
            .await?,
        "revoking a live key returned false"
    );
    ensure_eq!(
        s.metadata
            .verify_api_key(revoked.key.expose())
            .await?
            .map(|g| g.scope),
        None,
        "a revoked key"
    );
    ensure_eq!(
        s.metadata
            .verify_api_key(kept.key.expose())
            .await?
            .map(|g| g.scope),
        Some(scope.clone()),
        "a key beside a revoked one"
    );
    ensure!(
        !s.metadata
            .revoke_api_key(scope.tenant(), revoked.info.id)
            .await?,
        "revoking a key twice returned true"
    );
    let listed: Vec<(i64, bool)> = s
        .metadata
        .list_api_keys(scope.tenant())
        .await?
        .into_iter()
        .map(|k| (k.id, k.revoked))
        .collect();
    ensure_eq!(
        listed,
        vec![(kept.info.id, false), (revoked.info.id, true)],
        "(id, revoked) of the listed keys"
    );
    Ok(())
}

async fn tenants_cannot_touch_each_others_keys(s: Stores<'_>, names: &Names) -> Check {
    let a = tenant_with_project(s, names, "a").await?;
    let b = tenant_with_project(s, names, "ab").await?;
    let key_a = s
        .metadata
        .create_api_key(&a, "a", Roles::INGEST_READ)
        .await?;
    let key_b = s
        .metadata
        .create_api_key(&b, "b", Roles::INGEST_READ)
        .await?;
    ensure_eq!(
        s.metadata
            .verify_api_key(key_b.key.expose())
            .await?
            .map(|g| g.scope),
        Some(b.clone()),
        "tenant b's key"
    );
    ensure!(
        !s.metadata.revoke_api_key(b.tenant(), key_a.info.id).await?,
        "tenant b revoked tenant a's key by its id"
    );
    ensure_eq!(
        s.metadata
            .verify_api_key(key_a.key.expose())
            .await?
            .map(|g| g.scope),
        Some(a.clone()),
        "tenant a's key after tenant b tried to revoke it"
    );
    let listed_b: Vec<i64> = s
        .metadata
        .list_api_keys(b.tenant())
        .await?
        .into_iter()
        .map(|k| k.id)
        .collect();
    ensure_eq!(listed_b, vec![key_b.info.id], "keys listed for tenant b");
    ensure!(
        s.metadata
            .list_api_keys(&names.tenant("c"))
            .await?
            .is_empty(),
        "a tenant without keys lists some"
    );
    Ok(())
}

async fn keys_keep_their_roles_and_last_use(s: Stores<'_>, names: &Names) -> Check {
    let scope = tenant_with_project(s, names, "a").await?;
    failed_with(
        s.metadata.create_api_key(&scope, "none", Roles::NONE).await,
        |e| matches!(e, StoreError::InvalidArgument { .. }),
        "a key with no role",
    )?;
    let reader = s
        .metadata
        .create_api_key(&scope, "ui", Roles::of(&[Role::Read]))
        .await?;
    let admin = s
        .metadata
        .create_api_key(&scope, "ops", Roles::of(&[Role::Admin, Role::Read]))
        .await?;
    let grant = s
        .metadata
        .verify_api_key(reader.key.expose())
        .await?
        .ok_or_else(|| Failure("a new read key does not verify".into()))?;
    ensure_eq!(grant.roles, Roles::of(&[Role::Read]), "a read key's roles");
    ensure_eq!(grant.key_id, reader.info.id, "a read key's id");
    ensure_eq!(
        s.metadata
            .grant_of(&admin.key.hash())
            .await?
            .map(|g| g.roles),
        Some(Roles::of(&[Role::Read, Role::Admin])),
        "an admin key's roles, looked up by hash"
    );
    ensure_eq!(
        s.metadata.grant_of(&KeyHash([7; 32])).await?,
        None,
        "an unknown hash"
    );
    ensure_eq!(reader.info.last_used, None, "last use of a new key");
    // Stores may keep microseconds only: use a whole second.
    let used = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    s.metadata
        .record_key_use(scope.tenant(), reader.info.id, used)
        .await?;
    // Another tenant's id, and an id never given: nothing happens.
    s.metadata
        .record_key_use(&names.tenant("zz"), reader.info.id, used)
        .await?;
    s.metadata
        .record_key_use(scope.tenant(), 999_999, used)
        .await?;
    let listed: Vec<(Roles, Option<SystemTime>)> = s
        .metadata
        .list_api_keys(scope.tenant())
        .await?
        .into_iter()
        .map(|k| (k.roles, k.last_used))
        .collect();
    ensure_eq!(
        listed,
        vec![
            (Roles::of(&[Role::Read]), Some(used)),
            (Roles::of(&[Role::Read, Role::Admin]), None),
        ],
        "(roles, last use) of the listed keys"
    );
    Ok(())
}

async fn tenant_limits_are_kept(s: Stores<'_>, names: &Names) -> Check {
    let tenant = names.tenant("a");
    failed_with(
        s.metadata.tenant_limits(&tenant).await,
        |e| matches!(e, StoreError::NotFound { what: "tenant", .. }),
        "limits of a tenant that does not exist",
    )?;
    failed_with(
        s.metadata
            .set_tenant_limits(&tenant, &TenantLimits::default())
            .await,
        |e| matches!(e, StoreError::NotFound { what: "tenant", .. }),
        "setting limits of a tenant that does not exist",
    )?;
    s.metadata.create_tenant(&tenant).await?;
    s.metadata.create_tenant(&names.tenant("b")).await?;
    ensure_eq!(
        s.metadata.tenant_limits(&tenant).await?,
        TenantLimits::default(),
        "limits never set"
    );
    let limits = TenantLimits {
        ingest_samples_per_s: Some(50_000),
        ingest_bytes_per_s: Some(u64::MAX / 4),
        max_concurrent_queries: Some(3),
        retention_days: Some(30),
        max_stored_bytes: Some(5 << 30),
    };
    s.metadata.set_tenant_limits(&tenant, &limits).await?;
    ensure_eq!(
        s.metadata.tenant_limits(&tenant).await?,
        limits,
        "limits as set"
    );
    ensure_eq!(
        s.metadata.tenant_limits(&names.tenant("b")).await?,
        TenantLimits::default(),
        "another tenant's limits"
    );
    let fewer = TenantLimits {
        retention_days: Some(7),
        max_stored_bytes: Some(1),
        ..TenantLimits::default()
    };
    s.metadata.set_tenant_limits(&tenant, &fewer).await?;
    ensure_eq!(
        s.metadata.tenant_limits(&tenant).await?,
        fewer,
        "limits set again replace all of them"
    );
    Ok(())
}
