//! `POST /v1development/profiles`: OTLP/HTTP profiles (protobuf), what the
//! OpenTelemetry collector's `otlphttp` exporter sends.
//!
//! The request is read, metered and published as an import is (the same
//! body bounds, per-tenant quotas and bus records); the conversion is
//! [`kiln_formats::otlp`]'s. The answer is what OTLP/HTTP asks for: an
//! `ExportProfilesServiceResponse` whose `partial_success` names the
//! profiles refused and why, and for errors a `google.rpc.Status` body
//! with the HTTP status — [`status_bodies`] writes those for errors raised
//! before the handler too (no credential, a key without the ingest role,
//! another region's key).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{
    CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use kiln_formats::otlp::proto::collector::ExportProfilesServiceResponse;
use kiln_formats::otlp::{OtlpError, OtlpOptions};
use kiln_storage::Scope;
use prost::Message;

use super::auth::extract::Ingester;
use super::body::OTLP_BODY;
use super::error::ApiError;
use super::ingest::{admit_tenant, count_refusal};
use super::params::now_ns;
use super::{AppState, IngestState};

/// The route's path.
pub const PATH: &str = "/v1development/profiles";

/// The content type of OTLP protobuf, requests and answers.
const PROTOBUF: &str = "application/x-protobuf";

/// `google.rpc.Status`, the body of every OTLP/HTTP error.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    /// A `google.rpc.Code`.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong, and how to fix it.
    #[prost(string, tag = "2")]
    pub message: String,
    /// `google.protobuf.Any` details (none sent).
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    /// The type's URL.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The message.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `POST /v1development/profiles` with an `ExportProfilesServiceRequest`.
/// Answers once the converted batches are durable on the bus.
pub(crate) async fn export(
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let answer = export_for(&scope, &state, &ingest, &request, payload).await;
    count_refusal(state.metrics.ingest(), &scope, answer)
}

async fn export_for(
    scope: &Scope,
    state: &AppState,
    ingest: &IngestState,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    protobuf_only(request)?;
    let metrics = state.metrics.ingest();
    let limits = admit_tenant(state, scope).await?;
    let (body, sent) = ingest
        .read_metered(metrics, scope, &limits, request, payload, OTLP_BODY)
        .await?;
    let options = OtlpOptions { now_ns: now_ns() };
    // Converting and compressing are CPU-bound: off the event loop.
    let converted = web::block(move || {
        kiln_formats::otlp::import(&body, &options).map(|imported| {
            let encoded: Vec<Vec<u8>> = imported.batches.iter().map(|b| b.encode()).collect();
            (imported, encoded)
        })
    })
    .await
    .map_err(|e| ApiError::Internal(format!("OTLP conversion failed: {e}")))?;
    let (imported, encoded) = converted.map_err(refusal)?;
    // All batches' rows are admitted together: a request is not half
    // accepted for quota.
    ingest.admit_samples(metrics, scope, &limits, imported.sample_rows as u64)?;
    for (batch, bytes) in imported.batches.iter().zip(&encoded) {
        // A failure after some batches went out is a 503: the sender
        // retries the whole request, and batches written again change
        // nothing (store writes are idempotent by key).
        ingest.publish(scope, &batch.source, bytes).await?;
    }
    metrics.accepted(scope.tenant(), imported.samples, sent as u64);
    if imported.rejected_profiles > 0 {
        metrics.rejected(scope.tenant(), crate::telemetry::Rejection::BadInput);
    }
    let answer = ExportProfilesServiceResponse {
        partial_success: imported.partial_success(),
    };
    Ok(HttpResponse::Ok()
        .content_type(PROTOBUF)
        .body(answer.encode_to_vec()))
}

/// Refuses (415) a body that is not OTLP protobuf.
fn protobuf_only(request: &HttpRequest) -> Result<(), ApiError> {
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(()),
        "application/json" => Err(ApiError::UnsupportedMediaType(
            "OTLP/JSON is not accepted yet: only protobuf is, for now (Content-Type: \
             application/x-protobuf; the collector's otlphttp exporter: encoding: proto)"
                .to_owned(),
        )),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {content_type:?} is not OTLP protobuf: send application/x-protobuf"
        ))),
    }
}

/// The HTTP error of a request the conversion refused whole.
fn refusal(e: OtlpError) -> ApiError {
    ApiError::bad_request(format!("OTLP: {e}"))
}

/// The middleware that answers this route's errors, wherever raised, with
/// a `google.rpc.Status` body (status code and headers kept), as OTLP/HTTP
/// clients read them; other routes' answers pass untouched.
pub async fn status_bodies(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if super::routed_path(&request) != PATH {
        return next
            .call(request)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    }
    // The request cannot be kept aside (a clone would stop the router
    // from filling in its path): an error raised before the handler
    // becomes an error that answers with a Status.
    match next.call(request).await {
        Err(e) => Err(StatusError::of(&e).into()),
        Ok(response) => match response.response().error() {
            Some(e) => {
                let answer = StatusError::of(e).error_response();
                let (request, _) = response.into_parts();
                Ok(ServiceResponse::new(request, answer))
            }
            None => Ok(response.map_into_boxed_body()),
        },
    }
}

/// An error answered with a `google.rpc.Status` body: the HTTP status,
/// message and retry headers of the error it stands for.
#[derive(Debug)]
struct StatusError {
    http: StatusCode,
    message: String,
    /// `Retry-After`, `WWW-Authenticate`, as the error had them.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl StatusError {
    fn of(e: &actix_web::Error) -> Self {
        let response = e.as_response_error().error_response();
        let headers = [RETRY_AFTER, WWW_AUTHENTICATE]
            .into_iter()
            .filter_map(|name| {
                let value = response.headers().get(&name)?.clone();
                Some((name, value))
            })
            .collect();
        StatusError {
            http: response.status(),
            message: e.to_string(),
            headers,
        }
    }
}

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ResponseError for StatusError {
    fn status_code(&self) -> StatusCode {
        self.http
    }

    fn error_response(&self) -> HttpResponse {
        let status = Status {
            code: grpc_code(self.http.as_u16()),
            message: self.message.clone(),
            details: Vec::new(),
        };
        let mut response = HttpResponse::build(self.http);
        for (name, value) in &self.headers {
            response.insert_header((name.clone(), value.clone()));
        }
        response.content_type(PROTOBUF).body(status.encode_to_vec())
    }
}

/// The `google.rpc.Code` of an HTTP status, as OTLP maps them.
fn grpc_code(http: u16) -> i32 {
    match http {
        400 | 413 | 415 => 3, // INVALID_ARGUMENT
        401 => 16,            // UNAUTHENTICATED
        403 => 7,             // PERMISSION_DENIED
        404 => 5,             // NOT_FOUND
        409 => 6,             // ALREADY_EXISTS
        421 => 9,             // FAILED_PRECONDITION
        429 => 8,             // RESOURCE_EXHAUSTED
        503 => 14,            // UNAVAILABLE
        _ => 13,              // INTERNAL
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn only_protobuf_is_taken() {
        let with = |ct: &str| {
            protobuf_only(
                &TestRequest::default()
                    .insert_header((CONTENT_TYPE, ct))
                    .to_http_request(),
            )
        };
        assert!(with("application/x-protobuf").is_ok());
        assert!(with("Application/Protobuf; charset=binary").is_ok());
        let json = with("application/json").unwrap_err();
        assert_eq!(json.status_code().as_u16(), 415);
        assert!(json.to_string().contains("only protobuf"), "{json}");
        assert_eq!(with("text/plain").unwrap_err().status_code().as_u16(), 415);
        assert!(protobuf_only(&TestRequest::default().to_http_request()).is_err());
    }

    #[test]
    fn errors_carry_a_status_body() {
        let e: actix_web::Error = ApiError::TooManyRequests {
            message: "over ingest_samples_per_s".into(),
            retry_after_s: 3,
        }
        .into();
        let response = StatusError::of(&e).error_response();
        assert_eq!(response.status().as_u16(), 429);
        assert_eq!(response.headers().get("Retry-After").unwrap(), "3");
        assert_eq!(response.headers().get(CONTENT_TYPE).unwrap(), PROTOBUF);
        let body = actix_web::body::to_bytes(response.into_body());
        let body = futures_util::FutureExt::now_or_never(body)
            .unwrap()
            .unwrap();
        let status = Status::decode(&body[..]).unwrap();
        assert_eq!(status.code, 8);
        assert_eq!(status.message, "over ingest_samples_per_s");
    }
}
