//! The GPU view's endpoints: the range's kernels, one kernel's SASS
//! instructions with their stall reasons, and GPU time per kernel as a
//! Perfetto trace. Their answers are [`crate::query::GpuKernelsQuery`]'s
//! and its siblings'; `kernel` is a parameter of theirs, not a label
//! filter.

use std::collections::BTreeMap;

use actix_web::{HttpResponse, web};

use super::AppState;
use super::auth::extract::Reader;
use super::error::ApiError;
use super::params::{RESERVED, admit, query_range_reserving, step_param};
use super::query::{admit_and_answer, timeline_step};
use crate::query::{
    Admission, GpuInstructionsQuery, GpuKernelsQuery, GpuTraceQuery, QueryError, QueryRange, Reads,
};

type Params = web::Query<BTreeMap<String, String>>;

/// The range of a GPU query: `kernel` is the route's, the rest filters.
fn gpu_range(
    scope: kiln_storage::Scope,
    params: &BTreeMap<String, String>,
) -> Result<QueryRange, ApiError> {
    let mut reserved = RESERVED.to_vec();
    reserved.push("kernel");
    query_range_reserving(scope, params, &reserved)
}

fn kernel_param(params: &BTreeMap<String, String>) -> Result<&str, ApiError> {
    params
        .get("kernel")
        .map(String::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "missing query parameter kernel (a kernel's name as GET /api/v1/gpu/kernels \
                 gives it)",
            )
        })
}

/// `GET /api/v1/gpu/kernels?from=T&to=T[&LABEL=VALUE…]`: every kernel of
/// the range with its launches, GPU time (total, mean, share) and PC
/// samples, most time first.
pub(crate) async fn kernels(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let range = gpu_range(scope, &params)?;
    admit_and_answer(&state, range, GpuKernelsQuery).await
}

/// `GET /api/v1/gpu/instructions?kernel=NAME&from=T&to=T[&LABEL=VALUE…]`:
/// the kernel's sampled SASS instructions in address order, each with its
/// samples per stall reason.
pub(crate) async fn instructions(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let kernel = kernel_param(&params)?.to_owned();
    let range = gpu_range(scope, &params)?;
    admit_and_answer(&state, range, |range| GpuInstructionsQuery {
        range,
        kernel,
    })
    .await
}

/// `GET /api/v1/gpu/trace?from=T&to=T[&kernel=NAME][&step=DURATION][&LABEL=VALUE…]`:
/// GPU time per kernel and step as a Chrome JSON trace, to open at
/// ui.perfetto.dev: the chosen kernel, or the
/// [`crate::query::TRACE_KERNELS`] with the most time. Steps as
/// `/api/v1/timeline`'s.
pub(crate) async fn trace(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let kernel = params.get("kernel").filter(|k| !k.is_empty()).cloned();
    let range = gpu_range(scope, &params)?;
    let step = step_param(&params)?;
    let Admission {
        range,
        permit: _permit,
    } = admit(&state, range, Reads::Samples, None).await?;
    let (range, step_ns) = timeline_step(&range, step)?;
    let trace = state
        .query
        .send(GpuTraceQuery {
            range,
            step_ns,
            kernel,
        })
        .await
        .map_err(QueryError::from)??;
    Ok(HttpResponse::Ok()
        .insert_header((
            "Content-Disposition",
            "attachment; filename=\"kiln-gpu-trace.json\"",
        ))
        .json(trace))
}
