//! `labels`: the label names of a range and their values, with sample
//! counts, most samples first: what `filters` can name.

use kiln_storage::Scope;
use serde_json::{Value, json};

use super::super::super::AppState;
use super::super::super::error::ApiError;
use super::super::super::query::admit_and_query;
use super::{Answer, Args, describe, range_json, range_output, range_properties_and};
use crate::query::LabelsQuery;

pub(crate) const NAME: &str = "labels";

pub(crate) fn tool() -> rmcp::model::Tool {
    super::tool(
        NAME,
        "Labels",
        "The label names of a range's samples (service, host, process, version, …) and their \
         values with sample counts, most samples first: the names and values the other tools' \
         `filters` take.",
        range_properties_and(json!({
            "values": {
                "type": "integer", "minimum": 1, "maximum": 1000, "default": 20,
                "description": "How many values to list per label.",
            },
        })),
        &[],
        json!({
            "range": range_output(),
            "labels": {"type": "object"},
        }),
    )
}

pub(crate) async fn call(
    state: &AppState,
    scope: Scope,
    mut args: Args,
) -> Result<Answer, ApiError> {
    let range = args.range(scope)?;
    let per_label = args.whole("values", 20, 1..=1000)? as usize;
    args.finish(&["from", "to", "filters", "values"])?;
    let labels = admit_and_query(state, range.clone(), LabelsQuery).await?;
    let mut text = format!("Labels, {}:", describe(&range));
    if labels.is_empty() {
        text.push_str(" none (no samples in this range with these filters).\n");
    } else {
        text.push('\n');
    }
    let mut structured = serde_json::Map::new();
    for (name, values) in &labels {
        let mut values: Vec<(&String, &u64)> = values.iter().collect();
        values.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let listed: Vec<String> = values
            .iter()
            .take(per_label)
            .map(|(value, samples)| format!("{value} ({samples})"))
            .collect();
        let more = match values.len().saturating_sub(per_label) {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        text.push_str(&format!(
            "  {name} ({} values): {}{more}\n",
            values.len(),
            listed.join(", ")
        ));
        let object: serde_json::Map<String, Value> = values
            .iter()
            .take(per_label)
            .map(|(value, samples)| ((*value).clone(), json!(samples)))
            .collect();
        structured.insert(name.clone(), Value::Object(object));
    }
    Ok(Answer {
        text,
        structured: json!({
            "range": range_json(&range),
            "labels": structured,
        }),
    })
}
