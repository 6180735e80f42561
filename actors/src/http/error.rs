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
    /// Something failed on our side: what we were doing, and the error
    /// that stopped it, kept whole so that the log shows its chain (the
    /// response is made, and the error logged, once: [`ApiError::error_response`]).
    #[error("{context}")]
    Internal {
        /// What failed, in words a caller can report ("object store").
        context: String,
        /// Why, when an error said so.
        #[source]
        source: Option<BoxedError>,
    },
}

/// Any error, kept as the cause of an [`ApiError::Internal`].
pub(crate) type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl ApiError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest(message.into())
    }

    /// A failure on our side while doing `context`, caused by `source`.
    pub(crate) fn internal(context: impl Into<String>, source: impl Into<BoxedError>) -> Self {
        ApiError::Internal {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// A failure on our side with no error behind it (a broken
    /// invariant, a set-up missing).
    pub(crate) fn internal_msg(context: impl Into<String>) -> Self {
        ApiError::Internal {
            context: context.into(),
            source: None,
        }
    }

    /// Logs an internal error with the chain of its causes: once, where
    /// its answer is made (an HTTP response, a gRPC status).
    pub(crate) fn report(&self) {
        if let ApiError::Internal { .. } = self {
            tracing::error!(error = %error_chain(self), "answered as an internal error");
        }
    }

    /// What the caller is told: the message, and for an internal error
    /// the chain of its causes after its context (what they report).
    fn answer_text(&self) -> String {
        match self {
            ApiError::Internal { .. } => error_chain(self),
            _ => self.to_string(),
        }
    }
}

/// `error` and each of its sources, joined by ": ".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        // Many errors print their source in their own message too.
        let said = e.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = e.source();
    }
    text
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
            _ => ApiError::internal("store", e),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Unavailable(_) => ApiError::Unavailable(e.to_string()),
            QueryError::Store(_) => ApiError::internal("query", e),
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
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
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
        self.report();
        response.json(serde_json::json!({ "error": self.answer_text() }))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that prints its source in its own message, as many do.
    #[derive(Debug, thiserror::Error)]
    #[error("reading segment 7: {0}")]
    struct Segment(#[source] std::io::Error);

    #[test]
    fn an_internal_error_keeps_its_cause_and_answers_with_its_chain() {
        let disk = std::io::Error::other("disk on fire");
        let e = ApiError::internal("object store", Segment(disk));
        let source = std::error::Error::source(&e).expect("the cause is kept");
        assert_eq!(source.to_string(), "reading segment 7: disk on fire");
        // Each cause once, though the second repeats the third.
        assert_eq!(
            e.answer_text(),
            "object store: reading segment 7: disk on fire"
        );
        assert_eq!(e.status_code(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(ApiError::internal_msg("no store").answer_text(), "no store");
    }
}
