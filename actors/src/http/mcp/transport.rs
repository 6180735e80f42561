//! Streamable HTTP over actix: one JSON-RPC message per `POST /mcp`, its
//! answer as one JSON response, the protocol revision negotiated or read
//! from the request.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, DiscoverResult, EmptyResult, ErrorCode, ErrorData,
    Implementation, InitializeResult, ListToolsResult, ProtocolVersion, RequestId,
    ServerCapabilities, ServerJsonRpcMessage, ServerResult, ToolsCapability,
};
use serde_json::Value;

use super::super::AppState;
use super::super::auth::extract::Reader;
use super::super::body::{self, BodyLimit};
use super::super::error::ApiError;
use super::tools;

/// One JSON-RPC message: a tool call's arguments are small.
const MCP_BODY: BodyLimit = BodyLimit {
    what: "an MCP message",
    max_bytes: 1 << 20,
};

/// The header a client names its protocol revision in, after the
/// handshake (or on every request, from 2026-07-28 on).
const VERSION_HEADER: &str = "mcp-protocol-version";

/// The revision of the per-request envelope era.
const MODERN: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The handshake era's revisions, newest first: `initialize` answers the
/// one asked for when it is here, else the first.
const HANDSHAKE: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2024_11_05,
];

/// What a model is told about the server when it connects.
const INSTRUCTIONS: &str = "Kiln is a continuous profiler: these tools read the CPU and GPU \
    profiles of the caller's tenant. Times are RFC 3339, unix seconds, `now` or `now-<duration>` \
    (now-1h, now-7d); `filters` narrows to samples whose labels have the given values (the \
    `labels` tool lists them). Start with `top_functions` or `flamegraph` over a range; `diff` \
    tells what grew or shrank between two ranges or two label values, with significance.";

/// `POST /mcp`: one JSON-RPC message.
pub(crate) async fn post(
    Reader(scope): Reader,
    state: web::Data<AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let version = match request.headers().get(VERSION_HEADER) {
        None => None,
        Some(value) => match value.to_str().ok().and_then(known_version) {
            Some(version) => Some(version),
            None => {
                return Ok(refusal(
                    StatusCode::BAD_REQUEST,
                    ErrorData::new(
                        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                        format!(
                            "MCP-Protocol-Version {value:?} is not one this server speaks \
                             ({})",
                            supported().join(", ")
                        ),
                        Some(serde_json::json!({ "supported": supported() })),
                    ),
                ));
            }
        },
    };
    let sent = body::read(&request, payload, MCP_BODY).await?;
    let message: Value = match serde_json::from_slice(&sent) {
        Ok(message) => message,
        Err(e) => {
            return Ok(refusal(
                StatusCode::BAD_REQUEST,
                ErrorData::parse_error(format!("the body is not JSON: {e}"), None),
            ));
        }
    };
    let Some(fields) = message.as_object() else {
        return Ok(refusal(
            StatusCode::BAD_REQUEST,
            ErrorData::invalid_request(
                "expected one JSON-RPC message (an object); batches are not accepted",
                None,
            ),
        ));
    };
    // Notifications and responses (to requests this server never sends)
    // need no answer.
    if !fields.contains_key("method") || !fields.contains_key("id") {
        return Ok(HttpResponse::Accepted().finish());
    }
    let id: Option<RequestId> = fields
        .get("id")
        .and_then(|id| serde_json::from_value(id.clone()).ok());
    let parsed = serde_json::from_value::<ClientJsonRpcMessage>(message.clone())
        .ok()
        .and_then(ClientJsonRpcMessage::into_request);
    let Some((client_request, id)) = parsed else {
        let method = fields.get("method").and_then(Value::as_str).unwrap_or("?");
        return Ok(answer(ServerJsonRpcMessage::error(
            ErrorData::invalid_params(
                format!("the {method} request's params are not what the method takes"),
                None,
            ),
            id,
        )));
    };
    // The era of the request: 2026-07-28 stamps every request with its
    // version (discover included); the handshake era's requests carry the
    // negotiated one, or nothing.
    let modern = version.as_ref() == Some(&MODERN)
        || matches!(client_request, ClientRequest::DiscoverRequest(_));
    let result = match client_request {
        ClientRequest::InitializeRequest(initialize) => {
            let asked = initialize.params.protocol_version;
            let version = HANDSHAKE
                .iter()
                .find(|v| **v == asked)
                .unwrap_or(&HANDSHAKE[0])
                .clone();
            Ok(ServerResult::InitializeResult(
                server_config().with_protocol_version(version),
            ))
        }
        ClientRequest::DiscoverRequest(_) => Ok(ServerResult::DiscoverResult(
            DiscoverResult::from_server_info(vec![MODERN], server_config()),
        )),
        ClientRequest::PingRequest(_) => Ok(ServerResult::EmptyResult(EmptyResult {})),
        ClientRequest::ListToolsRequest(_) => Ok(ServerResult::ListToolsResult(
            ListToolsResult::with_all_items(tools::list()),
        )),
        ClientRequest::CallToolRequest(call) => {
            let arguments = call.params.arguments.unwrap_or_default();
            tools::call(&state, scope, &call.params.name, arguments)
                .await
                .map(ServerResult::CallToolResult)
        }
        other => Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "{}: Kiln's MCP server serves tools only (tools/list, tools/call)",
                other.method()
            ),
            None,
        )),
    };
    Ok(answer(match result {
        Ok(mut result) => {
            if modern {
                result.fill_missing_cache_hints();
            } else {
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
            }
            ServerJsonRpcMessage::response(result, id)
        }
        Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
    }))
}

/// `GET` and `DELETE /mcp`: no server-sent stream, no session to end.
pub(crate) async fn not_allowed(_: Reader) -> HttpResponse {
    HttpResponse::MethodNotAllowed()
        .insert_header(("Allow", "POST"))
        .json(serde_json::json!({
            "error": "this MCP server answers each POST with JSON; it offers no server-sent \
                      stream and keeps no session"
        }))
}

/// What the server says of itself in `initialize` and `server/discover`.
fn server_config() -> InitializeResult {
    let mut capabilities = ServerCapabilities::default();
    capabilities.tools = Some(ToolsCapability::default());
    InitializeResult::new(capabilities)
        .with_server_info(
            Implementation::new("kiln", env!("CARGO_PKG_VERSION")).with_title("Kiln profiler"),
        )
        .with_instructions(INSTRUCTIONS)
}

fn known_version(text: &str) -> Option<ProtocolVersion> {
    std::iter::once(&MODERN)
        .chain(HANDSHAKE.iter())
        .find(|v| v.as_str() == text)
        .cloned()
}

/// Every revision served, newest first.
fn supported() -> Vec<String> {
    std::iter::once(&MODERN)
        .chain(HANDSHAKE.iter())
        .map(|v| v.as_str().to_owned())
        .collect()
}

fn answer(message: ServerJsonRpcMessage) -> HttpResponse {
    HttpResponse::Ok().json(message)
}

/// A message refused before it could be read: an HTTP error with the
/// JSON-RPC error in the body.
fn refusal(status: StatusCode, error: ErrorData) -> HttpResponse {
    HttpResponse::build(status).json(ServerJsonRpcMessage::error(error, None))
}
