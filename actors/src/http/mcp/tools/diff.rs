//! `diff`: what grew and shrank between two ranges or two label values,
//! with significance: `GET /api/v1/compare`'s comparison and text.

use kiln_storage::Scope;
use serde_json::json;

use super::super::super::AppState;
use super::super::super::compare::{SideSpec, Sides, run, text, thresholds};
use super::super::super::error::ApiError;
use super::args::{Times, filters_schema, from_schema, named, to_schema};
use super::{Answer, Args};

pub(crate) const NAME: &str = "diff";

pub(crate) fn tool() -> rmcp::model::Tool {
    let side = |which: &str| {
        json!({
            "type": "object",
            "description": format!("The {which}: its own range and label filters, over the shared ones."),
            "properties": {"from": from_schema(), "to": to_schema(), "filters": filters_schema()},
            "additionalProperties": false,
        })
    };
    super::tool(
        NAME,
        "What changed",
        "Compares two profiles, a base and a target, each a range and/or label filters (two \
         ranges: base {from: now-2d, to: now-1d} against target {from: now-1d}; two versions: \
         from now-1d, base {filters: {version: '1.4'}} against target {filters: {version: \
         '1.5'}}), and tells which functions' self or total share of the samples grew or \
         shrank by more than sampling noise: per function, a two-proportion test (exact \
         binomial for small counts), Benjamini-Hochberg q-values over all functions, flagged \
         at q < fdr with a move of at least min_change points.",
        json!({
            "base": side("base"),
            "target": side("target"),
            "from": from_schema(),
            "to": to_schema(),
            "filters": filters_schema(),
            "limit": {
                "type": "integer", "minimum": 1, "maximum": 500, "default": 20,
                "description": "How many functions to list (significant first).",
            },
            "fdr": {
                "type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.01,
                "description": "False discovery rate: flag changes whose q-value is below it.",
            },
            "min_change": {
                "type": "number", "minimum": 0, "maximum": 100, "default": 0.1,
                "description": "Smallest change of share, in percentage points, to flag.",
            },
        }),
        &["base", "target"],
        json!({
            "base": {"type": "object"},
            "target": {"type": "object"},
            "thresholds": {"type": "object"},
            "method": {"type": "string"},
            "tests": {"type": "integer"},
            "compared": {"type": "integer"},
            "flagged": {"type": "integer"},
            "functions": {"type": "array", "items": {"type": "object"}},
        }),
    )
}

pub(crate) async fn call(
    state: &AppState,
    scope: Scope,
    mut args: Args,
) -> Result<Answer, ApiError> {
    let mut base = args
        .object("base")?
        .ok_or_else(|| ApiError::bad_request("base: missing (an object: from, to, filters)"))?;
    let mut target = args
        .object("target")?
        .ok_or_else(|| ApiError::bad_request("target: missing (an object: from, to, filters)"))?;
    let shared_times = args.times()?;
    let shared_filters = args.filters()?;
    let limit = args.whole("limit", 20, 1..=500)? as usize;
    let fdr = args.number("fdr", 0.01, 0.0..=1.0)?;
    let min_change = args.number("min_change", 0.1, 0.0..=100.0)?;
    args.finish(&[
        "base",
        "target",
        "from",
        "to",
        "filters",
        "limit",
        "fdr",
        "min_change",
    ])?;
    let (base_times, base_filters) = (base.times()?, base.filters()?);
    let (target_times, target_filters) = (target.times()?, target.filters()?);
    base.finish(&["from", "to", "filters"])?;
    target.finish(&["from", "to", "filters"])?;
    let sides = Sides::new(
        scope,
        spec(&shared_times, shared_filters),
        spec(&base_times, base_filters),
        spec(&target_times, target_filters),
    )
    .map_err(args_in_filters)?;
    let fdr_text = fdr.to_string();
    let min_change_text = min_change.to_string();
    let thresholds = thresholds(
        Some(("fdr", &fdr_text)),
        Some(("min_change", &min_change_text)),
    )?;
    let answer = run(state, &sides, thresholds, limit).await?;
    Ok(Answer {
        text: text(&answer),
        structured: serde_json::to_value(&answer)
            .map_err(|e| ApiError::internal("a comparison is not JSON", e))?,
    })
}

/// A side's owned times, borrowed as [`SideSpec`] takes them.
fn spec(times: &Times, filters: Vec<(String, String)>) -> SideSpec<'_> {
    SideSpec {
        from: named(&times.0),
        to: named(&times.1),
        filters,
    }
}

/// A label name refused in a side's filters, said as an argument.
fn args_in_filters(e: ApiError) -> ApiError {
    match e {
        ApiError::BadRequest(message) if message.contains("is not a label name") => {
            ApiError::BadRequest(format!("filters: {message}"))
        }
        other => other,
    }
}
