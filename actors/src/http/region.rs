//! Regions: each is a whole Kiln (bus, stores, gateways, workers, query
//! nodes), and a tenant's profiles, symbols and metrics live only in its
//! home region.
//!
//! A key is given to its owner tagged with its home region
//! (`kiln_<region>_…`, [`kiln_storage::ApiKey::tagged`]), so a process
//! tells where a request belongs from its credential alone, before it
//! authenticates or reads the body: [`route`] sends a request whose key is
//! another region's to that region's public URL and hands back its answer.
//! Such a request is never authenticated, stored or counted here (the home
//! region does all of that); a region that cannot be reached is a 503 with
//! `Retry-After`, which agents spool and retry, and only that region's
//! tenants see it.
//!
//! Forwarding rather than redirecting: agents, `kiln import` and scripts
//! then need one URL (the nearest region's), a redirect would make every
//! client resend its body to a second host, and POST redirects are
//! followed inconsistently by HTTP clients. The cost is one more hop
//! between regions, measured in `kiln/tests/regions.rs`. Browsers are the
//! exception: the UI's session is made at the home region's `/login`.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{AUTHORIZATION, HeaderName};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};
use kiln_storage::key_region;

use super::body::{self, BodyLimit};
use super::error::ApiError;
pub use crate::regions::{RegionError, Regions};
use crate::telemetry::Forwarded;

/// Set on a forwarded request to the region it came from: a region that
/// receives a forwarded request for yet another region refuses it instead
/// of forwarding again (a misconfigured pair would otherwise loop).
pub const FORWARDED_FROM: &str = "x-kiln-forwarded-from";

/// The region a request belongs to by its `Authorization` key (Bearer,
/// or on the Pyroscope routes basic auth's password), when that is not
/// this one.
fn elsewhere(request: &ServiceRequest, regions: &Regions) -> Option<String> {
    let header = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let key = match header.strip_prefix("Bearer ") {
        Some(key) => key.trim().to_owned(),
        None if super::pyroscope::takes_basic_auth(super::routed_path(request)) => {
            super::auth::basic_auth_key(header)?
        }
        None => return None,
    };
    key_region(&key)
        .filter(|region| *region != regions.here())
        .map(str::to_owned)
}

/// A middleware on every route of a process with regions: a request whose
/// key is tagged with another region goes there (see the module docs);
/// the rest, to this region's routes.
pub(crate) async fn route(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let regions = request
        .app_data::<web::Data<super::AppState>>()
        .and_then(|state| state.regions.clone());
    let Some(regions) = regions else {
        return next
            .call(request)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    };
    let Some(region) = elsewhere(&request, &regions) else {
        return next
            .call(request)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    };
    let started = std::time::Instant::now();
    let metrics = request
        .app_data::<web::Data<crate::telemetry::Metrics>>()
        .cloned();
    let count = |outcome: Forwarded| {
        if let Some(metrics) = &metrics {
            // A region no one configured is "unknown": its name comes from
            // the request, and must not grow the metric's label values.
            let label = match regions.url_of(&region) {
                Some(_) => region.as_str(),
                None => "unknown",
            };
            metrics
                .regions()
                .forwarded(label, outcome, started.elapsed());
        }
    };
    if let Some(from) = request.headers().get(FORWARDED_FROM) {
        count(Forwarded::Misdirected);
        return Err(ApiError::Misdirected(format!(
            "region {} got a request forwarded from {:?} with a key of region {region:?}: \
             requests are forwarded once, to the key's home region",
            regions.here(),
            from.to_str().unwrap_or("?")
        ))
        .into());
    }
    let Some(base) = regions.url_of(&region).map(str::to_owned) else {
        count(Forwarded::Misdirected);
        return Err(ApiError::Misdirected(format!(
            "the key belongs to region {region:?}, which region {} does not know (it knows {}): \
             send it to its own region's URL",
            regions.here(),
            regions.known()
        ))
        .into());
    };
    let (http_request, payload) = request.into_parts();
    let limit = body_limit(http_request.match_info().as_str());
    let sent = body::read_sent(&http_request, payload, limit).await?;
    let answer = forward(&regions, &region, &base, &http_request, sent).await;
    match &answer {
        Ok(_) => count(Forwarded::Answered),
        Err(ApiError::Unavailable(_)) => count(Forwarded::Unreachable),
        Err(_) => {}
    }
    Ok(ServiceResponse::new(http_request, answer?))
}

/// Sends an operator's request to region `region` (a tenant made for its
/// home region elsewhere): a 421 when this region does not know it or the
/// request was forwarded already, a 503 when it cannot be reached.
pub(crate) async fn forward_to(
    regions: &Regions,
    region: &str,
    request: &actix_web::HttpRequest,
    body: bytes::Bytes,
) -> Result<HttpResponse, ApiError> {
    if let Some(from) = request.headers().get(FORWARDED_FROM) {
        return Err(ApiError::Misdirected(format!(
            "region {} got a request for region {region:?} forwarded from {:?}: \
             requests are forwarded once",
            regions.here(),
            from.to_str().unwrap_or("?")
        )));
    }
    let Some(base) = regions.url_of(region) else {
        return Err(ApiError::Misdirected(format!(
            "region {} does not know region {region:?} (it knows {})",
            regions.here(),
            regions.known()
        )));
    };
    forward(regions, region, base, request, body).await
}

/// Sends an OTLP profiles request (protobuf, as the gRPC listener
/// received it) with `key`, a key of region `region`, to that region's
/// OTLP/HTTP route: HTTP is what every region's public URL serves. The
/// reply's HTTP status and body (an `ExportProfilesServiceResponse`, or a
/// `google.rpc.Status`); a 421 when this region does not know `region`, a
/// 503 when it cannot be reached.
pub(crate) async fn forward_otlp(
    regions: &Regions,
    region: &str,
    key: &str,
    message: bytes::Bytes,
) -> Result<(u16, bytes::Bytes), ApiError> {
    let Some(base) = regions.url_of(region) else {
        return Err(ApiError::Misdirected(format!(
            "the key belongs to region {region:?}, which region {} does not know (it knows {}): \
             send it to its own region",
            regions.here(),
            regions.known()
        )));
    };
    let unreachable = |e: reqwest::Error| {
        tracing::warn!(region, error = %e, "forwarding to the home region failed");
        ApiError::Unavailable(format!(
            "the key's home region {region:?} cannot be reached from region {} now ({e}); retry later",
            regions.here()
        ))
    };
    let reply = regions
        .client()
        .post(format!("{base}{}", super::otlp::PATH))
        .header(FORWARDED_FROM, regions.here())
        .header(AUTHORIZATION.as_str(), format!("Bearer {key}"))
        .header("content-type", "application/x-protobuf")
        .body(message)
        .send()
        .await
        .map_err(unreachable)?;
    let status = reply.status().as_u16();
    Ok((status, reply.bytes().await.map_err(unreachable)?))
}

/// Asks every other region for `path` (an operator's `GET`, with the
/// request's own credential), each told to answer from itself only; the
/// first region that answers 200, with its answer. `Ok(None)` when every
/// region answered 404; a 503 naming the region when one could not be
/// asked and none had it.
pub(crate) async fn ask_peers(
    regions: &Regions,
    request: &actix_web::HttpRequest,
    path: &str,
) -> Result<Option<(String, bytes::Bytes)>, ApiError> {
    let mut unreachable = None;
    for (region, base) in regions.peers() {
        let mut outgoing = regions
            .client()
            .get(format!("{base}{path}"))
            .header(FORWARDED_FROM, regions.here());
        if let Some(credential) = request.headers().get(AUTHORIZATION) {
            outgoing = outgoing.header(AUTHORIZATION.as_str(), credential.as_bytes());
        }
        match outgoing.send().await {
            Ok(reply) if reply.status() == reqwest::StatusCode::OK => {
                let answer = reply.bytes().await.map_err(|e| {
                    ApiError::Unavailable(format!("region {region:?} answered in part: {e}"))
                })?;
                return Ok(Some((region.to_owned(), answer)));
            }
            Ok(reply) if reply.status() == reqwest::StatusCode::NOT_FOUND => {}
            Ok(reply) => {
                let status = reply.status();
                let text = reply.text().await.unwrap_or_default();
                return Err(ApiError::internal_msg(format!(
                    "region {region:?} answered {status}: {text}"
                )));
            }
            Err(e) => unreachable = Some(format!("region {region:?}: {e}")),
        }
    }
    match unreachable {
        None => Ok(None),
        Some(why) => Err(ApiError::Unavailable(format!(
            "region {} cannot ask every region now ({why}); retry later",
            regions.here()
        ))),
    }
}

/// Whether `request` came from another region (it must then be answered
/// here, not passed on).
pub(crate) fn forwarded(request: &actix_web::HttpRequest) -> bool {
    request.headers().contains_key(FORWARDED_FROM)
}

/// The largest body (as sent) a forwarded request may carry: the route's
/// own limit, which the home region applies again after decompression.
fn body_limit(path: &str) -> BodyLimit {
    if path.starts_with("/api/v1/symbols/") {
        body::SYMBOLS_BODY
    } else if path == "/api/v1/import" {
        body::IMPORT_BODY
    } else if path == "/api/v1/ingest" {
        body::INGEST_BODY
    } else if path == super::otlp::PATH {
        body::OTLP_BODY
    } else if super::pyroscope::takes_basic_auth(path) {
        body::PYROSCOPE_BODY
    } else {
        body::ADMIN_BODY
    }
}

/// Headers that belong to one connection, not to the request or answer.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    ) || name == FORWARDED_FROM
}

/// Sends the request to `base` (region `region`) and builds the answer
/// from its reply, status, headers and body as they came.
async fn forward(
    regions: &Regions,
    region: &str,
    base: &str,
    request: &actix_web::HttpRequest,
    body: bytes::Bytes,
) -> Result<HttpResponse, ApiError> {
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())
        .map_err(|e| ApiError::bad_request(format!("method: {e}")))?;
    let mut outgoing = regions
        .client()
        .request(method, format!("{base}{target}"))
        .header(FORWARDED_FROM, regions.here())
        .body(body);
    for (name, value) in request.headers() {
        if !hop_by_hop(name.as_str()) {
            outgoing = outgoing.header(name.as_str(), value.as_bytes());
        }
    }
    let unreachable = |e: reqwest::Error| {
        tracing::warn!(region, error = %e, "forwarding to the home region failed");
        ApiError::Unavailable(format!(
            "the key's home region {region:?} cannot be reached from region {} now ({e}); retry later",
            regions.here()
        ))
    };
    let reply = outgoing.send().await.map_err(unreachable)?;
    let status = actix_web::http::StatusCode::from_u16(reply.status().as_u16())
        .map_err(|e| ApiError::internal(format!("region {region:?} answered"), e))?;
    let mut answer = HttpResponse::build(status);
    for (name, value) in reply.headers() {
        if hop_by_hop(name.as_str()) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            actix_web::http::header::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            answer.append_header((name, value));
        }
    }
    let bytes = reply.bytes().await.map_err(unreachable)?;
    Ok(answer.body(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_name_equals_url() {
        let regions = Regions::new("eu", &["us=http://10.0.0.2:7070/".into()]).unwrap();
        assert_eq!(regions.url_of("us"), Some("http://10.0.0.2:7070"));
        assert_eq!(regions.known(), "eu, us");
        for (here, peers, fault) in [
            ("EU", vec![], "not a region name"),
            ("eu", vec!["us"], "expected NAME="),
            ("eu", vec!["us=10.0.0.2:7070"], "expected NAME="),
            ("eu", vec!["us=http://h/api"], "expected NAME="),
            ("eu", vec!["eu=http://h"], "named twice"),
            ("eu", vec!["us=http://a", "us=http://b"], "named twice"),
            ("eu", vec!["admin=http://a"], "not a region name"),
        ] {
            let peers: Vec<String> = peers.into_iter().map(String::from).collect();
            let e = Regions::new(here, &peers).unwrap_err().to_string();
            assert!(e.contains(fault), "{here} {peers:?}: {e}");
        }
    }
}
