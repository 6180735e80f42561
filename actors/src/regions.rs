//! Regions: each is a whole Kiln (bus, stores, gateways, workers, query
//! nodes), and a tenant's profiles, symbols and metrics live only in its
//! home region. [`Regions`] is this process's region and where the others
//! are; `http::region` forwards requests that belong elsewhere, and the
//! global symbols job pulls from the home region.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kiln_storage::{ApiKey, is_region_name};

/// How long a forwarded request may take, queries included (the home
/// region bounds its own queries).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(300);
/// How long connecting to another region may take before it counts as
/// unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a region set-up was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Not a region name.
    #[error(
        "{0:?} is not a region name: 1 to {max} lowercase letters, digits and inner dashes, \
         not \"admin\"",
        max = kiln_storage::MAX_REGION_LEN
    )]
    BadName(String),
    /// An https peer in a build whose HTTP client has no TLS.
    #[error(
        "peer region {0:?}: this build of Kiln has no TLS client; rebuild with the \
         `distributed` feature (cargo build --release -p kiln --features distributed)"
    )]
    NoTls(String),
    /// A `--peer-region` that is not `NAME=URL`.
    #[error("peer region {0:?}: expected NAME=http(s)://HOST[:PORT]")]
    BadPeer(String),
    /// A region named twice, or this region named as its own peer.
    #[error("region {0:?} is named twice")]
    Duplicate(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for other regions: {0}")]
    Client(String),
}

/// This process's region and where the others are.
#[derive(Debug, Clone)]
pub struct Regions {
    here: String,
    /// Region → its public base URL, without a trailing slash.
    peers: Arc<BTreeMap<String, String>>,
    client: reqwest::Client,
}

impl Regions {
    /// Region `here`, with `peers` given as `NAME=URL`.
    pub fn new(here: &str, peers: &[String]) -> Result<Regions, RegionError> {
        if !is_region_name(here) {
            return Err(RegionError::BadName(here.to_owned()));
        }
        let mut known = BTreeMap::new();
        for peer in peers {
            let (name, url) = peer
                .split_once('=')
                .ok_or_else(|| RegionError::BadPeer(peer.clone()))?;
            if !is_region_name(name) {
                return Err(RegionError::BadName(name.to_owned()));
            }
            let url = url.trim_end_matches('/');
            let has_host = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .is_some_and(|host| !host.is_empty() && !host.contains('/'));
            if !has_host {
                return Err(RegionError::BadPeer(peer.clone()));
            }
            if url.starts_with("https://") && !cfg!(feature = "distributed") {
                return Err(RegionError::NoTls(peer.clone()));
            }
            if name == here || known.insert(name.to_owned(), url.to_owned()).is_some() {
                return Err(RegionError::Duplicate(name.to_owned()));
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(FORWARD_TIMEOUT)
            // Bodies and answers pass through as sent, compressed or not.
            .no_proxy()
            .build()
            .map_err(|e| RegionError::Client(e.to_string()))?;
        Ok(Regions {
            here: here.to_owned(),
            peers: Arc::new(known),
            client,
        })
    }

    /// This process's region.
    pub fn here(&self) -> &str {
        &self.here
    }

    /// `key` as its owner is given it here: tagged with this region.
    pub fn key_for_owner(&self, key: &ApiKey) -> String {
        key.tagged(&self.here)
    }

    /// The public URL of region `region`, when this one knows it.
    pub fn url_of(&self, region: &str) -> Option<&str> {
        self.peers.get(region).map(String::as_str)
    }

    /// The other regions, each with its public URL, sorted by name.
    pub fn peers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.peers.iter().map(|(n, u)| (n.as_str(), u.as_str()))
    }

    /// The HTTP client for other regions.
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Every region's name, this one first: for errors.
    pub(crate) fn known(&self) -> String {
        let mut names: Vec<&str> = vec![&self.here];
        names.extend(self.peers.keys().map(String::as_str));
        names.join(", ")
    }
}

/// `eu (other regions: us at http://…)`.
impl std::fmt::Display for Regions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.here)?;
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|(name, url)| format!("{name} at {url}"))
            .collect();
        if !peers.is_empty() {
            write!(f, " (other regions: {})", peers.join(", "))?;
        }
        Ok(())
    }
}
