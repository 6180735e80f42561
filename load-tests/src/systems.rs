//! Kiln's roles in this process, each on an actix system of its own (on a
//! thread of its own), as separate processes would run them: the
//! distributed benches start gateways, workers and query nodes this way.

use std::net::SocketAddr;
use std::sync::mpsc;

use anyhow::Context;

/// Runs `start` in a new actix system on a thread of its own; returns the
/// system (to stop it) and the address it serves on, if any. `start`
/// returns that address and the server future, which is driven inside
/// the system.
pub fn spawn_system<F, Fut>(
    name: &str,
    start: F,
) -> anyhow::Result<(actix_rt::System, Option<SocketAddr>)>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<
            Output = anyhow::Result<(Option<SocketAddr>, Option<actix_web::dev::Server>)>,
        >,
{
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("bench-{name}"))
        .spawn(move || {
            let system = actix_rt::System::new();
            let handle = actix_rt::System::current();
            // The server future must be spawned inside the system.
            let started = system.block_on(async move {
                let (addr, server) = start().await?;
                if let Some(server) = server {
                    actix_rt::spawn(async move {
                        let _ = server.await;
                    });
                }
                anyhow::Ok(addr)
            });
            match started {
                Ok(addr) => {
                    let _ = tx.send(Ok((handle, addr)));
                    let _ = system.run();
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })?;
    rx.recv().context("the role's thread died")?
}

/// Makes `scope`'s tenant and project in `metadata` (as an operator's
/// `kiln tenant create` would) and a key with ingest and read rights on
/// them: what the bench's clients send (`Authorization: Bearer KEY`), as
/// agents and the UI would.
pub async fn tenant_key(
    metadata: &dyn kiln_storage::MetadataStore,
    scope: &kiln_storage::Scope,
) -> anyhow::Result<String> {
    metadata.create_tenant(scope.tenant()).await?;
    metadata.create_project(scope).await?;
    let key = metadata
        .create_api_key(scope, "bench", kiln_storage::Roles::INGEST_READ)
        .await?;
    Ok(key.key.expose().to_owned())
}

/// An HTTP client for the benches' requests: statuses are answers, not
/// errors (the benches check them), and a request may take `timeout`.
pub fn http_client(timeout: std::time::Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}
