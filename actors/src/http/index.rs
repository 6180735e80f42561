//! The page at `/`: the web UI when it is built, else a page saying how to
//! build it and how to use the API.

use actix_web::HttpResponse;

const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Kiln</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:52rem;margin:3rem auto;padding:0 1rem}
code,pre{background:#f3f1ee;padding:.1rem .3rem;border-radius:3px}pre{padding:.8rem}</style></head>
<body><h1>Kiln</h1>
<p>Kiln is running, but its web UI is not built. Build it with
<code>scripts/build-ui.sh</code> (or start Kiln with <code>scripts/up.sh</code>,
which does), then reload this page. Meanwhile the HTTP API works:</p>
<h2>Import a profile</h2>
<pre>kiln import profile.folded            # collapsed stacks
kiln import --format perf-script out.perf
kiln import --format pprof cpu.pb.gz
curl --data-binary @profile.folded 'http://HOST/api/v1/import?format=collapsed'</pre>
<h2>Read it back</h2>
<pre>curl 'http://HOST/api/v1/flamegraph?from=now-1h&amp;format=collapsed'
curl 'http://HOST/api/v1/top?from=now-1h&amp;limit=20'
curl 'http://HOST/api/v1/timeline?from=now-1h&amp;step=1m'
curl 'http://HOST/api/v1/labels?from=now-1h'</pre>
<p>Label filters are extra query parameters, e.g. <code>process=nginx</code>.
Times are RFC 3339, unix seconds, <code>now</code> or <code>now-15m</code>.</p>
</body></html>"#;

pub(crate) async fn page() -> HttpResponse {
    let body = match super::assets::index_html() {
        Some(ui) => ui,
        None => PAGE.as_bytes().to_vec(),
    };
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-cache"))
        .body(body)
}
