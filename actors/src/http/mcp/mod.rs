//! The MCP server at `/mcp` (`kiln up`, `kiln query`): Kiln's queries as
//! tools an assistant calls (top functions, hot paths, what changed, GPU
//! kernels, labels), over the Model Context Protocol's Streamable HTTP
//! transport.
//!
//! - `POST /mcp` takes one JSON-RPC message and answers a request with one
//!   JSON response (`application/json`; the transport's SSE streams are
//!   not needed for request and response, and are not offered); a
//!   notification or response is answered 202 with no body. `GET` and
//!   `DELETE /mcp` are 405, as the transport allows a server without
//!   server-sent streams or sessions.
//! - Protocol revisions ([`transport`]): the handshake era (`initialize`,
//!   2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25, the version a
//!   client asks for answered when known, else 2025-11-25) and 2026-07-28,
//!   the per-request envelope era (`server/discover`, each request
//!   stamped with its version). The server keeps no session: every
//!   request stands alone, as 2026-07-28 has it, and a handshake client's
//!   `initialize` only negotiates the version.
//! - Credentials and scope are every API route's: the tenant's key
//!   (`Authorization: Bearer kiln_…`) or the UI's session, with the read
//!   role; 401 without one (the middleware: `/mcp` is not public); every
//!   tool reads only the credential's tenant and project, and every query
//!   is admitted under the tenant's query limits.
//! - The tools ([`tools`]) are thin over the API's own queries and
//!   answers; each answers plain text a model reads well and the same
//!   figures as `structuredContent`. Bad arguments are a tool result with
//!   `isError: true` naming the argument, never an HTTP error.
//!
//! The protocol's types are `rmcp`'s (the official Rust SDK), its model
//! alone: its HTTP transport is built on another web framework, so the
//! envelope handling over actix is [`transport`]'s, a page of code.

mod tools;
mod transport;

pub(crate) use transport::{not_allowed, post};

/// The path the server answers on.
pub(crate) const PATH: &str = "/mcp";
