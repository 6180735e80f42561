//! API errors: a status and a message that names the problem, as JSON
//! `{"error": "…"}`.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError};

use crate::query::QueryError;

/// An error answered to an API caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// The request needs a credential it did not carry; the message says
    /// which and how to send it.
    #[error("{0}")]
    Unauthorized(String),
    /// The credential is wrong, or the server allows no one this request.
    #[error("{0}")]
    Forbidden(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What the request would create exists already.
    #[error("{0}")]
    Conflict(String),
    /// The request body is larger than the route accepts (compressed or
    /// decompressed); the message names the limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body is of a content type the route does not read; the
    /// message names the ones it does.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The caller is over a rate or concurrency limit; retry after
    /// `retry_after_s` seconds.
    #[error("{message}")]
    TooManyRequests {
        /// Which limit, its value, and how it is changed.
        message: String,
        /// Seconds until a retry can succeed (`Retry-After`).
        retry_after_s: u64,
    },
    /// The request's key belongs to a region this one cannot send it to
    /// (421 Misdirected Request); the message says where it belongs.
    #[error("{0}")]
    Misdirected(String),
    /// The ingest bus cannot take the batch now; the client should retry.
    #[error("{0}")]
    Unavailable(String),
    /// The disk is full (507 Insufficient Storage): the client should
    /// retry once the operator has made room.
    #[error("{0}")]
    InsufficientStorage(String),
    /// Something failed on our side.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest(message.into())
    }
}

impl From<kiln_storage::StoreError> for ApiError {
    /// A store's refusal of what the caller sent is the caller's error; a
    /// failing store is ours.
    fn from(e: kiln_storage::StoreError) -> Self {
        use kiln_storage::StoreError as E;
        match e {
            E::InvalidName { .. }
            | E::InvalidArgument { .. }
            | E::InvalidMetric(_)
            | E::Refused { .. } => ApiError::BadRequest(e.to_string()),
            E::NotFound { .. } => ApiError::NotFound(e.to_string()),
            E::AlreadyExists { .. } => ApiError::Conflict(e.to_string()),
            _ => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Unavailable(_) => ApiError::Unavailable(e.to_string()),
            QueryError::Store(_) => ApiError::Internal(e.to_string()),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Misdirected(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            ApiError::Unavailable(_) | ApiError::InsufficientStorage(_) => {
                response.insert_header(("Retry-After", "5"));
            }
            ApiError::TooManyRequests { retry_after_s, .. } => {
                response.insert_header(("Retry-After", retry_after_s.max(&1).to_string()));
            }
            ApiError::Unauthorized(_) => {
                response.insert_header(("WWW-Authenticate", "Bearer"));
            }
            _ => {}
        }
        response.json(serde_json::json!({ "error": self.to_string() }))
    }
}

/// Runs `request` and answers its error, wherever it was raised (the
/// credential and region middleware before the handler included), as
/// `shape` renders it: for routes whose clients read errors in a
/// protocol's own shape (OTLP's `google.rpc.Status`, Connect's JSON)
/// rather than Kiln's. Status codes and headers are the shape's to keep.
pub(crate) async fn answer_errors_as<E: ResponseError + 'static>(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
    shape: impl FnOnce(&actix_web::Error) -> E,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // The request cannot be kept aside (a clone would stop the router
    // from filling in its path): an error raised before the handler
    // becomes an error that answers in the shape.
    match next.call(request).await {
        Err(e) => Err(shape(&e).into()),
        Ok(response) => match response.response().error() {
            Some(e) => {
                let answer = shape(e).error_response();
                let (request, _) = response.into_parts();
                Ok(ServiceResponse::new(request, answer))
            }
            None => Ok(response.map_into_boxed_body()),
        },
    }
}
