//! Saved comparisons ("watch this service's version label"): a project
//! keeps the parameters of `GET /api/v1/compare` under a name, reads its
//! result back whenever it asks (run then, relative times resolved then),
//! and its Prometheus scrapes the results as metrics to alert on.
//!
//! | method | path | role |
//! |---|---|---|
//! | POST | `/api/v1/comparisons` `{"name": N, "params": {…}}` | admin |
//! | GET | `/api/v1/comparisons` | read |
//! | GET | `/api/v1/comparisons/metrics` | read |
//! | GET, DELETE | `/api/v1/comparisons/{name}` | read, admin |
//! | GET | `/api/v1/comparisons/{name}/result[?format=json\|text]` | read |

mod prometheus;
mod saved;

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use kiln_storage::Scope;
use serde::{Deserialize, Serialize};

use self::prometheus::Outcome;
use self::saved::{SavedComparison, SavedComparisons, check_name, check_params};
use super::AppState;
use super::auth::extract::{ComparisonEditor, Reader};
use super::body::{self, BodyLimit};
use super::compare::{CompareAnswer, CompareRequest, run, text};
use super::error::ApiError;

/// A saved comparison's body: a name and a few parameters.
const SAVE_BODY: BodyLimit = BodyLimit {
    what: "a saved comparison",
    max_bytes: 64 << 10,
};

/// `POST /api/v1/comparisons`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveComparison {
    name: String,
    params: BTreeMap<String, String>,
}

/// `POST /api/v1/comparisons` `{"name": "api-version", "params":
/// {"from": "now-1d", "base.version": "1.4", "target.version": "1.5"}}`:
/// saves a comparison of the caller's project (the parameters of
/// `GET /api/v1/compare` but `format`, checked as it checks them). 201
/// with what was saved; 400 naming a bad name or parameter; 409 when the
/// name is taken or the project holds its most.
pub(crate) async fn create(
    ComparisonEditor(scope): ComparisonEditor,
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let bytes = body::read(&request, payload, SAVE_BODY).await?;
    let body: SaveComparison = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not a saved comparison ({{\"name\": …, \"params\": {{…}}}}): {e}"
        ))
    })?;
    check_name(&body.name)?;
    check_params(&body.params)?;
    // Parsed now only to refuse what could never run; each run parses
    // them again, resolving relative times then.
    CompareRequest::of_params(scope.clone(), &body.params)?;
    let comparison = SavedComparison {
        name: body.name,
        params: body.params,
        created_ns: kiln_model::now_ns(),
    };
    SavedComparisons::new(state.objects.as_ref(), &scope)
        .create(&comparison)
        .await?;
    tracing::info!(
        tenant = scope.tenant(),
        project = scope.project(),
        comparison = comparison.name,
        "comparison saved"
    );
    Ok(HttpResponse::Created().json(comparison))
}

/// `GET /api/v1/comparisons`: the project's saved comparisons, by name.
pub(crate) async fn list(
    Reader(scope): Reader,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let saved = SavedComparisons::new(state.objects.as_ref(), &scope)
        .list()
        .await?;
    Ok(HttpResponse::Ok().json(saved))
}

/// `GET /api/v1/comparisons/{name}`: one saved comparison; 404 when the
/// project has none of that name.
pub(crate) async fn get(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let comparison = saved_named(&state, &scope, &name).await?;
    Ok(HttpResponse::Ok().json(comparison))
}

/// `DELETE /api/v1/comparisons/{name}`: 204, or 404 when none was saved.
pub(crate) async fn delete(
    ComparisonEditor(scope): ComparisonEditor,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let deleted = SavedComparisons::new(state.objects.as_ref(), &scope)
        .delete(&name)
        .await?;
    if !deleted {
        return Err(not_saved(&name));
    }
    tracing::info!(
        tenant = scope.tenant(),
        project = scope.project(),
        comparison = name.as_str(),
        "saved comparison deleted"
    );
    Ok(HttpResponse::NoContent().finish())
}

/// A saved comparison's result, as `GET /api/v1/comparisons/{name}/result`
/// answers it in JSON.
#[derive(Debug, Serialize)]
struct ResultAnswer {
    /// The comparison as saved.
    comparison: SavedComparison,
    /// What `GET /api/v1/compare` answers for its parameters now.
    result: CompareAnswer,
}

/// `GET /api/v1/comparisons/{name}/result[?format=json|text]`: runs the
/// saved comparison now (relative times resolved now) and answers what
/// `GET /api/v1/compare` would, with the comparison it ran.
pub(crate) async fn result(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    name: web::Path<String>,
    params: web::Query<BTreeMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    if let Some(other) = params.keys().find(|k| *k != "format") {
        return Err(ApiError::bad_request(format!(
            "{other:?}: a saved comparison runs with its saved parameters; only format is taken \
             here (save another comparison, or use GET /api/v1/compare)"
        )));
    }
    let format = params.get("format").map_or("json", String::as_str);
    if !["json", "text"].contains(&format) {
        return Err(ApiError::bad_request(format!(
            "format: {format:?} is not json or text"
        )));
    }
    let comparison = saved_named(&state, &scope, &name).await?;
    let answer = run_saved(&state, &scope, &comparison, None).await?;
    Ok(match format {
        "text" => HttpResponse::Ok()
            .content_type("text/plain; charset=utf-8")
            .body(format!("comparison {}\n{}", comparison.name, text(&answer))),
        _ => HttpResponse::Ok().json(ResultAnswer {
            comparison,
            result: answer,
        }),
    })
}

/// `GET /api/v1/comparisons/metrics`: every saved comparison of the
/// project run now, as Prometheus text ([`prometheus::encode`] names the
/// series), for the tenant's Prometheus to scrape with a read key:
///
/// ```yaml
/// - job_name: kiln-comparisons
///   metrics_path: /api/v1/comparisons/metrics
///   authorization: {credentials_file: /etc/prometheus/kiln-key}
///   static_configs: [{targets: ["kiln.example:7070"]}]
/// ```
///
/// A comparison that fails to run (its saved range is now refused, the
/// query is over a limit) is `kiln_comparison_ok 0` and logged; the
/// others are answered.
pub(crate) async fn metrics(
    Reader(scope): Reader,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let saved = SavedComparisons::new(state.objects.as_ref(), &scope)
        .list()
        .await?;
    let mut answers = Vec::with_capacity(saved.len());
    for comparison in &saved {
        // Every function, so that the largest flagged move is among them.
        match run_saved(&state, &scope, comparison, Some(usize::MAX)).await {
            Ok(answer) => answers.push(Some(answer)),
            Err(error) => {
                tracing::warn!(
                    tenant = scope.tenant(),
                    comparison = comparison.name,
                    %error,
                    "a saved comparison did not run for its metrics"
                );
                answers.push(None);
            }
        }
    }
    let outcomes: Vec<Outcome<'_>> = saved
        .iter()
        .zip(&answers)
        .map(|(comparison, answer)| Outcome {
            name: &comparison.name,
            answer: answer.as_ref(),
        })
        .collect();
    // As `/metrics` answers an encoding failure (which writing to a
    // String never gives).
    Ok(match prometheus::encode(&outcomes) {
        Ok(text) => HttpResponse::Ok()
            .content_type(crate::telemetry::CONTENT_TYPE)
            .body(text),
        Err(e) => HttpResponse::InternalServerError().body(format!("encoding metrics: {e}")),
    })
}

/// The saved comparison `name` of `scope`; 404 naming it when none.
async fn saved_named(
    state: &AppState,
    scope: &Scope,
    name: &str,
) -> Result<SavedComparison, ApiError> {
    SavedComparisons::new(state.objects.as_ref(), scope)
        .get(name)
        .await?
        .ok_or_else(|| not_saved(name))
}

/// Runs `comparison` now in `scope`, listing `limit` functions (else as
/// saved).
async fn run_saved(
    state: &AppState,
    scope: &Scope,
    comparison: &SavedComparison,
    limit: Option<usize>,
) -> Result<CompareAnswer, ApiError> {
    let request = CompareRequest::of_params(scope.clone(), &comparison.params)?;
    let limit = limit.unwrap_or(request.limit);
    run(state, &request.sides, request.thresholds, limit).await
}

fn not_saved(name: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no saved comparison is named {name:?} in this project (GET /api/v1/comparisons lists them)"
    ))
}
