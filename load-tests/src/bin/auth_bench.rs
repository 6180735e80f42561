//! What authentication and quotas cost per request: the same handler
//! behind the authentication middleware (a key, warm in the key cache; a
//! UI session cookie) against no middleware at all, and one ingest quota
//! check, all in one run. Requests go through actix's service stack in
//! process (no sockets), so the ratio is the middleware's own cost.
//!
//! `cargo run --release -p kiln-load-tests --bin auth_bench -- --requests 200000`

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::middleware::from_fn;
use actix_web::{App, HttpResponse, test, web};
use clap::Parser;
use kiln_actors::http::auth::{Auth, authenticate};
use kiln_actors::http::quota::{IngestQuota, Metered};
use kiln_load_tests::report::Report;
use kiln_storage::{EmbeddedMetadataStore, MetadataStore, Roles, Scope};

#[derive(Debug, Parser)]
#[command(about = "Authentication middleware and quota cost per request")]
struct Args {
    /// Requests per arm and round.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Rounds (arms interleave within each; the median is reported).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

async fn ok() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("temp dir");
    actix_rt::System::new().block_on(async move {
        let metadata = EmbeddedMetadataStore::open(&dir.path().join("metadata.json")).unwrap();
        let scope = Scope::new("bench", "default").unwrap();
        metadata.create_tenant("bench").await.unwrap();
        metadata.create_project(&scope).await.unwrap();
        let key = metadata
            .create_api_key(&scope, "bench", Roles::INGEST_READ)
            .await
            .unwrap();
        let auth = Auth::new(Arc::new(metadata), None, Default::default());
        let cookie = auth.sessions().cookie(&key.key.hash(), false);
        let bearer = format!("Bearer {}", key.key.expose());

        let open = test::init_service(App::new().route("/api/v1/x", web::get().to(ok))).await;
        let guarded = test::init_service(
            App::new()
                .wrap(from_fn(authenticate))
                .app_data(web::Data::new(auth.clone()))
                .route("/api/v1/x", web::get().to(ok)),
        )
        .await;

        let mut none = Vec::new();
        let mut with_key = Vec::new();
        let mut with_session = Vec::new();
        for _ in 0..args.rounds {
            let started = Instant::now();
            for _ in 0..args.requests {
                let r = test::call_service(
                    &open,
                    test::TestRequest::get().uri("/api/v1/x").to_request(),
                )
                .await;
                assert!(r.status().is_success());
            }
            none.push(started.elapsed() / args.requests as u32);

            let started = Instant::now();
            for _ in 0..args.requests {
                let request = test::TestRequest::get()
                    .uri("/api/v1/x")
                    .insert_header(("authorization", bearer.as_str()))
                    .to_request();
                let r = test::call_service(&guarded, request).await;
                assert!(r.status().is_success());
            }
            with_key.push(started.elapsed() / args.requests as u32);

            let started = Instant::now();
            for _ in 0..args.requests {
                let request = test::TestRequest::get()
                    .uri("/api/v1/x")
                    .cookie(cookie.clone())
                    .to_request();
                let r = test::call_service(&guarded, request).await;
                assert!(r.status().is_success());
            }
            with_session.push(started.elapsed() / args.requests as u32);
        }

        let quota = IngestQuota::default();
        let started = Instant::now();
        let checks = args.requests * args.rounds;
        for i in 0..checks {
            // Distinct tenants now and then, as a gateway sees them.
            let tenant = if i % 64 == 0 { "other" } else { "bench" };
            let _ = quota.admit(tenant, Metered::Samples, u64::MAX, 1);
        }
        let quota_check = started.elapsed() / checks as u32;

        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let (none, with_key, with_session) = (median(none), median(with_key), median(with_session));
        let mut report = Report::default();
        report.time("request, no authentication", none);
        report.time("request, API key (cached)", with_key);
        report.time("request, session cookie", with_session);
        report.time("ingest quota check", quota_check);
        report.add(
            "API key / no authentication",
            with_key.as_secs_f64() / none.as_secs_f64(),
            "x",
        );
        report.add(
            "session / no authentication",
            with_session.as_secs_f64() / none.as_secs_f64(),
            "x",
        );
        report.add(
            "quota check / request without authentication",
            quota_check.as_secs_f64() / none.as_secs_f64(),
            "x",
        );
        report.finish("auth_bench");
    });
}
