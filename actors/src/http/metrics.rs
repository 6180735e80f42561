//! Metric endpoints: one metric's series over a range, and the names of the
//! metrics a range holds.

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use kiln_model::MetricNames;

use super::AppState;
use super::auth::extract::Reader;
use super::error::ApiError;
use super::params::{RESERVED, admit, query_range_reserving, step_param};
use crate::query::{
    Admission, MetricNamesQuery, MetricsQuery, QueryError, QueryRange, Reads, SpanLimit,
};

/// Points a series has at most: longer ranges are averaged per step.
pub const MAX_METRIC_POINTS_PER_SERIES: i64 = 1_000;

/// Longest span of points a metric query reads. Points are stored raw (no
/// rollups yet), so a query reads every reading of its range: 31 days of
/// one reading a second is 2.7 M points per series. A longer range is
/// narrowed to the hours holding the metric's points first (as every
/// query's is, `crate::query::QueryOptions`), so only metrics whose
/// points span more are refused.
pub const MAX_METRIC_RANGE: Duration = Duration::from_secs(31 * 24 * 3600);

/// The narrowest step chosen when none is asked for: agents read metrics
/// about once a second.
const MIN_DEFAULT_STEP_NS: i64 = 1_000_000_000;

type Params = web::Query<BTreeMap<String, String>>;

/// `GET /api/v1/metrics?name=NAME&from=T&to=T[&step=DURATION][&LABEL=VALUE…]`:
/// the series of metric `name` whose labels match the filters, each point
/// the average of the readings in its step. Without `step`, the step is the
/// range ÷ 1000 rounded up to whole seconds (at least 1 s).
pub(crate) async fn series(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let name = params.get("name").ok_or_else(|| {
        ApiError::bad_request(
            "missing query parameter name (a metric, e.g. gpu.utilization_percent; \
             GET /api/v1/metrics/names lists them)",
        )
    })?;
    kiln_model::check_metric_name(name).map_err(|e| ApiError::bad_request(format!("name: {e}")))?;
    let range = metric_range(scope, &params)?;
    let step = step_param(&params)?;
    let days = MAX_METRIC_RANGE.as_secs() / 86_400;
    let stricter = SpanLimit {
        max: MAX_METRIC_RANGE,
        advice: format!(
            "metrics are read over at most {days} days at a time (they have no rollups yet); \
             narrow from and to"
        ),
    };
    let reads = Reads::Metric(name.clone());
    let Admission {
        range,
        permit: _permit,
    } = admit(&state, range, reads, Some(stricter)).await?;
    // Positive: `metric_range` checked from < to, and admission keeps it.
    let span = range.to_ns.saturating_sub(range.from_ns) as u64;
    let max_points = MAX_METRIC_POINTS_PER_SERIES as u64;
    let step_ns = match step {
        Some(step) => step,
        None => {
            let seconds = span
                .div_ceil(max_points)
                .div_ceil(MIN_DEFAULT_STEP_NS as u64);
            seconds.max(1) as i64 * MIN_DEFAULT_STEP_NS
        }
    };
    if step_ns <= 0 || span.div_ceil(step_ns as u64) > max_points {
        return Err(ApiError::bad_request(format!(
            "step: {} gives more than {MAX_METRIC_POINTS_PER_SERIES} points per series over \
             the range; use at least {} (or leave step out)",
            humantime::format_duration(Duration::from_nanos(step_ns.max(0) as u64)),
            humantime::format_duration(Duration::from_nanos(span.div_ceil(max_points))),
        )));
    }
    let set = state
        .query
        .send(MetricsQuery {
            range,
            name: name.clone(),
            step_ns,
        })
        .await
        .map_err(QueryError::from)??;
    Ok(HttpResponse::Ok().json(set))
}

/// `GET /api/v1/metrics/names?from=T&to=T`: the metrics with readings in
/// the hours the range touches (label filters, if given, are not applied).
pub(crate) async fn names(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let range = metric_range(scope, &params)?;
    let Admission {
        range,
        permit: _permit,
    } = admit(&state, range, Reads::MetricNames, None).await?;
    let (from_ns, to_ns) = (range.from_ns, range.to_ns);
    let names = state
        .query
        .send(MetricNamesQuery(range))
        .await
        .map_err(QueryError::from)??;
    Ok(HttpResponse::Ok().json(MetricNames {
        from_ns,
        to_ns,
        names,
    }))
}

/// The range and filters of a metric query (its length is admission's
/// business).
fn metric_range(
    scope: kiln_storage::Scope,
    params: &BTreeMap<String, String>,
) -> Result<QueryRange, ApiError> {
    let reserved: Vec<&str> = RESERVED.iter().copied().chain(["name"]).collect();
    query_range_reserving(scope, params, &reserved)
}
