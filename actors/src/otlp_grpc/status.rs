//! Kiln's API errors as gRPC statuses, the way OTLP/gRPC senders read
//! them: the code they decide on (retry or drop), the message they log,
//! and a `google.rpc.RetryInfo` where waiting helps — the OpenTelemetry
//! exporters retry `RESOURCE_EXHAUSTED` only when it carries one.

use std::time::Duration;

use actix_web::ResponseError;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::http::error::ApiError;
use crate::http::otlp::grpc_code;

/// How long a sender should wait before retrying after a 503 or 507, as
/// their HTTP `Retry-After` says.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(5);

/// The gRPC status of an API error: the code OTLP maps its HTTP status
/// to, its message, and a retry delay when it has one.
pub(super) fn of(e: ApiError) -> Status {
    e.report();
    let code = Code::from(grpc_code(e.status_code().as_u16()));
    let retry = match &e {
        ApiError::TooManyRequests { retry_after_s, .. } => {
            Some(Duration::from_secs((*retry_after_s).max(1)))
        }
        ApiError::Unavailable(_) | ApiError::InsufficientStorage(_) => Some(UNAVAILABLE_RETRY),
        _ => None,
    };
    let message = e.to_string();
    match retry {
        Some(delay) => {
            Status::with_error_details(code, message, ErrorDetails::with_retry_info(Some(delay)))
        }
        None => Status::new(code, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_refusals_say_when_to_retry() {
        let status = of(ApiError::TooManyRequests {
            message: "over ingest_samples_per_s".into(),
            retry_after_s: 3,
        });
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), "over ingest_samples_per_s");
        let retry = status.get_details_retry_info().expect("a RetryInfo");
        assert_eq!(retry.retry_delay, Some(Duration::from_secs(3)));
        let full = of(ApiError::InsufficientStorage("disk full".into()));
        assert_eq!(full.code(), Code::ResourceExhausted);
        assert!(full.get_details_retry_info().is_some());
    }

    #[test]
    fn caller_errors_carry_no_retry() {
        for (e, code) in [
            (ApiError::bad_request("bad"), Code::InvalidArgument),
            (ApiError::Unauthorized("who".into()), Code::Unauthenticated),
            (ApiError::Forbidden("no".into()), Code::PermissionDenied),
            (
                ApiError::Misdirected("there".into()),
                Code::FailedPrecondition,
            ),
            (
                ApiError::PayloadTooLarge("big".into()),
                Code::InvalidArgument,
            ),
        ] {
            let status = of(e);
            assert_eq!(status.code(), code);
            assert!(status.get_details_retry_info().is_none());
        }
        assert_eq!(
            of(ApiError::Unavailable("bus".into())).code(),
            Code::Unavailable
        );
    }
}
