//! A [debuginfod] client: the debug file of a build id, from the servers a
//! user configured (elfutils' `DEBUGINFOD_URLS`, space separated).
//!
//! Only the two artifacts symbols can come from are asked for:
//! `GET <server>/buildid/<hex>/debuginfo` first, then `/executable` (an
//! unstripped executable has symbols too). What a server sends is checked
//! to be an ELF file carrying the build id asked for: a server is trusted
//! with availability, not with correctness.
//!
//! The client is blocking (`ureq`), with a timeout for each request; the
//! caller runs it off any event loop and bounds how many run at once.
//!
//! [debuginfod]: https://sourceware.org/elfutils/Debuginfod.html

use std::time::Duration;

use object::Object;

/// Largest artifact accepted: a hostile or broken server cannot exhaust
/// memory (glibc's debug file is about 10 MiB; Chromium's is 4 GiB and
/// would be refused).
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// Why a fetch failed, as opposed to finding nothing.
#[derive(Debug, thiserror::Error)]
pub enum DebuginfodError {
    /// No server had the build id, and at least one could not be asked.
    #[error("debuginfod server {url} failed")]
    Request {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    /// A server answered with a status other than 200 or 404.
    #[error("debuginfod server answered {status} for {url}")]
    Status { url: String, status: u16 },
    /// A server sent something other than an ELF file with the build id.
    #[error("debuginfod server sent {url} that is not an ELF file with build id {build_id}")]
    WrongContent { url: String, build_id: String },
}

/// Which artifact of a build id an answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// The separate debug file.
    Debuginfo,
    /// The executable or library itself.
    Executable,
}

impl Artifact {
    fn path(self) -> &'static str {
        match self {
            Artifact::Debuginfo => "debuginfo",
            Artifact::Executable => "executable",
        }
    }
}

/// A file fetched for a build id.
#[derive(Debug)]
pub struct Fetched {
    /// The ELF bytes.
    pub data: Vec<u8>,
    /// Which artifact they are.
    pub artifact: Artifact,
    /// The URL they came from.
    pub url: String,
}

/// Configured debuginfod servers.
#[derive(Debug, Clone)]
pub struct Debuginfod {
    servers: Vec<String>,
    agent: ureq::Agent,
}

impl Debuginfod {
    /// A client of `servers` (base URLs), each request limited to
    /// `timeout`; `None` when no server is given.
    pub fn new(servers: Vec<String>, timeout: Duration) -> Option<Debuginfod> {
        let servers: Vec<String> = servers
            .iter()
            .map(|s| s.trim().trim_end_matches('/').to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if servers.is_empty() {
            return None;
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .user_agent(concat!("kiln/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Some(Debuginfod { servers, agent })
    }

    /// Server URLs from a `DEBUGINFOD_URLS`-style list: separated by
    /// spaces (elfutils' syntax), empty entries ignored.
    pub fn parse_urls(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    /// The servers asked, in order.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The debug file of `build_id`, else its executable, from the first
    /// server that has it; `Ok(None)` when every server answered that it
    /// has neither.
    pub fn fetch(&self, build_id: &[u8]) -> Result<Option<Fetched>, DebuginfodError> {
        let hex = hex(build_id);
        let mut failure = None;
        for artifact in [Artifact::Debuginfo, Artifact::Executable] {
            for server in &self.servers {
                let url = format!("{server}/buildid/{hex}/{}", artifact.path());
                match self.get(&url) {
                    Ok(Some(data)) if build_id_of(&data).as_deref() == Some(build_id) => {
                        return Ok(Some(Fetched {
                            data,
                            artifact,
                            url,
                        }));
                    }
                    Ok(Some(_)) => {
                        failure = Some(DebuginfodError::WrongContent {
                            url,
                            build_id: hex.clone(),
                        });
                    }
                    Ok(None) => {}
                    Err(e) => failure = Some(e),
                }
            }
        }
        failure.map_or(Ok(None), Err)
    }

    /// The body of `url`, or `None` on 404.
    fn get(&self, url: &str) -> Result<Option<Vec<u8>>, DebuginfodError> {
        let request = |source| DebuginfodError::Request {
            url: url.to_owned(),
            source: Box::new(source),
        };
        let mut response = self.agent.get(url).call().map_err(request)?;
        match response.status().as_u16() {
            200 => response
                .body_mut()
                .with_config()
                .limit(MAX_ARTIFACT_BYTES)
                .read_to_vec()
                .map(Some)
                .map_err(request),
            404 => Ok(None),
            status => Err(DebuginfodError::Status {
                url: url.to_owned(),
                status,
            }),
        }
    }
}

/// Lower-case hex, as debuginfod URLs spell build ids.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn build_id_of(data: &[u8]) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_space_separated_like_elfutils() {
        assert_eq!(
            Debuginfod::parse_urls(" http://a:8002  https://b/ \n"),
            ["http://a:8002", "https://b/"]
        );
        assert!(Debuginfod::parse_urls("  ").is_empty());
    }

    #[test]
    fn no_servers_means_no_client_and_slashes_are_trimmed() {
        assert!(Debuginfod::new(vec![], Duration::from_secs(1)).is_none());
        let client = Debuginfod::new(vec!["http://a/".into()], Duration::from_secs(1)).unwrap();
        assert_eq!(client.servers(), ["http://a"]);
    }

    /// Guards that an unreachable server is an error, not "not found" (a
    /// caller would otherwise cache an outage as a missing file for long).
    #[test]
    fn unreachable_server_is_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Debuginfod::new(
            vec![format!("http://127.0.0.1:{port}")],
            Duration::from_secs(2),
        )
        .unwrap();
        assert!(matches!(
            client.fetch(&[0xab; 20]),
            Err(DebuginfodError::Request { .. })
        ));
    }
}
