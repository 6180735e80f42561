//! The one client of a Kiln backend's symbol store (`HEAD` and `PUT
//! /api/v1/symbols/{file_id}`, or `…/global/{file_id}`): the agent sends
//! the ksym it extracted, `kiln symbols upload` an ELF or debug file, and
//! `kiln symbols crawl` distribution debug files to the global store.

use std::io::Read;
use std::time::Duration;

use kiln_model::FileId;

/// Whose symbols: the caller's tenant's, or every tenant's (the admin
/// token's; `kiln symbols crawl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolScope {
    /// The tenant of the API key.
    Tenant,
    /// The global store.
    Global,
}

/// What a body holds, as its `Content-Type` (and `Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolBody {
    /// An ELF executable or debug file; the backend extracts its symbols.
    Elf,
    /// The same, zstd-compressed (an agent's sparse image of a large
    /// file: its symbol sections, the rest zeros).
    ElfZstd,
    /// A zstd-compressed ksym file the sender extracted.
    KsymZstd,
}

/// Why a request to the symbol store failed.
#[derive(Debug, thiserror::Error)]
pub enum SymbolClientError {
    /// The request did not get an answer.
    #[error("asking {server}: {source}")]
    Http {
        /// The backend.
        server: String,
        /// Why.
        #[source]
        source: Box<ureq::Error>,
    },
    /// The backend refused the credential (401 or 403): every other
    /// request would be refused the same way.
    #[error("{server} answered {status}: {message}")]
    Refused {
        /// The backend.
        server: String,
        /// The status.
        status: u16,
        /// What it said, or what the caller sent.
        message: String,
    },
    /// Any other answer but success.
    #[error("{server} answered {status}: {body}")]
    Status {
        /// The backend.
        server: String,
        /// The status.
        status: u16,
        /// Its explanation.
        body: String,
    },
}

/// A backend's symbol store, and the credential every request carries.
#[derive(Debug, Clone)]
pub struct SymbolClient {
    agent: ureq::Agent,
    server: String,
    authorization: Option<String>,
}

impl SymbolClient {
    /// The symbol store of the backend at `server` (its base URL),
    /// presenting `bearer` (an API key, or the admin token for the global
    /// store). Uploads may take `timeout` (a large file on a slow link).
    pub fn new(server: &str, bearer: Option<&str>, timeout: Duration) -> SymbolClient {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(timeout))
            .build()
            .into();
        SymbolClient {
            agent,
            server: server.trim_end_matches('/').to_owned(),
            authorization: bearer.map(|b| format!("Bearer {b}")),
        }
    }

    /// The backend's URL, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn url(&self, scope: SymbolScope, file_id: FileId) -> String {
        match scope {
            SymbolScope::Tenant => format!("{}/api/v1/symbols/{file_id}", self.server),
            SymbolScope::Global => format!("{}/api/v1/symbols/global/{file_id}", self.server),
        }
    }

    fn http(&self, source: ureq::Error) -> SymbolClientError {
        SymbolClientError::Http {
            server: self.server.clone(),
            source: Box::new(source),
        }
    }

    /// Whether the store has symbols for `file_id`.
    pub fn has(&self, scope: SymbolScope, file_id: FileId) -> Result<bool, SymbolClientError> {
        let mut head = self.agent.head(self.url(scope, file_id));
        if let Some(authorization) = &self.authorization {
            head = head.header("authorization", authorization);
        }
        let response = head.call().map_err(|e| self.http(e))?;
        match response.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            // A HEAD answer has no body to say why.
            status @ (401 | 403) => Err(SymbolClientError::Refused {
                server: self.server.clone(),
                status,
                message: match self.authorization {
                    None => "no credential was sent".into(),
                    Some(_) => "the credential sent was refused".into(),
                },
            }),
            status => Err(SymbolClientError::Status {
                server: self.server.clone(),
                status,
                body: String::new(),
            }),
        }
    }

    /// Sends `body` as the symbols of `file_id`, its length told up front
    /// (so that the backend refuses one over its limit before reading
    /// it); the backend's answer (a JSON summary of what it stored).
    pub fn put(
        &self,
        scope: SymbolScope,
        file_id: FileId,
        kind: SymbolBody,
        body: &[u8],
    ) -> Result<String, SymbolClientError> {
        let request = self.put_request(scope, file_id, kind);
        self.answer(request.send(body))
    }

    /// [`put`](Self::put) from a reader, streamed as it is read (the CLI
    /// shows progress through it).
    pub fn put_reader(
        &self,
        scope: SymbolScope,
        file_id: FileId,
        kind: SymbolBody,
        body: &mut dyn Read,
    ) -> Result<String, SymbolClientError> {
        let request = self.put_request(scope, file_id, kind);
        self.answer(request.send(ureq::SendBody::from_reader(body)))
    }

    fn put_request(
        &self,
        scope: SymbolScope,
        file_id: FileId,
        kind: SymbolBody,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut put = self.agent.put(self.url(scope, file_id));
        put = match kind {
            SymbolBody::Elf => put.header("content-type", "application/octet-stream"),
            SymbolBody::ElfZstd => put
                .header("content-type", "application/octet-stream")
                .header("content-encoding", "zstd"),
            SymbolBody::KsymZstd => put
                .header("content-type", crate::ksym::MEDIA_TYPE)
                .header("content-encoding", "zstd"),
        };
        if let Some(authorization) = &self.authorization {
            put = put.header("authorization", authorization);
        }
        put
    }

    fn answer(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<String, SymbolClientError> {
        let mut response = sent.map_err(|e| self.http(e))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        match status {
            200 => Ok(text),
            401 | 403 => Err(SymbolClientError::Refused {
                server: self.server.clone(),
                status,
                message: text,
            }),
            _ => Err(SymbolClientError::Status {
                server: self.server.clone(),
                status,
                body: text,
            }),
        }
    }
}
