//! From URLs to backends: the one place that turns `--bus`, `--store` and
//! `--objects` into the engines behind Kiln's seams.
//!
//! | flag | URL | engine |
//! |---|---|---|
//! | `--bus` | `kafka://HOST:PORT[,…][/TOPIC][?partitions=N]` | [`KafkaBus`](kiln_ingest_bus::KafkaBus) |
//! | `--bus` | `file:///DIR` | [`EmbeddedBus`](kiln_ingest_bus::EmbeddedBus) (one process) |
//! | `--store` | `postgres://USER@HOST:PORT/DB` | [`PostgresProfileStore`] |
//! | `--store` | `scylla://HOST:PORT[,…]/KEYSPACE[?…]` | [`ScyllaProfileStore`] |
//! | `--store` | `file:///DIR` | [`EmbeddedProfileStore`] (one process) |
//! | `--objects` | `s3://BUCKET?endpoint=URL[&region=…]` | [`S3ObjectStore`] |
//! | `--objects` | `file:///DIR` | [`LocalObjectStore`] (shared by processes on one machine) |
//! | `--metadata` | `postgres://USER@HOST:PORT/DB` | [`PostgresMetadataStore`] (tenants, keys, limits) |
//! | `--metadata` | `file:///PATH/metadata.json` | [`EmbeddedMetadataStore`] (one process) |
//!
//! The embedded bus and store lock their directory, so they serve one
//! process; several processes need Kafka and PostgreSQL (or ScyllaDB).
//!
//! The distributed engines' clients are built with the `distributed`
//! feature (the `kiln` binary's default). Without it their URLs still
//! parse, and opening one fails with [`BackendError::NotBuilt`].

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

pub use kiln_ingest_bus::BusUrl;
use kiln_ingest_bus::{Bus, BusError};
use kiln_storage::{
    EmbeddedMetadataStore, EmbeddedProfileStore, LocalObjectStore, MetadataStore, ObjectStore,
    ProfileStore, StoreError,
};
#[cfg(feature = "distributed")]
use kiln_storage::{
    PostgresMetadataStore, PostgresProfileStore, S3ObjectStore, ScyllaProfileStore,
};

/// Partitions of an embedded bus created through a `file://` URL.
const EMBEDDED_BUS_PARTITIONS: u32 = 4;

/// Why a backend could not be named or opened.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A URL that names no backend Kiln has, or is malformed.
    #[error("bad {flag} URL {url:?}: {reason}")]
    BadUrl {
        /// The flag it was given to (`--store`, `--objects`).
        flag: &'static str,
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A distributed engine's URL in a build without its client.
    #[error(
        "cannot open {url}: this build of Kiln has no {engine} client; rebuild with the \
         `distributed` feature (cargo build --release -p kiln --features distributed)"
    )]
    NotBuilt {
        /// The URL, without credentials.
        url: String,
        /// "PostgreSQL", "ScyllaDB", "S3".
        engine: &'static str,
    },
    /// The bus could not be opened.
    #[error("cannot open the ingest bus {url}: {source}")]
    Bus {
        /// The bus URL.
        url: String,
        /// Why.
        #[source]
        source: BusError,
    },
    /// A store could not be opened.
    #[error("cannot open {what} {url}: {source}")]
    Store {
        /// "the profile store" or "the object store".
        what: &'static str,
        /// The URL, without credentials.
        url: String,
        /// Why.
        #[source]
        source: StoreError,
    },
}

/// A profile store, named by URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `postgres://…`: PostgreSQL, the whole URL handed to the driver.
    Postgres(String),
    /// `scylla://…`: ScyllaDB (or Cassandra), the whole URL handed to
    /// [`ScyllaProfileStore::connect`].
    Scylla(String),
    /// `file:///DIR`: the embedded store in a directory.
    Embedded(PathBuf),
}

/// An object store, named by URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectsUrl {
    /// `s3://BUCKET?…`: an S3 bucket, the whole URL handed to
    /// [`S3ObjectStore::from_url`].
    S3(String),
    /// `file:///DIR`: files under a local directory.
    Local(PathBuf),
}

/// A metadata store (tenants, keys, limits), named by URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetadataUrl {
    /// `postgres://…`: PostgreSQL (its schema is the profile store's:
    /// `kiln store migrate` makes both).
    Postgres(String),
    /// `file:///PATH`: the embedded store's JSON document.
    Embedded(PathBuf),
}

impl FromStr for MetadataUrl {
    type Err = BackendError;

    fn from_str(url: &str) -> Result<MetadataUrl, BackendError> {
        match url.split_once("://") {
            Some(("postgres" | "postgresql", _)) => Ok(MetadataUrl::Postgres(url.to_owned())),
            Some(("file", rest)) => file_dir("--metadata", url, rest).map(MetadataUrl::Embedded),
            _ => Err(BackendError::BadUrl {
                flag: "--metadata",
                url: url.to_owned(),
                reason: "expected postgres://USER@HOST:PORT/DB or file:///PATH/metadata.json"
                    .into(),
            }),
        }
    }
}

impl MetadataUrl {
    /// Connects to (opens) the metadata store.
    pub async fn open(&self) -> Result<Arc<dyn MetadataStore>, BackendError> {
        let error = |source| BackendError::Store {
            what: "the metadata store",
            url: self.to_string(),
            source,
        };
        Ok(match self {
            #[cfg(feature = "distributed")]
            MetadataUrl::Postgres(url) => {
                Arc::new(PostgresMetadataStore::connect(url).await.map_err(error)?)
            }
            #[cfg(not(feature = "distributed"))]
            MetadataUrl::Postgres(_) => return Err(not_built(self, "PostgreSQL")),
            MetadataUrl::Embedded(path) => {
                Arc::new(EmbeddedMetadataStore::open(path).map_err(error)?)
            }
        })
    }
}

impl std::fmt::Display for MetadataUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetadataUrl::Postgres(url) => f.write_str(&without_password(url)),
            MetadataUrl::Embedded(path) => write!(f, "file://{}", path.display()),
        }
    }
}

/// The directory of a `file:///DIR` URL.
fn file_dir(flag: &'static str, url: &str, rest: &str) -> Result<PathBuf, BackendError> {
    if rest.len() < 2 || !rest.starts_with('/') {
        return Err(BackendError::BadUrl {
            flag,
            url: url.to_owned(),
            reason: "a file URL needs an absolute directory: file:///DIR".into(),
        });
    }
    Ok(PathBuf::from(rest))
}

impl FromStr for StoreUrl {
    type Err = BackendError;

    fn from_str(url: &str) -> Result<StoreUrl, BackendError> {
        match url.split_once("://") {
            Some(("postgres" | "postgresql", _)) => Ok(StoreUrl::Postgres(url.to_owned())),
            Some(("file", rest)) => file_dir("--store", url, rest).map(StoreUrl::Embedded),
            Some(("scylla", _)) => Ok(StoreUrl::Scylla(url.to_owned())),
            _ => Err(BackendError::BadUrl {
                flag: "--store",
                url: url.to_owned(),
                reason: "expected postgres://USER@HOST:PORT/DB, scylla://HOST:PORT/KEYSPACE or file:///DIR"
                    .into(),
            }),
        }
    }
}

impl FromStr for ObjectsUrl {
    type Err = BackendError;

    fn from_str(url: &str) -> Result<ObjectsUrl, BackendError> {
        match url.split_once("://") {
            Some(("s3", _)) => Ok(ObjectsUrl::S3(url.to_owned())),
            Some(("file", rest)) => file_dir("--objects", url, rest).map(ObjectsUrl::Local),
            _ => Err(BackendError::BadUrl {
                flag: "--objects",
                url: url.to_owned(),
                reason: "expected s3://BUCKET?endpoint=URL or file:///DIR".into(),
            }),
        }
    }
}

/// Parses a `--bus` URL ([`BusUrl`]), naming the flag in the error.
pub fn parse_bus(url: &str) -> Result<BusUrl, BackendError> {
    url.parse().map_err(|e| match e {
        BusError::BadUrl { url, reason } => BackendError::BadUrl {
            flag: "--bus",
            url,
            reason,
        },
        source => BackendError::Bus {
            url: url.to_owned(),
            source,
        },
    })
}

/// Opens (connects to) the bus.
pub async fn open_bus(url: &BusUrl) -> Result<Arc<dyn Bus>, BackendError> {
    url.open(EMBEDDED_BUS_PARTITIONS)
        .await
        .map_err(|source| BackendError::Bus {
            url: url.to_string(),
            source,
        })
}

impl StoreUrl {
    /// Connects to (opens) the profile store. PostgreSQL's schema must
    /// exist ([`StoreUrl::migrate`]).
    pub async fn open(&self) -> Result<Arc<dyn ProfileStore>, BackendError> {
        let store: Arc<dyn ProfileStore> = match self {
            #[cfg(feature = "distributed")]
            StoreUrl::Postgres(url) => Arc::new(
                PostgresProfileStore::connect(url)
                    .await
                    .map_err(|e| self.error(e))?,
            ),
            #[cfg(feature = "distributed")]
            StoreUrl::Scylla(url) => Arc::new(
                ScyllaProfileStore::connect(url)
                    .await
                    .map_err(|e| self.error(e))?,
            ),
            #[cfg(not(feature = "distributed"))]
            StoreUrl::Postgres(_) | StoreUrl::Scylla(_) => return Err(self.not_built()),
            StoreUrl::Embedded(dir) => {
                Arc::new(EmbeddedProfileStore::open(dir).map_err(|e| self.error(e))?)
            }
        };
        Ok(store)
    }

    /// Creates or upgrades the store's schema (`kiln store migrate`); the
    /// embedded store needs none.
    pub async fn migrate(&self) -> Result<(), BackendError> {
        match self {
            #[cfg(feature = "distributed")]
            StoreUrl::Postgres(url) => {
                let store = PostgresProfileStore::connect(url)
                    .await
                    .map_err(|e| self.error(e))?;
                store.migrate().await.map_err(|e| self.error(e))
            }
            #[cfg(feature = "distributed")]
            StoreUrl::Scylla(url) => ScyllaProfileStore::migrate(url)
                .await
                .map_err(|e| self.error(e)),
            #[cfg(not(feature = "distributed"))]
            StoreUrl::Postgres(_) | StoreUrl::Scylla(_) => Err(self.not_built()),
            StoreUrl::Embedded(_) => Ok(()),
        }
    }

    fn error(&self, source: StoreError) -> BackendError {
        BackendError::Store {
            what: "the profile store",
            url: self.to_string(),
            source,
        }
    }

    #[cfg(not(feature = "distributed"))]
    fn not_built(&self) -> BackendError {
        let engine = match self {
            StoreUrl::Scylla(_) => "ScyllaDB",
            _ => "PostgreSQL",
        };
        not_built(self, engine)
    }
}

impl ObjectsUrl {
    /// Opens the object store.
    pub fn open(&self) -> Result<Arc<dyn ObjectStore>, BackendError> {
        let error = |source| BackendError::Store {
            what: "the object store",
            url: self.to_string(),
            source,
        };
        Ok(match self {
            #[cfg(feature = "distributed")]
            ObjectsUrl::S3(url) => Arc::new(S3ObjectStore::from_url(url).map_err(error)?),
            #[cfg(not(feature = "distributed"))]
            ObjectsUrl::S3(_) => return Err(not_built(self, "S3")),
            ObjectsUrl::Local(dir) => Arc::new(LocalObjectStore::open(dir).map_err(error)?),
        })
    }
}

/// The error for a distributed engine's URL in a build without it.
#[cfg(not(feature = "distributed"))]
fn not_built(url: &impl std::fmt::Display, engine: &'static str) -> BackendError {
    BackendError::NotBuilt {
        url: url.to_string(),
        engine,
    }
}

/// Prints the URL without a password, for logs and errors.
impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Postgres(url) | StoreUrl::Scylla(url) => f.write_str(&without_password(url)),
            StoreUrl::Embedded(dir) => write!(f, "file://{}", dir.display()),
        }
    }
}

impl std::fmt::Display for ObjectsUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectsUrl::S3(url) => f.write_str(url),
            ObjectsUrl::Local(dir) => write!(f, "file://{}", dir.display()),
        }
    }
}

/// `scheme://user:secret@host…` → `scheme://user:***@host…`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason<T: FromStr<Err = BackendError> + std::fmt::Debug>(url: &str) -> String {
        match url.parse::<T>() {
            Err(e) => e.to_string(),
            Ok(v) => panic!("{url}: parsed as {v:?}"),
        }
    }

    #[test]
    fn store_urls() {
        assert_eq!(
            "postgres://kiln@db:5432/kiln".parse::<StoreUrl>().unwrap(),
            StoreUrl::Postgres("postgres://kiln@db:5432/kiln".into())
        );
        assert_eq!(
            "file:///var/kiln".parse::<StoreUrl>().unwrap(),
            StoreUrl::Embedded("/var/kiln".into())
        );
        assert_eq!(
            "scylla://10.0.0.1:9042/kiln".parse::<StoreUrl>().unwrap(),
            StoreUrl::Scylla("scylla://10.0.0.1:9042/kiln".into())
        );
        assert!(reason::<StoreUrl>("mysql://h/db").contains("expected postgres://"));
        assert!(reason::<StoreUrl>("file://x").contains("absolute directory"));
        assert!(reason::<StoreUrl>("/var/kiln").contains("bad --store URL"));
    }

    #[test]
    fn objects_urls() {
        assert_eq!(
            "s3://b?endpoint=http://h:1".parse::<ObjectsUrl>().unwrap(),
            ObjectsUrl::S3("s3://b?endpoint=http://h:1".into())
        );
        assert_eq!(
            "file:///o".parse::<ObjectsUrl>().unwrap(),
            ObjectsUrl::Local("/o".into())
        );
        assert!(reason::<ObjectsUrl>("gs://b").contains("expected s3://"));
    }

    #[test]
    fn metadata_urls() {
        assert_eq!(
            "file:///var/kiln/metadata.json"
                .parse::<MetadataUrl>()
                .unwrap(),
            MetadataUrl::Embedded("/var/kiln/metadata.json".into())
        );
        let url: MetadataUrl = "postgres://kiln:pw@db/kiln".parse().unwrap();
        assert_eq!(url.to_string(), "postgres://kiln:***@db/kiln");
        assert!(reason::<MetadataUrl>("scylla://h/k").contains("bad --metadata URL"));
    }

    #[test]
    fn bus_urls_name_the_flag() {
        let e = parse_bus("nats://h:1").unwrap_err().to_string();
        assert!(e.starts_with("bad --bus URL \"nats://h:1\""), "{e}");
        assert!(parse_bus("kafka://h:9092").is_ok());
    }

    /// Without the `distributed` feature (`cargo test -p kiln-actors`
    /// alone, as the lint tier runs it) the URLs parse and opening one
    /// names the missing client and how to build it.
    #[cfg(not(feature = "distributed"))]
    #[actix_rt::test]
    async fn a_build_without_distributed_engines_says_so() {
        let store: StoreUrl = "scylla://kiln:pw@h:9042/k".parse().unwrap();
        let e = store.open().await.err().unwrap().to_string();
        assert!(e.contains("no ScyllaDB client"), "{e}");
        assert!(e.contains("--features distributed"), "{e}");
        assert!(!e.contains("pw"), "{e}");
        let objects: ObjectsUrl = "s3://b?endpoint=http://h:1".parse().unwrap();
        let e = objects.open().err().unwrap().to_string();
        assert!(e.contains("no S3 client"), "{e}");
        let metadata: MetadataUrl = "postgres://kiln@db/kiln".parse().unwrap();
        let e = metadata.open().await.err().unwrap().to_string();
        assert!(e.contains("no PostgreSQL client"), "{e}");
        let bus = parse_bus("kafka://h:9092").unwrap();
        let e = open_bus(&bus).await.err().unwrap().to_string();
        assert!(e.contains("no Kafka client"), "{e}");
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        let url: StoreUrl = "postgres://kiln:s3cret@db:5432/kiln".parse().unwrap();
        assert_eq!(url.to_string(), "postgres://kiln:***@db:5432/kiln");
        assert_eq!(
            without_password("postgres://kiln@db/k"),
            "postgres://kiln@db/k"
        );
    }
}
