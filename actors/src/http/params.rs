//! Query-string parameters: times, ranges and label filters.

use std::collections::BTreeMap;
use std::time::Duration;

use kiln_storage::Scope;

use super::AppState;
use super::error::ApiError;
use crate::query::{
    Admission, Admit, QUERY_RETRY_AFTER, QueryError, QueryRange, Reads, Refusal, SpanLimit,
};

/// Default range when `from` is not given: the last hour.
const DEFAULT_RANGE: Duration = Duration::from_secs(3600);

/// Parses a time (moved to `kiln_formats`, whose Pyroscope importer reads
/// `from` and `until` the same way).
pub use kiln_formats::parse_time;

/// Names a query string may use besides label filters.
pub(crate) const RESERVED: &[&str] = &["from", "to", "format", "limit", "step", "lines"];

/// Builds the range of a query from its parameters: `from`, `to`, and every
/// other parameter not in [`RESERVED`] as a label filter.
pub(crate) fn query_range(
    scope: Scope,
    params: &BTreeMap<String, String>,
) -> Result<QueryRange, ApiError> {
    query_range_reserving(scope, params, RESERVED)
}

/// [`query_range`] for a route whose own parameters are `reserved`.
pub(crate) fn query_range_reserving(
    scope: Scope,
    params: &BTreeMap<String, String>,
    reserved: &[&str],
) -> Result<QueryRange, ApiError> {
    let time = |name: &'static str| params.get(name).map(|text| (name, text.as_str()));
    range_of(
        scope,
        time("from"),
        time("to"),
        label_params(params, reserved)?,
    )
}

/// The range of a query from its parts, however they came (a query
/// string, a tool's arguments): `from` and `to` as `(name, text)`, the
/// name being what an error calls it, and label filters whose names are
/// checked ([`check_label_name`]). `to` defaults to now, `from` to
/// [`DEFAULT_RANGE`] before `to`.
pub(crate) fn range_of(
    scope: Scope,
    from: Option<(&str, &str)>,
    to: Option<(&str, &str)>,
    filters: Vec<(String, String)>,
) -> Result<QueryRange, ApiError> {
    let now = kiln_model::now_ns();
    let time = |given: Option<(&str, &str)>, default: i64| match given {
        Some((name, text)) => {
            parse_time(text, now).map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
        }
        None => Ok(default),
    };
    let to_ns = time(to, now)?;
    let from_ns = time(from, to_ns.saturating_sub(DEFAULT_RANGE.as_nanos() as i64))?;
    if from_ns >= to_ns {
        let name = |given: Option<(&str, &str)>, default: &'static str| {
            given.map_or(default.to_owned(), |(name, _)| name.to_owned())
        };
        return Err(ApiError::bad_request(format!(
            "{} ({from_ns} ns) must be before {} ({to_ns} ns)",
            name(from, "from"),
            name(to, "to"),
        )));
    }
    for (name, _) in &filters {
        check_label_name(name, &[])?;
    }
    Ok(QueryRange {
        scope,
        from_ns,
        to_ns,
        filters,
    })
}

/// Admits a query of `range` (reading `reads`; `stricter` a span limit
/// below the server's, for costlier kinds of query): with the tenant's
/// limits (its own, else the server's defaults), no more of its queries
/// run at once than `max_concurrent_queries` (429 beyond, with
/// `Retry-After`), nothing older than `retention_days` is read, and a range
/// longer than the server's maximum is narrowed to its data or refused
/// (400). Hold the returned permit until the answer is built.
pub(crate) async fn admit(
    state: &AppState,
    range: QueryRange,
    reads: Reads,
    stricter: Option<SpanLimit>,
) -> Result<Admission, ApiError> {
    let limits = state
        .auth
        .tenant_limits(range.scope.tenant())
        .await?
        .or(state.defaults.limits());
    let range = within_retention(range, limits.retention_days, kiln_model::now_ns())?;
    let max_concurrent = limits
        .max_concurrent_queries
        .unwrap_or(state.defaults.max_concurrent_queries);
    let admit = Admit {
        range,
        reads,
        max_concurrent,
        stricter,
    };
    let tenant = admit.range.scope.tenant().to_owned();
    let admitted = state.query.send(admit).await.map_err(QueryError::from)?;
    if let Err(Refusal::TooManyQueries { .. }) = &admitted {
        state
            .metrics
            .over_quota(&tenant, crate::telemetry::Quota::MaxConcurrentQueries);
    }
    Ok(admitted?)
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Failed(e) => e.into(),
            Refusal::TooManyQueries { .. } => ApiError::TooManyRequests {
                message: refusal.to_string(),
                retry_after_s: QUERY_RETRY_AFTER.as_secs(),
            },
            Refusal::RangeTooLong { .. } => ApiError::BadRequest(refusal.to_string()),
        }
    }
}

/// `range` less what lies before the tenant's retention (`days` before
/// `now_ns`), or a 400 when nothing is left.
fn within_retention(
    mut range: QueryRange,
    days: Option<u32>,
    now_ns: i64,
) -> Result<QueryRange, ApiError> {
    const DAY_NS: i64 = 86_400_000_000_000;
    let Some(days) = days else {
        return Ok(range);
    };
    let oldest = now_ns.saturating_sub(i64::from(days).saturating_mul(DAY_NS));
    if range.to_ns <= oldest {
        return Err(ApiError::bad_request(format!(
            "the range ends {:.1} days ago, before the oldest data tenant {:?} keeps \
             ({days} days, its retention_days)",
            (now_ns.saturating_sub(range.to_ns)) as f64 / DAY_NS as f64,
            range.scope.tenant(),
        )));
    }
    range.from_ns = range.from_ns.max(oldest);
    Ok(range)
}

/// `step`, a duration (`10s`, `1m`) in nanoseconds, when given.
pub(crate) fn step_param(params: &BTreeMap<String, String>) -> Result<Option<i64>, ApiError> {
    params
        .get("step")
        .map(|text| {
            humantime::parse_duration(text)
                .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "step: {text:?} is not a duration (e.g. 10s): {e}"
                    ))
                })
        })
        .transpose()
}

/// Every parameter not in `reserved`, as `(label, value)`.
pub(crate) fn label_params(
    params: &BTreeMap<String, String>,
    reserved: &[&str],
) -> Result<Vec<(String, String)>, ApiError> {
    params
        .iter()
        .filter(|(name, _)| !reserved.contains(&name.as_str()))
        .map(|(name, value)| {
            check_label_name(name, reserved)?;
            Ok((name.clone(), value.clone()))
        })
        .collect()
}

/// A 400 naming `name` unless it is a label name: letters, digits, '_'
/// and '.', up to 64 bytes. `reserved`, the parameters of the route that
/// are not labels, are listed in the message.
pub(crate) fn check_label_name(name: &str, reserved: &[&str]) -> Result<(), ApiError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    if valid {
        return Ok(());
    }
    let reserved = match reserved {
        [] => String::new(),
        names => format!("; reserved: {}", names.join(", ")),
    };
    Err(ApiError::bad_request(format!(
        "{name:?} is not a label name (letters, digits, '_' and '.'{reserved})"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000_000;

    #[test]
    fn times_in_every_accepted_form() {
        assert_eq!(parse_time("now", NOW), Ok(NOW));
        assert_eq!(parse_time("now-1m", NOW), Ok(NOW - 60_000_000_000));
        assert_eq!(parse_time("1700000000", NOW), Ok(1_700_000_000_000_000_000));
        assert_eq!(parse_time("1.5", NOW), Ok(1_500_000_000));
        assert_eq!(parse_time("1970-01-01T00:00:01Z", NOW), Ok(1_000_000_000));
        assert_eq!(
            parse_time("2023-11-14T22:13:20.5Z", NOW),
            Ok(1_700_000_000_500_000_000)
        );
        let err = parse_time("yesterday", NOW).unwrap_err();
        assert!(err.contains("RFC 3339"), "{err}");
    }

    /// Retention narrows a range's start, and refuses a range entirely
    /// older than it.
    #[test]
    fn retention_cuts_the_start_of_ranges() {
        const DAY: i64 = 86_400_000_000_000;
        let range = |from_ns, to_ns| QueryRange {
            scope: Scope::new("t", "p").unwrap(),
            from_ns,
            to_ns,
            filters: vec![],
        };
        let kept = within_retention(range(0, NOW), Some(30), NOW).unwrap();
        assert_eq!((kept.from_ns, kept.to_ns), (NOW - 30 * DAY, NOW));
        let kept = within_retention(range(NOW - DAY, NOW), Some(30), NOW).unwrap();
        assert_eq!(kept.from_ns, NOW - DAY);
        assert_eq!(
            within_retention(range(0, NOW), None, NOW).unwrap(),
            range(0, NOW)
        );
        let err = within_retention(range(0, NOW - 31 * DAY), Some(30), NOW).unwrap_err();
        assert!(err.to_string().contains("retention_days"), "{err}");
    }

    /// Refusals keep their status: 429 with a retry time, 400.
    #[test]
    fn refusals_map_to_their_statuses() {
        use actix_web::ResponseError;
        use actix_web::http::StatusCode;

        let busy = ApiError::from(Refusal::TooManyQueries {
            tenant: "t".into(),
            limit: 8,
        });
        assert_eq!(busy.status_code(), StatusCode::TOO_MANY_REQUESTS);
        let response = busy.error_response();
        assert_eq!(response.headers().get("retry-after").unwrap(), "1");
        let long = ApiError::from(Refusal::RangeTooLong {
            asked: (0, NOW),
            data: (0, NOW),
            max: crate::query::DEFAULT_MAX_QUERY_RANGE,
            advice: "narrow it".into(),
        });
        assert_eq!(long.status_code(), StatusCode::BAD_REQUEST);
        let text = long.to_string();
        assert!(
            text.contains("400.0 days") && text.contains("narrow it"),
            "{text}"
        );
    }

    #[test]
    fn range_rejects_reversed_times_and_bad_label_names() {
        let scope = Scope::new("t", "p").unwrap();
        let mut params = BTreeMap::new();
        params.insert("from".to_owned(), "200".to_owned());
        params.insert("to".to_owned(), "100".to_owned());
        assert!(query_range(scope.clone(), &params).is_err());
        params.insert("to".to_owned(), "300".to_owned());
        params.insert("process".to_owned(), "app".to_owned());
        let range = query_range(scope.clone(), &params).unwrap();
        assert_eq!(range.filters, [("process".to_owned(), "app".to_owned())]);
        params.insert("bad name".to_owned(), "x".to_owned());
        assert!(query_range(scope, &params).is_err());
    }
}
