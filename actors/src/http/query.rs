//! Read endpoints: flamegraph, top functions, CPU over time, labels.
//!
//! Every query is admitted first ([`admit`]): a per-tenant limit on
//! queries running at once (429), and a maximum span of data read (400;
//! a longer range is first narrowed to the hours that hold data, so an
//! all-time query over a few days of profiles is answered). A query whose
//! client goes away stops scanning.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use kiln_formats::export;
use kiln_model::flamewire::{FlameGraph, FlamewireError, Tree, access};

use super::AppState;
use super::auth::extract::Reader;
use super::encoding::flamewire_response;
use super::error::ApiError;
use super::params::{admit, query_range, step_param};
use crate::query::{
    Admission, FlamegraphQuery, Granularity, LabelsQuery, QueryRange, Reads, TimelineQuery,
    TopQuery,
};

/// The `format`s of `/api/v1/flamegraph`.
const FLAMEGRAPH_FORMATS: &[&str] = &["collapsed", "json", "flamewire", "pprof", "speedscope"];

/// Points a timeline may have.
const MAX_TIMELINE_POINTS: i64 = 10_000;
/// Points a timeline has when `step` is not given.
const DEFAULT_TIMELINE_POINTS: i64 = 240;

type Params = web::Query<BTreeMap<String, String>>;

/// `GET /api/v1/flamegraph?from=T&to=T&format=collapsed|json|flamewire|pprof|speedscope[&LABEL=VALUE…]`
///
/// `format=flamewire` goes zstd-coded to clients that accept zstd
/// ([`flamewire_response`]).
pub(crate) async fn flamegraph(
    Reader(scope): Reader,
    req: HttpRequest,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let format = params.get("format").map_or("json", String::as_str);
    if !FLAMEGRAPH_FORMATS.contains(&format) {
        return Err(ApiError::bad_request(format!(
            "format: {format:?} is not one of {}",
            FLAMEGRAPH_FORMATS.join(", ")
        )));
    }
    let granularity = match params.get("lines").map(String::as_str) {
        None | Some("false" | "0") => Granularity::Function,
        Some("true" | "1") => Granularity::Line,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "lines: {other:?} is not true or false"
            )));
        }
    };
    let range = query_range(scope, &params)?;
    // The permit is held until the answer is serialized (it costs too).
    let Admission {
        range,
        permit: _permit,
    } = admit(&state, range, Reads::Samples, None).await?;
    let wire = state
        .query
        .send(FlamegraphQuery(range, granularity))
        .await
        .map_err(crate::query::QueryError::from)??;
    let started = std::time::Instant::now();
    let bytes = wire.to_bytes();
    tracing::debug!(
        bytes = bytes.len(),
        serialize_ms = started.elapsed().as_secs_f64() * 1e3,
        "flamegraph serialized"
    );
    if format == "flamewire" {
        return Ok(flamewire_response(&req, bytes.into_vec()).await);
    }
    let unreadable = |e: FlamewireError| ApiError::internal("built an unreadable flamegraph", e);
    let archived = access(&bytes).map_err(unreadable)?;
    let tree = Tree::of(archived).map_err(unreadable)?;
    let graph = FlameGraph::new(archived, &tree);
    let mut body = Vec::new();
    let content_type = match format {
        "collapsed" => {
            graph
                .write_collapsed(&mut body)
                .map_err(|e| ApiError::internal("writing collapsed stacks", e))?;
            "text/plain; charset=utf-8"
        }
        "json" => {
            graph
                .write_json(&mut body)
                .map_err(|e| ApiError::internal("writing JSON", e))?;
            "application/json"
        }
        "pprof" => {
            body = export::to_pprof(graph).map_err(|e| ApiError::internal("exporting pprof", e))?;
            "application/vnd.google.protobuf+gzip"
        }
        "speedscope" => {
            body = export::to_speedscope(graph, "kiln")
                .map_err(|e| ApiError::internal("exporting speedscope", e))?;
            "application/json"
        }
        _ => unreachable!("flamewire is answered above, other formats are refused"),
    };
    Ok(HttpResponse::Ok().content_type(content_type).body(body))
}

/// `GET /api/v1/top?from=T&to=T[&limit=N][&LABEL=VALUE…]`
pub(crate) async fn top(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let limit = match params.get("limit") {
        None => 100,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!("limit: {text:?} is not a number from 1 to 100000"))
            })?,
    };
    let range = query_range(scope, &params)?;
    admit_and_answer(&state, range, |range| TopQuery { range, limit }).await
}

/// `GET /api/v1/timeline?from=T&to=T[&step=DURATION][&LABEL=VALUE…]`: CPU
/// over time in cores, at most [`MAX_TIMELINE_POINTS`] points; without
/// `step`, about [`DEFAULT_TIMELINE_POINTS`] over the range, at a round
/// step from a round time (see [`timeline_step`]).
/// The range is the admitted one: an all-time range is narrowed to the
/// data first, so its default step is the data's span / 240, not 130
/// years / 240.
pub(crate) async fn timeline(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let range = query_range(scope, &params)?;
    let step = step_param(&params)?;
    let Admission {
        range,
        permit: _permit,
    } = admit(&state, range, Reads::Samples, None).await?;
    let (range, step_ns) = timeline_step(&range, step)?;
    let timeline = state
        .query
        .send(TimelineQuery { range, step_ns })
        .await
        .map_err(crate::query::QueryError::from)??;
    Ok(HttpResponse::Ok().json(timeline))
}

/// The steps a default step is rounded up to, in seconds; past the last,
/// whole days.
const ROUND_STEPS_S: [i64; 18] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
];

/// A time series over the admitted `range`: its step and the range its
/// steps cover. `step` as asked keeps the range as it is. Without it, the
/// step is [`DEFAULT_TIMELINE_POINTS`] over the range rounded up to a
/// round step (1 s … 30 min, 1, 2, 3, 6, 12 h, whole days), and the
/// range starts on that step's grid, up to one step earlier than asked:
/// points at round times, and, from an hour up, steps that are whole
/// hours or days of the epoch, which the rollups answer (a week's
/// default timeline read 42-minute steps off the hour grid, all from raw
/// samples). Refused when it gives more than [`MAX_TIMELINE_POINTS`].
pub(crate) fn timeline_step(
    range: &QueryRange,
    step: Option<i64>,
) -> Result<(QueryRange, i64), ApiError> {
    // Positive: `query_range` checked from < to, and admission keeps it.
    let span = range.to_ns.saturating_sub(range.from_ns);
    let Some(step_ns) = step else {
        let step_ns = round_step((span / DEFAULT_TIMELINE_POINTS).max(1_000_000_000));
        let mut aligned = range.clone();
        aligned.from_ns = range.from_ns.div_euclid(step_ns) * step_ns;
        return Ok((aligned, step_ns));
    };
    if step_ns <= 0 || span / step_ns > MAX_TIMELINE_POINTS {
        let at_least = (span / MAX_TIMELINE_POINTS).max(1) as u64;
        return Err(ApiError::bad_request(format!(
            "step: {} gives more than {MAX_TIMELINE_POINTS} points over the range; use at least \
             {} (or leave step out)",
            humantime::format_duration(std::time::Duration::from_nanos(step_ns.max(0) as u64)),
            humantime::format_duration(std::time::Duration::from_nanos(at_least)),
        )));
    }
    Ok((range.clone(), step_ns))
}

/// The first of [`ROUND_STEPS_S`] at least `step_ns`, else whole days.
fn round_step(step_ns: i64) -> i64 {
    const SECOND: i64 = 1_000_000_000;
    const DAY: i64 = 86_400 * SECOND;
    ROUND_STEPS_S
        .iter()
        .map(|s| s * SECOND)
        .find(|&s| s >= step_ns)
        .unwrap_or_else(|| (step_ns.saturating_add(DAY - 1) / DAY).saturating_mul(DAY))
}

/// `GET /api/v1/labels?from=T&to=T`: label names and values seen, with sample
/// counts, for filter pickers.
pub(crate) async fn labels(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let range = query_range(scope, &params)?;
    admit_and_answer(&state, range, LabelsQuery).await
}

/// Admits a query of `range` reading samples, sends the coordinator the
/// message `message` makes of the admitted range, and answers with its
/// result as JSON: the whole of a read route once its parameters are read.
pub(crate) async fn admit_and_answer<M, T>(
    state: &AppState,
    range: QueryRange,
    message: impl FnOnce(QueryRange) -> M,
) -> Result<HttpResponse, ApiError>
where
    M: actix::Message<Result = Result<T, crate::query::QueryError>> + Send + 'static,
    T: serde::Serialize + Send + 'static,
    crate::query::QueryCoordinator: actix::Handler<M>,
{
    let answer = admit_and_query(state, range, message).await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// Admits a query of `range` reading samples and sends the coordinator
/// the message `message` makes of the admitted range: its result, for a
/// caller that builds its own answer from it (compare, the MCP tools).
/// The admission's permit is released when the result is in.
pub(crate) async fn admit_and_query<M, T>(
    state: &AppState,
    range: QueryRange,
    message: impl FnOnce(QueryRange) -> M,
) -> Result<T, ApiError>
where
    M: actix::Message<Result = Result<T, crate::query::QueryError>> + Send + 'static,
    T: Send + 'static,
    crate::query::QueryCoordinator: actix::Handler<M>,
{
    let Admission {
        range,
        permit: _permit,
    } = admit(state, range, Reads::Samples, None).await?;
    Ok(state
        .query
        .send(message(range))
        .await
        .map_err(crate::query::QueryError::from)??)
}

#[cfg(test)]
mod tests {
    use kiln_storage::Scope;

    use super::*;

    const S: i64 = 1_000_000_000;
    const H: i64 = 3600 * S;

    fn range(from_ns: i64, to_ns: i64) -> QueryRange {
        QueryRange {
            scope: Scope::new("t", "p").unwrap(),
            from_ns,
            to_ns,
            filters: Vec::new(),
        }
    }

    #[test]
    fn a_default_step_is_round_and_starts_on_its_grid() {
        // A week from 10:17:23: 42-minute steps, rounded up to an hour,
        // starting at 10:00, so that every step is an hour of the epoch.
        let from = 1_795_000_000 * S / H * H + 17 * 60 * S + 23 * S;
        let (aligned, step) = timeline_step(&range(from, from + 168 * H), None).unwrap();
        assert_eq!(step, H);
        assert_eq!(aligned.from_ns, from / H * H);
        assert_eq!(aligned.to_ns, from + 168 * H);
        // Ten minutes: 2.5 s steps rounded up to 5 s, from a multiple of 5 s.
        let (aligned, step) = timeline_step(&range(from, from + 600 * S), None).unwrap();
        assert_eq!((step, aligned.from_ns % (5 * S)), (5 * S, 0));
        // A year: whole days.
        let (_, step) = timeline_step(&range(from, from + 365 * 24 * H), None).unwrap();
        assert_eq!(step, 2 * 24 * H);
    }

    #[test]
    fn a_step_asked_for_keeps_the_range() {
        let asked = range(17 * S, 17 * S + H);
        assert_eq!(
            timeline_step(&asked, Some(7 * S)).unwrap(),
            (asked.clone(), 7 * S)
        );
        assert!(
            timeline_step(&asked, Some(S / 10)).is_err(),
            "36,000 points"
        );
    }
}
