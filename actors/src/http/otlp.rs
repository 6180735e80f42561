//! `POST /v1development/profiles`: OTLP/HTTP profiles, protobuf or
//! OTLP/JSON, what the OpenTelemetry collector's `otlphttp` exporter sends.
//!
//! The request is read, metered and published as an import is (the same
//! body bounds, per-tenant quotas and bus records); the conversion is
//! [`kiln_formats::otlp`]'s. The answer is what OTLP/HTTP asks for: an
//! `ExportProfilesServiceResponse` whose `partial_success` names the
//! profiles refused and why, and for errors a `google.rpc.Status` body
//! with the HTTP status — [`status_bodies`] writes those for errors raised
//! before the handler too (no credential, a key without the ingest role,
//! another region's key). Both are in the request's encoding: protobuf,
//! or OTLP/JSON for an `application/json` request.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{
    CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use bytes::Bytes;
use kiln_formats::otlp::proto::collector::{
    ExportProfilesPartialSuccess, ExportProfilesServiceResponse,
};
use kiln_formats::otlp::{OtlpError, OtlpOptions};
use kiln_storage::{Scope, TenantLimits};
use prost::Message;
use tonic_types::Status;

use super::auth::extract::Ingester;
use super::body::OTLP_BODY;
use super::error::ApiError;
use super::ingest::{Encoded, admit_tenant, count_answer};
use super::{AppState, IngestState};
use crate::telemetry::Protocol;
use kiln_model::now_ns;

/// The route's path.
pub const PATH: &str = "/v1development/profiles";

/// The content type of OTLP protobuf, requests and answers.
const PROTOBUF: &str = "application/x-protobuf";

/// The content type of OTLP/JSON, requests and answers.
const JSON: &str = "application/json";

/// How a request is encoded, and so its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Protobuf,
    Json,
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
    count_answer(state.metrics.ingest(), &scope, Protocol::OtlpHttp, answer)
}

async fn export_for(
    scope: &Scope,
    state: &AppState,
    ingest: &IngestState,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let encoding = encoding(request)?;
    let limits = admit_tenant(state, scope).await?;
    let (body, sent) = ingest
        .read_metered(
            state.metrics.ingest(),
            scope,
            &limits,
            request,
            payload,
            OTLP_BODY,
        )
        .await?;
    let partial_success =
        convert_and_publish(state, ingest, scope, &limits, body, sent as u64, encoding).await?;
    Ok(match encoding {
        Encoding::Protobuf => HttpResponse::Ok()
            .content_type(PROTOBUF)
            .body(ExportProfilesServiceResponse { partial_success }.encode_to_vec()),
        Encoding::Json => HttpResponse::Ok()
            .content_type(JSON)
            .body(json_response(partial_success.as_ref()).to_string()),
    })
}

/// Converts an OTLP request of `scope`'s tenant, admitted under `limits`
/// and metered as `sent` bytes, and publishes its batches; the answer's
/// `partial_success`. Whatever carried the request (OTLP/HTTP here, gRPC
/// in [`crate::otlp_grpc`]) ends here, so both convert, meter and count
/// alike.
pub(crate) async fn convert_and_publish(
    state: &AppState,
    ingest: &IngestState,
    scope: &Scope,
    limits: &TenantLimits,
    body: Bytes,
    sent: u64,
    encoding: Encoding,
) -> Result<Option<ExportProfilesPartialSuccess>, ApiError> {
    let metrics = state.metrics.ingest();
    let options = OtlpOptions { now_ns: now_ns() };
    let converted = ingest
        .convert("OTLP", move || {
            let imported = match encoding {
                Encoding::Protobuf => kiln_formats::otlp::import(&body, &options),
                Encoding::Json => kiln_formats::otlp::import_json(&body, &options),
            };
            imported.map(|imported| {
                let encoded = Encoded::of(&imported.batches, imported.samples);
                (imported, encoded)
            })
        })
        .await?;
    let (imported, encoded) = converted.map_err(refusal)?;
    ingest
        .publish_converted(metrics, scope, limits, &encoded, sent)
        .await?;
    if imported.rejected_profiles > 0 {
        metrics.rejected(scope.tenant(), crate::telemetry::Rejection::BadInput);
    }
    Ok(imported.partial_success())
}

/// An `ExportProfilesServiceResponse` in OTLP/JSON: `{}` when all was
/// kept without a word, the 64-bit `rejectedProfiles` as a string.
fn json_response(partial: Option<&ExportProfilesPartialSuccess>) -> serde_json::Value {
    match partial {
        None => serde_json::json!({}),
        Some(p) => serde_json::json!({
            "partialSuccess": {
                "rejectedProfiles": p.rejected_profiles.to_string(),
                "errorMessage": p.error_message,
            }
        }),
    }
}

/// The request's encoding, or 415 for a body that is not OTLP.
fn encoding(request: &HttpRequest) -> Result<Encoding, ApiError> {
    let content_type = content_type(request.headers());
    match essence(content_type).as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(Encoding::Protobuf),
        JSON => Ok(Encoding::Json),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {content_type:?} is not OTLP: send application/x-protobuf or \
             application/json"
        ))),
    }
}

fn content_type(headers: &actix_web::http::header::HeaderMap) -> &str {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The media type without parameters, lowercase.
fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The HTTP error of a request the conversion refused whole.
pub(crate) fn refusal(e: OtlpError) -> ApiError {
    match e {
        e @ OtlpError::JsonTooLarge { .. } => ApiError::PayloadTooLarge(format!("OTLP: {e}")),
        e => ApiError::bad_request(format!("OTLP: {e}")),
    }
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
    let json = essence(content_type(request.headers())) == JSON;
    super::error::answer_errors_as(request, next, |e| StatusError::of(e, json)).await
}

/// An error answered with a `google.rpc.Status` body: the HTTP status,
/// message and retry headers of the error it stands for.
#[derive(Debug)]
struct StatusError {
    http: StatusCode,
    message: String,
    /// `Retry-After`, `WWW-Authenticate`, as the error had them.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Answer in OTLP/JSON, as the request was sent.
    json: bool,
}

impl StatusError {
    fn of(e: &actix_web::Error, json: bool) -> Self {
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
            json,
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
        if self.json {
            let body = serde_json::json!({"code": status.code, "message": status.message});
            return response.content_type(JSON).body(body.to_string());
        }
        response.content_type(PROTOBUF).body(status.encode_to_vec())
    }
}

/// The `google.rpc.Code` of an HTTP status, as OTLP maps them.
pub(crate) fn grpc_code(http: u16) -> i32 {
    match http {
        400 | 413 | 415 => 3, // INVALID_ARGUMENT
        401 => 16,            // UNAUTHENTICATED
        403 => 7,             // PERMISSION_DENIED
        404 => 5,             // NOT_FOUND
        409 => 6,             // ALREADY_EXISTS
        421 => 9,             // FAILED_PRECONDITION
        429 => 8,             // RESOURCE_EXHAUSTED
        503 => 14,            // UNAVAILABLE
        507 => 8,             // RESOURCE_EXHAUSTED (a full disk)
        _ => 13,              // INTERNAL
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn protobuf_and_json_are_taken() {
        let with = |ct: &str| {
            encoding(
                &TestRequest::default()
                    .insert_header((CONTENT_TYPE, ct))
                    .to_http_request(),
            )
        };
        assert_eq!(with("application/x-protobuf").unwrap(), Encoding::Protobuf);
        assert_eq!(
            with("Application/Protobuf; charset=binary").unwrap(),
            Encoding::Protobuf
        );
        assert_eq!(
            with("application/json; charset=utf-8").unwrap(),
            Encoding::Json
        );
        let text = with("text/plain").unwrap_err();
        assert_eq!(text.status_code().as_u16(), 415);
        assert!(text.to_string().contains("is not OTLP"), "{text}");
        assert!(encoding(&TestRequest::default().to_http_request()).is_err());
    }

    #[test]
    fn json_answers_are_otlp_json() {
        assert_eq!(json_response(None).to_string(), "{}");
        let partial = ExportProfilesPartialSuccess {
            rejected_profiles: 2,
            error_message: "why".into(),
        };
        assert_eq!(
            json_response(Some(&partial)).to_string(),
            r#"{"partialSuccess":{"errorMessage":"why","rejectedProfiles":"2"}}"#
        );
    }

    #[test]
    fn errors_carry_a_status_body() {
        let e: actix_web::Error = ApiError::TooManyRequests {
            message: "over ingest_samples_per_s".into(),
            retry_after_s: 3,
        }
        .into();
        let response = StatusError::of(&e, false).error_response();
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
        let e: actix_web::Error = ApiError::bad_request("no").into();
        let response = StatusError::of(&e, true).error_response();
        assert_eq!(response.headers().get(CONTENT_TYPE).unwrap(), JSON);
        let body = actix_web::body::to_bytes(response.into_body());
        let body = futures_util::FutureExt::now_or_never(body)
            .unwrap()
            .unwrap();
        assert_eq!(&body[..], br#"{"code":3,"message":"no"}"#);
    }
}
