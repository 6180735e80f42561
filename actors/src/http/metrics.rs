//! Metric endpoints: one metric's series over a range, and the names of the
//! metrics a range holds.

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use kiln_model::MetricNames;

use super::AppState;
use super::error::ApiError;
use super::params::{RESERVED, query_range_reserving, step_param};
use crate::query::{MetricNamesQuery, MetricsQuery, QueryError, QueryRange};

/// Points a series has at most: longer ranges are averaged per step.
pub const MAX_METRIC_POINTS_PER_SERIES: i64 = 1_000;

/// Longest range a metric query reads. Points are stored raw (no rollups
/// yet), so a query reads every reading of its range: 31 days of one
/// reading a second is 2.7 M points per series.
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
    let range = metric_range(&state, &params)?;
    // Positive: `metric_range` checked from < to.
    let span = (range.to_ns - range.from_ns) as u64;
    let max_points = MAX_METRIC_POINTS_PER_SERIES as u64;
    let step_ns = match step_param(&params)? {
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
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let range = metric_range(&state, &params)?;
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

/// The range and filters of a metric query, at most [`MAX_METRIC_RANGE`]
/// long.
fn metric_range(
    state: &AppState,
    params: &BTreeMap<String, String>,
) -> Result<QueryRange, ApiError> {
    let reserved: Vec<&str> = RESERVED.iter().copied().chain(["name"]).collect();
    let range = query_range_reserving(state.scope.clone(), params, &reserved)?;
    let span = range.to_ns.saturating_sub(range.from_ns);
    if span > MAX_METRIC_RANGE.as_nanos() as i64 {
        // In days: humantime would say "1month 13h 26m 24s" for 31 days.
        let days = |ns: f64| ns / 86_400e9;
        return Err(ApiError::bad_request(format!(
            "the range is {:.1} days long; metrics are read over at most {} days at a time",
            days(span as f64),
            days(MAX_METRIC_RANGE.as_nanos() as f64),
        )));
    }
    Ok(range)
}
