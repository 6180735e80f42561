//! The `MetadataStore` conformance suite.

use kiln_model::{Executable, FileId};

use super::{Check, Failure, Names, ensure, ensure_eq, run_checks};
use crate::error::StoreError;
use crate::metadata::{MetadataStore, SymbolStatus};
use crate::profile::ProfileStore;
use crate::scope::Scope;

/// The two stores of one database: executables are written through the
/// profile store and their symbol status kept through the metadata store.
#[derive(Clone, Copy)]
struct Stores<'a> {
    metadata: &'a dyn MetadataStore,
    profiles: &'a dyn ProfileStore,
}

/// Runs every `MetadataStore` check against `metadata`, with `profiles` the
/// profile store on the same database; panics naming each check that
/// failed.
///
/// Covers tenant and project creation (duplicates, missing parents,
/// invalid names), API keys (verification to exactly their scope, wrong,
/// malformed and revoked keys refused, the secret never listed, tenants
/// unable to see or revoke each other's keys) and symbol status (per
/// tenant, kept across rewrites, listed as a work queue).
pub async fn metadata_store(metadata: &dyn MetadataStore, profiles: &dyn ProfileStore) {
    let stores = Stores { metadata, profiles };
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
            symbol_status_is_kept_per_tenant,
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
        s.metadata.create_api_key(&scope, "bad\nlabel").await,
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
            .create_api_key(&names.scope("a", "nope"), "x")
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

    let web = s.metadata.create_api_key(&scope, "prod agents").await?;
    let api = s.metadata.create_api_key(&other, "").await?;
    ensure!(web.key != api.key, "two keys are equal");
    ensure_eq!(
        s.metadata.verify_api_key(web.key.expose()).await?,
        Some(scope.clone()),
        "scope of the first key"
    );
    ensure_eq!(
        s.metadata.verify_api_key(api.key.expose()).await?,
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
    let new = s.metadata.create_api_key(&scope, "k").await?;
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
            s.metadata.verify_api_key(candidate).await?,
            None,
            "verification of the wrong key {candidate:?}"
        );
    }
    ensure_eq!(
        s.metadata.verify_api_key(key).await?,
        Some(scope),
        "the right key after wrong ones"
    );
    Ok(())
}

async fn revoked_keys_are_refused(s: Stores<'_>, names: &Names) -> Check {
    let scope = tenant_with_project(s, names, "a").await?;
    let kept = s.metadata.create_api_key(&scope, "kept").await?;
    let revoked = s.metadata.create_api_key(&scope, "revoked").await?;
    ensure!(
        s.metadata
            .revoke_api_key(scope.tenant(), revoked.info.id)
            .await?,
        "revoking a live key returned false"
    );
    ensure_eq!(
        s.metadata.verify_api_key(revoked.key.expose()).await?,
        None,
        "a revoked key"
    );
    ensure_eq!(
        s.metadata.verify_api_key(kept.key.expose()).await?,
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
    let key_a = s.metadata.create_api_key(&a, "a").await?;
    let key_b = s.metadata.create_api_key(&b, "b").await?;
    ensure_eq!(
        s.metadata.verify_api_key(key_b.key.expose()).await?,
        Some(b.clone()),
        "tenant b's key"
    );
    ensure!(
        !s.metadata.revoke_api_key(b.tenant(), key_a.info.id).await?,
        "tenant b revoked tenant a's key by its id"
    );
    ensure_eq!(
        s.metadata.verify_api_key(key_a.key.expose()).await?,
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

async fn symbol_status_is_kept_per_tenant(s: Stores<'_>, names: &Names) -> Check {
    let (a, b) = (names.tenant("a"), names.tenant("b"));
    let exe = Executable {
        file_id: FileId(0xe8e),
        name: "app".into(),
        build_id: None,
    };
    s.profiles
        .put_executables(&a, std::slice::from_ref(&exe))
        .await?;
    s.profiles
        .put_executables(&b, std::slice::from_ref(&exe))
        .await?;
    let missing = FileId(0x404);
    ensure_eq!(
        s.metadata
            .symbol_status(&a, &[exe.file_id, missing])
            .await?,
        vec![Some(SymbolStatus::Pending), None],
        "status of a new executable and of a missing one"
    );
    ensure!(
        s.metadata
            .set_symbol_status(&a, exe.file_id, SymbolStatus::Symbolized)
            .await?,
        "setting the status of an existing executable returned false"
    );
    ensure!(
        !s.metadata
            .set_symbol_status(&a, missing, SymbolStatus::Missing)
            .await?,
        "setting the status of a missing executable returned true"
    );
    ensure_eq!(
        s.metadata.symbol_status(&b, &[exe.file_id]).await?,
        vec![Some(SymbolStatus::Pending)],
        "another tenant's executable with the same file id"
    );
    // Writing the executable again (a replayed batch) keeps the status.
    let renamed = Executable {
        name: "app-2".into(),
        ..exe.clone()
    };
    s.profiles
        .put_executables(&a, std::slice::from_ref(&renamed))
        .await?;
    ensure_eq!(
        s.metadata
            .symbol_status(&a, &[exe.file_id, exe.file_id])
            .await?,
        vec![Some(SymbolStatus::Symbolized); 2],
        "status after the executable was written again"
    );
    ensure_eq!(
        s.profiles.get_executables(&a, &[exe.file_id]).await?,
        vec![Some(renamed)],
        "the executable written again"
    );
    // The work queue: what is pending, per tenant, in file id order.
    let more = [FileId(0xe8f), FileId(0x1)];
    let others: Vec<Executable> = more
        .iter()
        .map(|&file_id| Executable {
            file_id,
            name: "lib".into(),
            build_id: None,
        })
        .collect();
    s.profiles.put_executables(&a, &others).await?;
    ensure_eq!(
        s.metadata
            .executables_with_status(&a, SymbolStatus::Pending, 10)
            .await?,
        vec![FileId(0x1), FileId(0xe8f)],
        "pending executables of tenant a"
    );
    ensure_eq!(
        s.metadata
            .executables_with_status(&a, SymbolStatus::Pending, 1)
            .await?,
        vec![FileId(0x1)],
        "pending executables of tenant a, limited to one"
    );
    ensure_eq!(
        s.metadata
            .executables_with_status(&a, SymbolStatus::Symbolized, 10)
            .await?,
        vec![exe.file_id],
        "symbolized executables of tenant a"
    );
    ensure_eq!(
        s.metadata
            .executables_with_status(&b, SymbolStatus::Pending, 10)
            .await?,
        vec![exe.file_id],
        "pending executables of tenant b"
    );
    ensure_eq!(
        s.metadata.symbol_status(&a, &[]).await?,
        Vec::<Option<SymbolStatus>>::new(),
        "status of no executables"
    );
    Ok(())
}
