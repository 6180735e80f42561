//! Query nodes that share scans: each partition scan belongs to one node
//! of the peer set by rendezvous hashing, so every node that answers
//! queries sends the scans of a partition to the same owner, whose
//! aggregators keep that partition's label sets cached.
//!
//! Every node is given the same peer list (its own advertised URL among
//! them) and so computes the same owners. A scan goes to its owner over
//! `POST /internal/v1/scan` ([`wire`](super::wire) bodies); when the owner
//! fails or times out, the node scans the partition itself — the store is
//! shared — so a query never fails because a peer died, and a peer that
//! failed is not asked again for [`PEER_RETRY_AFTER`].
//!
//! Symbol uploads to one node are told to the others
//! (`POST /internal/v1/symbols-stored`), and a gateway can tell the query
//! nodes of uploads it takes ([`QueryNodes`]), so that a node that just
//! found no symbols for a file does not keep showing addresses for the
//! seconds it remembers that.
//!
//! The internal endpoints trust the scope a scan names: the calling node
//! took it from its caller's credential. So they are open only to callers
//! that present the cluster's shared secret ([`CLUSTER_SECRET_HEADER`]);
//! an outside caller without it cannot read any tenant's data through
//! them. The secret travels in clear text: peers talk over a private
//! network (or through a TLS-terminating proxy).

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kiln_model::FileId;
use serde::{Deserialize, Serialize};

use super::aggregator::{Partial, Scan};
use super::rendezvous;
use super::wire::{self, WireError};

/// The header that carries the cluster secret between query nodes.
pub const CLUSTER_SECRET_HEADER: &str = "x-kiln-cluster-secret";
/// Content type of scan and partial bodies.
pub const SCAN_CONTENT_TYPE: &str = "application/vnd.kiln.scan";
/// How long scans of a peer that failed run locally without trying it.
pub const PEER_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Default time a peer has to answer a scan.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest cluster secret accepted.
const MIN_SECRET_LEN: usize = 16;

/// The secret query nodes present to each other's internal endpoints.
#[derive(Clone)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    /// A secret of at least 16 characters.
    pub fn new(secret: impl Into<String>) -> Result<ClusterSecret, PeerConfigError> {
        let secret = secret.into();
        if secret.len() < MIN_SECRET_LEN {
            return Err(PeerConfigError::ShortSecret);
        }
        Ok(ClusterSecret(secret))
    }

    /// Whether `presented` is the secret, compared in time that does not
    /// depend on where they differ.
    pub fn verify(&self, presented: &[u8]) -> bool {
        let ours = self.0.as_bytes();
        let differences = ours
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        differences == 0 && ours.len() == presented.len()
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

// Never print the secret, even in debug logs.
impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

/// How a query node joins its peers.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// Where this node serves its peers (the `/internal/` routes): a
    /// listener of its own, apart from the public API, so that it can be
    /// reachable on the cluster network only.
    pub listen: std::net::SocketAddr,
    /// This node's peer URL as its peers reach it (`http://host:port`,
    /// normally `listen`'s).
    pub advertise: String,
    /// Every query node's URL; this node's may be among them or not.
    pub peers: Vec<String>,
    /// What nodes present to each other.
    pub secret: ClusterSecret,
    /// How long a peer has to answer a scan before this node scans the
    /// partition itself.
    pub timeout: Duration,
}

impl PeerOptions {
    /// Checks the URLs, so that a typo is reported before anything starts.
    pub fn validate(&self) -> Result<(), PeerConfigError> {
        for url in std::iter::once(&self.advertise).chain(&self.peers) {
            normalize(url)?;
        }
        Ok(())
    }
}

/// Why a peer set could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PeerConfigError {
    /// A peer URL is not `http://host:port`.
    #[error(
        "peer URL {url:?} is not http://HOST:PORT (peers talk plain HTTP on the cluster network)"
    )]
    Url {
        /// The URL given.
        url: String,
    },
    /// The secret is too short to be one.
    #[error("the cluster secret must be at least {MIN_SECRET_LEN} characters")]
    ShortSecret,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for peers: {0}")]
    Client(#[source] reqwest::Error),
}

/// Why a peer did not answer a scan.
#[derive(Debug, thiserror::Error)]
pub(super) enum PeerError {
    /// No answer: connection refused, reset or timed out.
    #[error("no answer: {0}")]
    Request(#[from] reqwest::Error),
    /// The peer answered with an error.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status.
        status: u16,
        /// The start of its body.
        message: String,
    },
    /// The peer's answer is not a partial.
    #[error("unreadable answer: {0}")]
    Wire(#[from] WireError),
}

/// Who scans a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This node.
    Here,
    /// Another node, by index.
    Peer(usize),
    /// Another node that failed recently: this node scans instead.
    PeerDown(usize),
}

/// The symbol-upload notice peers send each other.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SymbolsNotice {
    /// Whose symbols; `None` for the global store.
    pub tenant: Option<String>,
    /// The file.
    pub file_id: FileId,
}

/// The peer set of a running node.
#[derive(Debug)]
pub(crate) struct Peers {
    /// Every node's URL, sorted, without a trailing slash.
    nodes: Vec<String>,
    /// This node's index in `nodes`.
    me: usize,
    secret: ClusterSecret,
    client: reqwest::Client,
    /// Per node, until when it is taken as down.
    down_until: Mutex<Vec<Option<Instant>>>,
}

impl Peers {
    pub(crate) fn new(options: PeerOptions) -> Result<Peers, PeerConfigError> {
        let me = normalize(&options.advertise)?;
        let mut nodes = options
            .peers
            .iter()
            .map(|url| normalize(url))
            .collect::<Result<Vec<_>, _>>()?;
        nodes.push(me.clone());
        nodes.sort();
        nodes.dedup();
        let me = nodes.iter().position(|n| *n == me).expect("added above");
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout.min(Duration::from_secs(2)))
            .build()
            .map_err(PeerConfigError::Client)?;
        Ok(Peers {
            down_until: Mutex::new(vec![None; nodes.len()]),
            nodes,
            me,
            secret: options.secret,
            client,
        })
    }

    /// Every node's URL, sorted (the order rendezvous hashing sees).
    pub(crate) fn nodes(&self) -> &[String] {
        &self.nodes
    }

    pub(crate) fn url(&self, node: usize) -> &str {
        &self.nodes[node]
    }

    /// Who scans the partition with rendezvous key `key`.
    pub(crate) fn owner(&self, key: &[u8]) -> Owner {
        let node = rendezvous::pick(key, &self.nodes).expect("the peer set holds this node");
        if node == self.me {
            return Owner::Here;
        }
        let down = self.down_until.lock().unwrap_or_else(|e| e.into_inner())[node];
        match down {
            Some(until) if Instant::now() < until => Owner::PeerDown(node),
            _ => Owner::Peer(node),
        }
    }

    /// Has `node` run `scan`; a failure marks it down for
    /// [`PEER_RETRY_AFTER`].
    pub(crate) async fn scan(&self, node: usize, scan: &Scan) -> Result<Partial, PeerError> {
        let result = self.try_scan(node, scan).await;
        if result.is_err() {
            self.down_until.lock().unwrap_or_else(|e| e.into_inner())[node] =
                Some(Instant::now() + PEER_RETRY_AFTER);
        }
        result
    }

    async fn try_scan(&self, node: usize, scan: &Scan) -> Result<Partial, PeerError> {
        let response = self
            .client
            .post(format!("{}/internal/v1/scan", self.nodes[node]))
            .header(CLUSTER_SECRET_HEADER, self.secret.as_str())
            .header(reqwest::header::CONTENT_TYPE, SCAN_CONTENT_TYPE)
            .body(wire::encode_scan(scan))
            .send()
            .await?;
        let status = response.status();
        let body = response.bytes().await?;
        if !status.is_success() {
            return Err(PeerError::Status {
                status: status.as_u16(),
                message: String::from_utf8_lossy(&body).chars().take(300).collect(),
            });
        }
        Ok(wire::decode_partial(&body)?)
    }

    /// What tells the other nodes of symbol uploads here.
    pub(crate) fn notifier(&self) -> SymbolNotifier {
        SymbolNotifier {
            targets: (self.nodes.iter().enumerate())
                .filter(|&(node, _)| node != self.me)
                .map(|(_, url)| url.clone())
                .collect(),
            secret: self.secret.clone(),
            client: self.client.clone(),
        }
    }
}

/// The query nodes a gateway tells of symbol uploads (`kiln gateway
/// --query-nodes`): agents upload where they send their batches.
#[derive(Debug, Clone)]
pub struct QueryNodes {
    /// Every query node's URL (`http://host:port`).
    pub urls: Vec<String>,
    /// What they accept on their internal endpoints.
    pub secret: ClusterSecret,
}

/// Tells query nodes that symbols of a file were stored, so that they
/// symbolize its frames again from their next query on.
#[derive(Debug, Clone)]
pub(crate) struct SymbolNotifier {
    targets: Vec<String>,
    secret: ClusterSecret,
    client: reqwest::Client,
}

impl SymbolNotifier {
    /// A notifier for `nodes`, once their URLs are `http://host:port`.
    pub(crate) fn new(nodes: QueryNodes) -> Result<SymbolNotifier, PeerConfigError> {
        let targets = nodes
            .urls
            .iter()
            .map(|url| normalize(url))
            .collect::<Result<Vec<_>, _>>()?;
        let client = reqwest::Client::builder()
            .timeout(DEFAULT_PEER_TIMEOUT)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(PeerConfigError::Client)?;
        Ok(SymbolNotifier {
            targets,
            secret: nodes.secret,
            client,
        })
    }

    /// Sends the notice to every target; resolves once each has answered
    /// or failed. A node that misses it (it is logged) forgets its "no
    /// symbols" memory of the file a few seconds later anyway.
    pub(crate) fn notify(&self, notice: &SymbolsNotice) -> impl Future<Output = ()> + 'static {
        let body = serde_json::to_vec(notice).expect("a notice serializes");
        let file_id = notice.file_id;
        let sends = self
            .targets
            .iter()
            .map(|url| {
                let request = self
                    .client
                    .post(format!("{url}/internal/v1/symbols-stored"))
                    .header(CLUSTER_SECRET_HEADER, self.secret.as_str())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
                let url = url.clone();
                async move {
                    match request.send().await.map(|r| r.status()) {
                        Ok(status) if status.is_success() => {}
                        Ok(status) => {
                            tracing::warn!(node = url, %file_id, %status, "a query node refused a symbols notice")
                        }
                        Err(e) => {
                            tracing::warn!(node = url, %file_id, error = %e, "a query node missed a symbols notice")
                        }
                    }
                }
            })
            .collect::<Vec<_>>();
        async move {
            futures_util::future::join_all(sends).await;
        }
    }
}

/// `url` without its trailing slash, once it is `http://host[:port]`.
fn normalize(url: &str) -> Result<String, PeerConfigError> {
    let url = url.trim().trim_end_matches('/');
    let host = url.strip_prefix("http://").unwrap_or_default();
    if host.is_empty() || host.contains('/') {
        return Err(PeerConfigError::Url {
            url: url.to_owned(),
        });
    }
    Ok(url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(advertise: &str, peers: &[&str]) -> PeerOptions {
        PeerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: advertise.into(),
            peers: peers.iter().map(|p| p.to_string()).collect(),
            secret: ClusterSecret::new("0123456789abcdef").unwrap(),
            timeout: DEFAULT_PEER_TIMEOUT,
        }
    }

    // Guards that every node, however its own URL and list are written,
    // sees the same node order, so they agree on every owner.
    #[test]
    fn nodes_agree_on_owners() {
        let a = Peers::new(options("http://a:1/", &["http://b:1", "http://c:1"])).unwrap();
        let b = Peers::new(options(
            "http://b:1",
            &["http://c:1/", "http://a:1", "http://b:1"],
        ))
        .unwrap();
        assert_eq!(a.nodes(), b.nodes());
        let mut owned_by_a = 0;
        for k in 0..300u32 {
            let key = k.to_le_bytes();
            match (a.owner(&key), b.owner(&key)) {
                (Owner::Here, Owner::Peer(n)) => {
                    assert_eq!(b.url(n), "http://a:1");
                    owned_by_a += 1;
                }
                (Owner::Peer(n), Owner::Here) => assert_eq!(a.url(n), "http://b:1"),
                (Owner::Peer(n), Owner::Peer(m)) => assert_eq!(a.url(n), b.url(m)),
                other => panic!("nodes disagree on key {k}: {other:?}"),
            }
        }
        assert!(owned_by_a > 50, "a owns {owned_by_a} of 300 keys");
    }

    #[test]
    fn bad_urls_and_short_secrets_are_refused() {
        for url in ["https://a:1", "a:1", "http://", "http://a:1/x"] {
            assert!(
                matches!(
                    Peers::new(options("http://me:1", &[url])),
                    Err(PeerConfigError::Url { .. })
                ),
                "{url}"
            );
        }
        assert!(matches!(
            ClusterSecret::new("short"),
            Err(PeerConfigError::ShortSecret)
        ));
    }

    #[test]
    fn secrets_verify_exactly() {
        let secret = ClusterSecret::new("0123456789abcdef").unwrap();
        assert!(secret.verify(b"0123456789abcdef"));
        assert!(!secret.verify(b"0123456789abcdeF"));
        assert!(!secret.verify(b"0123456789abcdef0"));
        assert!(!secret.verify(b"0123456789abcde"));
        assert!(!secret.verify(b""));
        assert_eq!(format!("{secret:?}"), "ClusterSecret(…)");
    }
}
