//! `top_functions`: the functions with the most samples of their own, with
//! their totals, in cores and share: `GET /api/v1/top`'s answer.

use kiln_storage::Scope;
use serde_json::{Value, json};

use super::super::super::AppState;
use super::super::super::compare::function_name;
use super::super::super::error::ApiError;
use super::super::super::query::admit_and_query;
use super::{Answer, Args, describe, range_json, range_output, range_properties_and, share};
use crate::query::TopQuery;

pub(crate) const NAME: &str = "top_functions";

pub(crate) fn tool() -> rmcp::model::Tool {
    super::tool(
        NAME,
        "Top functions",
        "The functions that burn the most CPU (or GPU) time in a range, hottest first: for each, \
         its self time (in the function itself) and total time (with what it calls), as a share \
         of all samples and in cores (average CPUs busy over the range).",
        range_properties_and(json!({
            "limit": {
                "type": "integer", "minimum": 1, "maximum": 500, "default": 20,
                "description": "How many functions to list.",
            },
        })),
        &[],
        json!({
            "range": range_output(),
            "samples": {"type": "integer"},
            "cores": {"type": "number"},
            "functions": {"type": "array", "items": {"type": "object"}},
        }),
    )
}

pub(crate) async fn call(
    state: &AppState,
    scope: Scope,
    mut args: Args,
) -> Result<Answer, ApiError> {
    let range = args.range(scope)?;
    let limit = args.whole("limit", 20, 1..=500)? as usize;
    args.finish(&["from", "to", "filters", "limit"])?;
    // Every function, for the shares' denominator: all samples.
    let functions = admit_and_query(state, range.clone(), |range| TopQuery {
        range,
        limit: usize::MAX,
    })
    .await?;
    let samples = functions
        .iter()
        .fold(0u64, |n, f| n.saturating_add(f.self_samples));
    let cores: f64 = functions.iter().map(|f| f.self_cores).sum();
    let listed = &functions[..functions.len().min(limit)];
    let mut text = format!(
        "Top functions by self time, {}: {samples} samples, {} cores on average.\n",
        describe(&range),
        figure(cores)
    );
    if listed.is_empty() {
        text.push_str("No samples in this range with these filters.\n");
    } else {
        text.push_str("  self%  self cores   total%  total cores  function\n");
    }
    let mut rows = Vec::new();
    for f in listed {
        let (self_share, total_share) = (
            share(f.self_samples, samples),
            share(f.total_samples, samples),
        );
        text.push_str(&format!(
            "{:>6.2}%  {:>10}  {:>6.2}%  {:>11}  {}\n",
            self_share * 100.0,
            figure(f.self_cores),
            total_share * 100.0,
            figure(f.total_cores),
            function_name(&f.name, f.module.as_deref()),
        ));
        rows.push(json!({
            "name": f.name,
            "module": f.module,
            "kind": f.kind,
            "self_samples": f.self_samples,
            "total_samples": f.total_samples,
            "self_share": self_share,
            "total_share": total_share,
            "self_cores": f.self_cores,
            "total_cores": f.total_cores,
        }));
    }
    if functions.len() > listed.len() {
        text.push_str(&format!(
            "({} more functions not listed.)\n",
            functions.len() - listed.len()
        ));
    }
    Ok(Answer {
        text,
        structured: json!({
            "range": range_json(&range),
            "samples": samples,
            "cores": cores,
            "functions": Value::Array(rows),
        }),
    })
}

/// Cores with three significant digits (at least three decimals): a
/// function of a day-long range may burn 0.000116 cores.
fn figure(cores: f64) -> String {
    let decimals = match cores.abs() {
        c if c >= 1.0 || c == 0.0 => 3,
        c => (2 - c.log10().floor() as i64).clamp(3, 9) as usize,
    };
    format!("{cores:.decimals$}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn cores_keep_three_significant_digits() {
        assert_eq!(super::figure(0.0), "0.000");
        assert_eq!(super::figure(1.23456), "1.235");
        assert_eq!(super::figure(0.0001157), "0.000116");
        assert_eq!(super::figure(0.25), "0.250");
    }
}
