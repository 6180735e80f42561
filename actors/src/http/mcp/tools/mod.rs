//! The MCP tools: their names, input schemas and answers. Names are
//! stable (clients and prompts refer to them). Each tool reads its
//! arguments through [`Args`], which names the argument at fault, runs the
//! API's own query (admitted like any) and answers text with a
//! `structuredContent` twin.

mod args;
mod diff;
mod flamegraph;
mod gpu;
mod labels;
mod top;

use std::sync::Arc;

use kiln_storage::Scope;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorCode, ErrorData, JsonObject, Tool, ToolAnnotations,
};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::error::ApiError;
pub(crate) use args::Args;

/// Every tool, as `tools/list` gives them.
pub(crate) fn list() -> Vec<Tool> {
    [
        top::tool(),
        flamegraph::tool(),
        diff::tool(),
        gpu::tool(),
        labels::tool(),
    ]
    .into_iter()
    .collect()
}

/// Runs tool `name` with `arguments`: its result, a tool error for what
/// the caller can fix (bad arguments, a range refused, a limit reached),
/// a protocol error for an unknown tool or a failure of the server.
pub(crate) async fn call(
    state: &AppState,
    scope: Scope,
    name: &str,
    arguments: JsonObject,
) -> Result<CallToolResult, ErrorData> {
    let args = Args::new(arguments);
    let answer = match name {
        top::NAME => top::call(state, scope, args).await,
        flamegraph::NAME => flamegraph::call(state, scope, args).await,
        diff::NAME => diff::call(state, scope, args).await,
        gpu::NAME => gpu::call(state, scope, args).await,
        labels::NAME => labels::call(state, scope, args).await,
        _ => {
            return Err(ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "unknown tool {name:?}; the tools are {}",
                    list()
                        .iter()
                        .map(|t| t.name.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        }
    };
    match answer {
        Ok(answer) => Ok(answer.into_result()),
        Err(e @ (ApiError::Internal { .. } | ApiError::Unavailable(_))) => {
            tracing::warn!(tool = name, error = %e, "an MCP tool failed");
            Err(ErrorData::internal_error(e.to_string(), None))
        }
        Err(e) => {
            let mut result =
                CallToolResult::error(vec![ContentBlock::text(format!("{name}: {e}"))]);
            result.structured_content = None;
            Ok(result)
        }
    }
}

/// A tool's answer: text for the model, the same figures as JSON.
pub(crate) struct Answer {
    pub text: String,
    pub structured: Value,
}

impl Answer {
    fn into_result(self) -> CallToolResult {
        let mut result = CallToolResult::success(vec![ContentBlock::text(self.text)]);
        result.structured_content = Some(self.structured);
        result
    }
}

/// A tool: `name`, `description`, the properties of its input object
/// (which takes no others) with those `required`, and an output schema
/// whose `required` top-level fields are described by `output`.
fn tool(
    name: &'static str,
    title: &str,
    description: &'static str,
    properties: Value,
    required: &[&str],
    output: Value,
) -> Tool {
    let object = |properties: Value, required: Vec<&str>| -> Arc<JsonObject> {
        let required: Vec<Value> = required.into_iter().map(Value::from).collect();
        let schema = json!({
            "type": "object",
            "properties": properties,
            "required": required,
        });
        Arc::new(schema.as_object().cloned().unwrap_or_default())
    };
    let mut input = (*object(properties, required.to_vec())).clone();
    input.insert("additionalProperties".into(), Value::Bool(false));
    let output_required: Vec<&str> = output
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let output_schema = object(output.clone(), output_required);
    let mut annotations = ToolAnnotations::with_title(title);
    annotations.read_only_hint = Some(true);
    annotations.open_world_hint = Some(false);
    Tool::new(name, description, Arc::new(input))
        .with_title(title)
        .with_raw_output_schema(output_schema)
        .with_annotations(annotations)
}

/// The input properties every query tool takes: its range and filters.
fn range_properties() -> serde_json::Map<String, Value> {
    let mut properties = serde_json::Map::new();
    properties.insert("from".into(), args::from_schema());
    properties.insert("to".into(), args::to_schema());
    properties.insert("filters".into(), args::filters_schema());
    properties
}

/// [`range_properties`] with `more`.
fn range_properties_and(more: Value) -> Value {
    let mut properties = range_properties();
    if let Value::Object(more) = more {
        properties.extend(more);
    }
    Value::Object(properties)
}

/// A range as the answers' first lines say it: `FROM to TO {label=value, …}`.
fn describe(range: &crate::query::QueryRange) -> String {
    use super::super::compare::rfc3339;
    let mut text = format!("{} to {}", rfc3339(range.from_ns), rfc3339(range.to_ns));
    if !range.filters.is_empty() {
        let filters: Vec<String> = range
            .filters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        text.push_str(&format!(" {{{}}}", filters.join(", ")));
    }
    text
}

/// `part` of `whole` as a fraction (0 of nothing).
fn share(part: u64, whole: u64) -> f64 {
    match whole {
        0 => 0.0,
        whole => part as f64 / whole as f64,
    }
}

/// A range's figures in structured answers.
fn range_json(range: &crate::query::QueryRange) -> Value {
    use super::super::compare::rfc3339;
    json!({
        "from": rfc3339(range.from_ns),
        "to": rfc3339(range.to_ns),
        "filters": range.filters.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
    })
}

/// The output schema of [`range_json`].
fn range_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "from": {"type": "string"},
            "to": {"type": "string"},
            "filters": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    })
}
