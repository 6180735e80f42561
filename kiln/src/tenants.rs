//! `kiln tenant …` and `kiln key …`: tenants, limits and API keys, over
//! the server's admin routes (`kiln_actors::http::tenants`).

use anyhow::Context;
use kiln_actors::http::tenants::{CreateKey, CreateTenant, KeyView, LimitsView, TenantView};
use kiln_storage::TenantLimits;
use serde::de::DeserializeOwned;

use crate::cli::{
    KeyCommand, KeyCreateArgs, KeyScopeArgs, OperatorArgs, SetLimitsArgs, TenantCommand,
    TenantCreateArgs,
};
use crate::client::{Server, failure, local_secret};

pub(crate) fn tenant(command: TenantCommand) -> anyhow::Result<()> {
    match command {
        TenantCommand::Create(args) => create_tenant(args),
        TenantCommand::List(args) => {
            let tenants: Vec<TenantView> =
                answer(operator(&args)?.get("/api/v1/admin/tenants", &[]).call())?;
            for t in tenants {
                println!("{}\t{}", t.tenant, t.projects.join(","));
            }
            Ok(())
        }
        TenantCommand::Limits(args) => {
            let path = format!("/api/v1/admin/tenants/{}/limits", args.name);
            let limits: LimitsView = answer(operator(&args.operator)?.get(&path, &[]).call())?;
            print_limits(&args.name, &limits);
            Ok(())
        }
        TenantCommand::SetLimits(args) => set_limits(args),
    }
}

pub(crate) fn key(command: KeyCommand) -> anyhow::Result<()> {
    match command {
        KeyCommand::Create(args) => create_key(args),
        KeyCommand::List(args) => {
            let (server, base) = keys_of(&args.scope)?;
            let keys: Vec<KeyView> = answer(server.get(&base, &[]).call())?;
            println!("id\ttenant/project\troles\tprefix\tcreated\tlast used\tstate\tlabel");
            for k in keys {
                println!(
                    "{}\t{}/{}\t{}\t{}…\t{}\t{}\t{}\t{}",
                    k.id,
                    k.tenant,
                    k.project,
                    k.roles,
                    k.prefix,
                    when(Some(k.created_at)),
                    when(k.last_used),
                    if k.revoked { "revoked" } else { "live" },
                    k.label
                );
            }
            Ok(())
        }
        KeyCommand::Revoke(args) => {
            let (server, base) = keys_of(&args.scope)?;
            let path = format!("{base}/{}", args.id);
            let mut response = server
                .delete(&path)
                .call()
                .with_context(|| format!("asking {}", server.name()))?;
            let status = response.status().as_u16();
            if status != 204 {
                let text = response.body_mut().read_to_string().unwrap_or_default();
                return Err(failure(status, &text));
            }
            println!("key {} revoked", args.id);
            Ok(())
        }
    }
}

fn create_tenant(args: TenantCreateArgs) -> anyhow::Result<()> {
    let server = operator(&args.operator)?;
    let body = CreateTenant {
        tenant: args.name,
        project: Some(args.project),
        region: args.home_region,
    };
    let key: KeyView = answer(server.post("/api/v1/admin/tenants", &[]).send_json(&body))?;
    println!(
        "tenant {} created, with project {}",
        key.tenant, key.project
    );
    println!(
        "a key with the roles {} on {}/{} (shown once):",
        key.roles, key.tenant, key.project
    );
    // The last line is the key alone, for scripts: `| tail -1`.
    println!("{}", key.key.context("the server sent no key")?);
    Ok(())
}

fn set_limits(args: SetLimitsArgs) -> anyhow::Result<()> {
    let server = operator(&args.operator)?;
    let limits = TenantLimits {
        ingest_samples_per_s: args.ingest_samples_per_s,
        ingest_bytes_per_s: args.ingest_bytes_per_s,
        max_concurrent_queries: args.max_concurrent_queries,
        retention_days: args.retention_days,
        max_stored_bytes: args.max_stored_bytes,
    };
    let path = format!("/api/v1/admin/tenants/{}/limits", args.name);
    let view: LimitsView = answer(server.put(&path).send_json(limits))?;
    print_limits(&args.name, &view);
    Ok(())
}

fn create_key(args: KeyCreateArgs) -> anyhow::Result<()> {
    let (server, base) = keys_of(&args.scope)?;
    let body = CreateKey {
        project: args.project,
        roles: args.roles,
        label: args.label,
    };
    let key: KeyView = answer(server.post(&base, &[]).send_json(&body))?;
    println!(
        "key {} with the roles {} on {}/{} (shown once):",
        key.id, key.roles, key.tenant, key.project
    );
    println!("{}", key.key.context("the server sent no key")?);
    Ok(())
}

/// The server with the operator's admin token: `--admin-token`, else the
/// one a local `kiln up` keeps.
fn operator(args: &OperatorArgs) -> anyhow::Result<Server> {
    let token = match &args.admin_token {
        Some(token) => Some(token.clone()),
        None => local_secret(kiln_actors::ADMIN_TOKEN_FILE)?,
    };
    let token = token.context(
        "no admin token: give --admin-token (or KILN_ADMIN_TOKEN); a local kiln up keeps one in \
         DATA_DIR/admin-token",
    )?;
    Ok(Server::with_bearer(&args.server, Some(token)))
}

/// Where a key command goes: the operator's route for `--tenant`, else
/// the caller's own tenant's with its API key.
fn keys_of(args: &KeyScopeArgs) -> anyhow::Result<(Server, String)> {
    match &args.tenant {
        Some(tenant) => Ok((
            operator(&args.operator)?,
            format!("/api/v1/admin/tenants/{tenant}/keys"),
        )),
        None => Ok((
            Server::with_api_key(&args.operator.server)?,
            "/api/v1/keys".to_owned(),
        )),
    }
}

/// The JSON of a successful answer, or the server's error.
fn answer<T: DeserializeOwned>(
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> anyhow::Result<T> {
    let mut response = sent.context("sending the request")?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .context("reading the answer")?;
    if !(200..300).contains(&status) {
        return Err(failure(status, &text));
    }
    serde_json::from_str(&text).with_context(|| format!("the server's answer: {text}"))
}

fn print_limits(tenant: &str, view: &LimitsView) {
    let show = |set: Option<u64>, effective: Option<u64>| match (set, effective) {
        (Some(v), _) => v.to_string(),
        (None, Some(v)) => format!("{v} (default)"),
        (None, None) => "none (default)".to_owned(),
    };
    println!("limits of {tenant}:");
    println!(
        "  ingest_samples_per_s    {}",
        show(
            view.set.ingest_samples_per_s,
            view.effective.ingest_samples_per_s
        )
    );
    println!(
        "  ingest_bytes_per_s      {}",
        show(
            view.set.ingest_bytes_per_s,
            view.effective.ingest_bytes_per_s
        )
    );
    println!(
        "  max_concurrent_queries  {}",
        show(
            view.set.max_concurrent_queries.map(u64::from),
            view.effective.max_concurrent_queries.map(u64::from)
        )
    );
    println!(
        "  retention_days          {}",
        show(
            view.set.retention_days.map(u64::from),
            view.effective.retention_days.map(u64::from)
        )
    );
    println!(
        "  max_stored_bytes        {}",
        show(view.set.max_stored_bytes, view.effective.max_stored_bytes)
    );
    if let Some(bytes) = view.stored_bytes {
        println!("  stored_bytes now        {bytes}");
    }
}

/// Unix seconds as RFC 3339, or `never`.
fn when(unix: Option<u64>) -> String {
    match unix {
        Some(s) => humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(s),
        )
        .to_string(),
        None => "never".to_owned(),
    }
}
