//! API errors: a status and a message that names the problem, as JSON
//! `{"error": "…"}`.

use actix_web::http::StatusCode;
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
    /// The ingest bus cannot take the batch now; the client should retry.
    #[error("{0}")]
    Unavailable(String),
    /// Something failed on our side.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest(message.into())
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
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            ApiError::Unavailable(_) => {
                response.insert_header(("Retry-After", "5"));
            }
            ApiError::Unauthorized(_) => {
                response.insert_header(("WWW-Authenticate", "Bearer"));
            }
            _ => {}
        }
        response.json(serde_json::json!({ "error": self.to_string() }))
    }
}
