//! Pyroscope's push API, for Pyroscope's SDKs pointed at Kiln:
//!
//! - `POST /ingest?name=APP{k=v,…}&from&until&format&sampleRate&spyName&units&aggregationType`
//!   (pyroscope-go, and the older SDKs): answers 200 with an empty body
//!   (pyroscope-go takes nothing else for success), errors as Kiln's JSON
//!   with their HTTP status;
//! - `POST /push.v1.PusherService/Push` (Connect RPC, unary; pyroscope-io
//!   1.x, pyroscope-rs 2.x): a `push.v1.PushRequest` in
//!   `application/proto` or `application/json`; answers an empty
//!   `PushResponse` in the request's encoding, errors in Connect's JSON
//!   shape `{"code":"invalid_argument","message":"…"}` with Kiln's HTTP
//!   status.
//!
//! Both take the tenant's key as `Authorization: Bearer KEY` or as the
//! password of HTTP basic auth (the SDKs' `basic_auth_password`,
//! `BasicAuthPassword`; any user), and only from that: `X-Scope-OrgID` is
//! ignored. Requests are read, metered and published as imports are; the
//! conversion is [`kiln_formats::pyroscope`]'s. Only CPU profiles are
//! kept for now (Kiln's store has no other sample types yet): the others
//! are answered 200 and left out, logged at debug level.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use kiln_formats::pyroscope::{
    IngestQuery, PushEncoding, PyroscopeError, PyroscopeImported, PyroscopeOptions,
};
use kiln_storage::Scope;
use tracing::debug;

use super::auth::extract::Ingester;
use super::body::PYROSCOPE_BODY;
use super::error::ApiError;
use super::ingest::{Encoded, admit_tenant, count_answer};
use super::{AppState, IngestState};
use crate::telemetry::Protocol;
use kiln_model::now_ns;

/// `/ingest`'s path.
pub const INGEST_PATH: &str = "/ingest";
/// The Connect RPC's path.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// What a 401 on these routes asks for: the SDKs send basic auth.
const BASIC_CHALLENGE: &str = "Basic realm=\"kiln\"";

/// Whether `path` is one of the Pyroscope routes, which take the key as a
/// basic-auth password too.
pub(crate) fn takes_basic_auth(path: &str) -> bool {
    path == INGEST_PATH || path == PUSH_PATH
}

/// `POST /ingest`. Answers once the profile's batches are durable on the
/// bus.
pub(crate) async fn ingest(
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let answer = async {
        let query = web::Query::<IngestQuery>::from_query(request.query_string())
            .map_err(|e| ApiError::bad_request(format!("Pyroscope: the query string: {e}")))?
            .into_inner();
        let content_type = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let convert = move |body: &[u8], options: &PyroscopeOptions| {
            kiln_formats::pyroscope::import_ingest(&query, content_type.as_deref(), body, options)
        };
        accept(&scope, &state, &ingest, &request, payload, convert).await?;
        Ok(HttpResponse::Ok().finish())
    }
    .await;
    count_answer(
        state.metrics.ingest(),
        &scope,
        Protocol::PyroscopeIngest,
        answer,
    )
}

/// `POST /push.v1.PusherService/Push`. Answers once the profiles' batches
/// are durable on the bus.
pub(crate) async fn push(
    Ingester(scope): Ingester,
    state: web::Data<AppState>,
    ingest: web::Data<IngestState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let answer = async {
        let encoding = push_encoding(&request)?;
        let convert = move |body: &[u8], options: &PyroscopeOptions| {
            kiln_formats::pyroscope::import_push(body, encoding, options)
        };
        accept(&scope, &state, &ingest, &request, payload, convert).await?;
        // An empty PushResponse: no bytes in protobuf, `{}` in JSON.
        Ok(match encoding {
            PushEncoding::Proto => HttpResponse::Ok()
                .content_type("application/proto")
                .finish(),
            PushEncoding::Json => HttpResponse::Ok()
                .content_type("application/json")
                .body("{}"),
        })
    }
    .await;
    count_answer(
        state.metrics.ingest(),
        &scope,
        Protocol::PyroscopePush,
        answer,
    )
}

/// Reads, converts (with `convert`, off the event loop), meters and
/// publishes one request.
async fn accept(
    scope: &Scope,
    state: &AppState,
    ingest: &IngestState,
    request: &HttpRequest,
    payload: web::Payload,
    convert: impl FnOnce(&[u8], &PyroscopeOptions) -> Result<PyroscopeImported, PyroscopeError>
    + Send
    + 'static,
) -> Result<(), ApiError> {
    let metrics = state.metrics.ingest();
    let limits = admit_tenant(state, scope).await?;
    let (body, sent) = ingest
        .read_metered(metrics, scope, &limits, request, payload, PYROSCOPE_BODY)
        .await?;
    let options = PyroscopeOptions { now_ns: now_ns() };
    let converted = ingest
        .convert("Pyroscope", move || {
            convert(&body, &options).map(|imported| {
                let encoded = Encoded::of(&imported.batches, imported.samples);
                (imported, encoded)
            })
        })
        .await?;
    let (imported, encoded) = converted.map_err(refusal)?;
    if !imported.skipped.is_empty() {
        debug!(
            tenant = scope.tenant(),
            skipped = ?imported.skipped,
            "Pyroscope profiles without samples left out"
        );
    }
    ingest
        .publish_converted(metrics, scope, &limits, &encoded, sent as u64)
        .await
}

/// The encoding of a Push request, or 415.
fn push_encoding(request: &HttpRequest) -> Result<PushEncoding, ApiError> {
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
        "application/proto" | "application/protobuf" | "application/x-protobuf" => {
            Ok(PushEncoding::Proto)
        }
        "application/json" => Ok(PushEncoding::Json),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {content_type:?} is not a unary Connect request: send \
             application/proto or application/json"
        ))),
    }
}

/// The HTTP error of a request the conversion refused.
fn refusal(e: PyroscopeError) -> ApiError {
    let message = format!("Pyroscope: {e}");
    if e.is_unsupported() {
        ApiError::UnsupportedMediaType(message)
    } else if e.is_too_large() {
        ApiError::PayloadTooLarge(message)
    } else {
        ApiError::bad_request(message)
    }
}

/// The middleware that answers these routes' errors, wherever raised, as
/// their clients read them: a 401 asks for basic auth (`WWW-Authenticate:
/// Basic realm="kiln"`), and Push's errors are Connect's JSON. Other
/// routes' answers pass untouched.
pub async fn answers(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let path = super::routed_path(&request);
    if !takes_basic_auth(path) {
        return next
            .call(request)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    }
    let connect = path == PUSH_PATH;
    super::error::answer_errors_as(request, next, |e| PyroscopeAnswer::of(e, connect)).await
}

/// An error answered as a Pyroscope route answers them.
#[derive(Debug)]
struct PyroscopeAnswer {
    http: StatusCode,
    message: String,
    retry_after: Option<actix_web::http::header::HeaderValue>,
    /// Connect's JSON (Push), else Kiln's (`/ingest`).
    connect: bool,
}

impl PyroscopeAnswer {
    fn of(e: &actix_web::Error, connect: bool) -> Self {
        let response = e.as_response_error().error_response();
        PyroscopeAnswer {
            http: response.status(),
            message: e.to_string(),
            retry_after: response.headers().get(RETRY_AFTER).cloned(),
            connect,
        }
    }
}

impl std::fmt::Display for PyroscopeAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ResponseError for PyroscopeAnswer {
    fn status_code(&self) -> StatusCode {
        self.http
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.http);
        if let Some(retry_after) = &self.retry_after {
            response.insert_header((RETRY_AFTER, retry_after.clone()));
        }
        if self.http == StatusCode::UNAUTHORIZED {
            response.insert_header((WWW_AUTHENTICATE, BASIC_CHALLENGE));
        }
        let body = if self.connect {
            serde_json::json!({"code": connect_code(self.http.as_u16()), "message": self.message})
        } else {
            serde_json::json!({"error": self.message})
        };
        response
            .content_type("application/json")
            .body(body.to_string())
    }
}

/// The Connect error code of an HTTP status.
fn connect_code(http: u16) -> &'static str {
    match http {
        400 | 413 | 415 => "invalid_argument",
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        421 => "failed_precondition",
        429 | 507 => "resource_exhausted",
        503 => "unavailable",
        _ => "internal",
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    fn body_of(response: HttpResponse) -> String {
        let body = actix_web::body::to_bytes(response.into_body());
        let body = futures_util::FutureExt::now_or_never(body)
            .unwrap()
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[test]
    fn push_takes_proto_and_json() {
        let with = |ct: &str| {
            push_encoding(
                &TestRequest::default()
                    .insert_header((CONTENT_TYPE, ct))
                    .to_http_request(),
            )
        };
        assert_eq!(with("application/proto").unwrap(), PushEncoding::Proto);
        assert_eq!(
            with("application/json; charset=utf-8").unwrap(),
            PushEncoding::Json
        );
        let e = with("application/connect+proto").unwrap_err();
        assert_eq!(e.status_code().as_u16(), 415);
    }

    #[test]
    fn errors_are_connect_json_and_ask_for_basic_auth() {
        let e: actix_web::Error = ApiError::Unauthorized("no key".into()).into();
        let response = PyroscopeAnswer::of(&e, true).error_response();
        assert_eq!(response.status().as_u16(), 401);
        assert_eq!(
            response.headers().get(WWW_AUTHENTICATE).unwrap(),
            BASIC_CHALLENGE
        );
        assert_eq!(
            body_of(response),
            r#"{"code":"unauthenticated","message":"no key"}"#
        );
        let e: actix_web::Error = ApiError::TooManyRequests {
            message: "slow down".into(),
            retry_after_s: 2,
        }
        .into();
        let response = PyroscopeAnswer::of(&e, false).error_response();
        assert_eq!(response.status().as_u16(), 429);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "2");
        assert_eq!(body_of(response), r#"{"error":"slow down"}"#);
    }
}
