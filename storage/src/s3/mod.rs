//! The S3 object store: symbol files and other blobs in a bucket of AWS S3
//! or an S3-compatible server (MinIO, Garage), through `rust-s3`.
//!
//! Objects up to [`PART_SIZE`] go up in one signed `PUT`; larger ones as a
//! multipart upload of [`PART_SIZE`] parts, a few in flight at once (symbol
//! files of big binaries run to hundreds of MB, and one `PUT` of that size
//! is one long request that a network blip restarts from zero). Either way
//! the object appears whole when the upload completes, never in part, which
//! is the [`ObjectStore`] contract.

mod config;

use std::fmt;

use ::s3::Bucket;
use ::s3::error::S3Error;
use async_trait::async_trait;
use bytes::Bytes;

pub use config::{AddressingStyle, S3Config};

use crate::error::StoreError;
use crate::object::ObjectStore;
use crate::object_key::ObjectKey;

/// Size of one part of a multipart upload, and the size from which an
/// object is uploaded in parts: `rust-s3`'s chunk size (8 MiB; S3's
/// minimum part is 5 MiB, and 10 000 parts of 8 MiB allow objects up to
/// 78 GiB).
pub const PART_SIZE: usize = ::s3::bucket::CHUNK_SIZE;

/// An [`ObjectStore`] in an S3 bucket: the object `a/b/c` is the S3 object
/// with key `a/b/c`.
///
/// Build it with [`S3ObjectStore::from_url`] (`s3://bucket?endpoint=…`,
/// credentials from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`; see
/// [`S3Config`]). Errors name the bucket and the key, and carry the
/// server's status and message. Cloning is cheap and shares the HTTP
/// connection pool.
///
/// # Examples
///
/// ```no_run
/// use bytes::Bytes;
/// use kiln_storage::{ObjectKey, ObjectStore, S3ObjectStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kiln_storage::StoreError> {
/// // scripts/s3-test-server.sh start DIR prints such a URL and the keys.
/// let store = S3ObjectStore::from_url("s3://kiln-test?endpoint=http://127.0.0.1:3900&region=garage")?;
/// store.check().await?;
/// store.put(&ObjectKey::new("global/readme.txt")?, Bytes::from_static(b"hello")).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct S3ObjectStore {
    bucket: Box<Bucket>,
}

impl S3ObjectStore {
    /// The store that `url` names (see [`S3Config`] for its form), with
    /// credentials from the environment. Makes no request: call
    /// [`check`](Self::check) to find a wrong endpoint, bucket or key
    /// before the first write.
    pub fn from_url(url: &str) -> Result<S3ObjectStore, StoreError> {
        S3ObjectStore::new(S3Config::from_url(url)?)
    }

    /// The store of an already parsed configuration.
    pub fn new(config: S3Config) -> Result<S3ObjectStore, StoreError> {
        let region = config.client_region()?;
        let bucket = Bucket::new(&config.bucket, region, config.credentials.clone())
            .map_err(|e| request_error("configure the client for", &config.bucket, "", e))?;
        let bucket = match config.style {
            AddressingStyle::Path => bucket.with_path_style(),
            AddressingStyle::VirtualHost => bucket,
        };
        tracing::debug!(bucket = %config.bucket, url = %bucket.url(), "s3 object store");
        Ok(S3ObjectStore { bucket })
    }

    /// The bucket's name.
    pub fn bucket(&self) -> String {
        self.bucket.name()
    }

    /// The URL requests for the bucket go to: `http://endpoint/bucket` in
    /// path style, `https://bucket.endpoint` in virtual-host style.
    pub fn bucket_url(&self) -> String {
        self.bucket.url()
    }

    /// Lists at most one key, to find out early, with an error naming the
    /// problem, whether the endpoint answers, the credentials are accepted
    /// and the bucket exists.
    pub async fn check(&self) -> Result<(), StoreError> {
        let op = "list (as a connection check)";
        let (_, status) = self
            .bucket
            .list_page(String::new(), None, None, None, Some(1))
            .await
            .map_err(|e| self.error(op, "", e))?;
        ensure_success(status, Bytes::new()).map_err(|e| self.error(op, "", e))
    }

    fn error(&self, op: &'static str, key: &str, source: S3Error) -> StoreError {
        request_error(op, &self.bucket.name, key, source)
    }
}

#[async_trait]
impl ObjectStore for S3ObjectStore {
    async fn put(&self, key: &ObjectKey, bytes: Bytes) -> Result<(), StoreError> {
        let (op, key) = ("put", key.as_str());
        // `put_object_stream` sends one PUT below PART_SIZE and a multipart
        // upload above it, checks every part's status and aborts the upload
        // when one fails, so no parts are left behind to be billed.
        let response = self
            .bucket
            .put_object_stream(&mut bytes.as_ref(), key)
            .await
            .map_err(|e| self.error(op, key, e))?;
        ensure_success(response.status_code(), Bytes::new()).map_err(|e| self.error(op, key, e))?;
        tracing::debug!(bucket = %self.bucket.name, key, len = bytes.len(), "put object");
        Ok(())
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>, StoreError> {
        let (op, key) = ("get", key.as_str());
        let response = self
            .bucket
            .get_object(key)
            .await
            .map_err(|e| self.error(op, key, e))?;
        let status = response.status_code();
        let body = response.into_bytes();
        match status {
            // A 404 means "no such key", unless the bucket itself is
            // missing: that is a misconfiguration, not an absent object.
            404 if !names_missing_bucket(&body) => Ok(None),
            status => {
                ensure_success(status, body.clone()).map_err(|e| self.error(op, key, e))?;
                Ok(Some(body))
            }
        }
    }

    async fn exists(&self, key: &ObjectKey) -> Result<bool, StoreError> {
        let (op, key) = ("look up", key.as_str());
        let (_, status) = self
            .bucket
            .head_object(key)
            .await
            .map_err(|e| self.error(op, key, e))?;
        match status {
            404 => Ok(false),
            status => {
                ensure_success(status, Bytes::new()).map_err(|e| self.error(op, key, e))?;
                Ok(true)
            }
        }
    }

    async fn delete(&self, key: &ObjectKey) -> Result<(), StoreError> {
        let (op, key) = ("delete", key.as_str());
        let response = self
            .bucket
            .delete_object(key)
            .await
            .map_err(|e| self.error(op, key, e))?;
        match response.status_code() {
            // S3 answers 204 for a missing key too; some servers say 404.
            404 => Ok(()),
            status => {
                ensure_success(status, response.into_bytes()).map_err(|e| self.error(op, key, e))
            }
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>, StoreError> {
        let op = "list keys under";
        let mut keys = Vec::new();
        let mut continuation = None;
        loop {
            // No delimiter: every key under the prefix, at any depth.
            let (page, status) = self
                .bucket
                .list_page(prefix.to_owned(), None, continuation, None, None)
                .await
                .map_err(|e| self.error(op, prefix, e))?;
            ensure_success(status, Bytes::new()).map_err(|e| self.error(op, prefix, e))?;
            for object in page.contents {
                match ObjectKey::new(&object.key) {
                    Ok(key) => keys.push(key),
                    // Objects put there by other tools may have keys that
                    // are not valid ObjectKeys; they are not Kiln's.
                    Err(_) => {
                        tracing::warn!(bucket = %self.bucket.name, key = %object.key, "skipping an object whose key is not a valid object key");
                    }
                }
            }
            continuation = page.next_continuation_token;
            if continuation.is_none() {
                break;
            }
        }
        // S3 lists in UTF-8 byte order, which is `str` order already; sort
        // anyway, as not every compatible server keeps to it.
        keys.sort();
        Ok(keys)
    }
}

impl fmt::Debug for S3ObjectStore {
    /// Bucket and URL only: the client holds the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3ObjectStore")
            .field("bucket", &self.bucket.name)
            .field("url", &self.bucket.url())
            .finish_non_exhaustive()
    }
}

/// Whether an S3 error body is `NoSuchBucket`.
fn names_missing_bucket(body: &[u8]) -> bool {
    const CODE: &[u8] = b"<Code>NoSuchBucket</Code>";
    body.windows(CODE.len()).any(|w| w == CODE)
}

/// `Ok` for a 2xx status; else the client's error for an HTTP failure,
/// with the server's response body (its XML error names the cause, such as
/// `NoSuchBucket` or `AccessDenied`).
fn ensure_success(status: u16, body: Bytes) -> Result<(), S3Error> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    Err(S3Error::HttpFailWithBody(
        status,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

fn request_error(op: &'static str, bucket: &str, key: &str, source: S3Error) -> StoreError {
    StoreError::ObjectRequest {
        op,
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(url: &str) -> S3ObjectStore {
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("GK1".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
            _ => None,
        };
        S3ObjectStore::new(S3Config::from_url_and_env(url, env).unwrap()).unwrap()
    }

    /// The two addressing styles put the bucket in the path or in the host.
    #[test]
    fn addressing_styles_place_the_bucket() {
        let path = store("s3://kiln-test?endpoint=http://127.0.0.1:3900&region=garage");
        assert_eq!(path.bucket_url(), "http://127.0.0.1:3900/kiln-test");
        let virtual_host = store("s3://kiln-test?endpoint=http://s3.example:3900&style=virtual");
        assert_eq!(
            virtual_host.bucket_url(),
            "http://kiln-test.s3.example:3900"
        );
        let aws = store("s3://symbols?region=eu-west-1");
        assert_eq!(
            aws.bucket_url(),
            "https://symbols.s3-eu-west-1.amazonaws.com"
        );
        assert_eq!(aws.bucket(), "symbols");
    }

    #[test]
    fn debug_shows_no_secret() {
        let shown = format!("{:?}", store("s3://b?endpoint=http://h:1"));
        assert!(
            shown.contains("http://h:1/b") && !shown.contains("secret"),
            "{shown}"
        );
    }

    /// Errors name the operation, bucket and key, and keep the server's
    /// status and message as their source.
    #[test]
    fn errors_name_bucket_key_and_status() {
        let source =
            ensure_success(403, Bytes::from_static(b"<Code>AccessDenied</Code>")).unwrap_err();
        let err = request_error("get", "kiln-test", "global/x.ksym", source);
        assert_eq!(
            err.to_string(),
            "s3 could not get \"global/x.ksym\" in bucket \"kiln-test\""
        );
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(
            cause.contains("403") && cause.contains("AccessDenied"),
            "{cause}"
        );
        assert!(ensure_success(204, Bytes::new()).is_ok());
    }

    #[test]
    fn a_missing_bucket_is_told_from_a_missing_key() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code></Error>";
        assert!(names_missing_bucket(body));
        assert!(!names_missing_bucket(
            b"<Error><Code>NoSuchKey</Code></Error>"
        ));
        assert!(!names_missing_bucket(b""));
    }

    /// A server that cannot be reached fails the request with an error
    /// naming bucket and key, not a hang or a panic.
    #[tokio::test]
    async fn an_unreachable_server_is_an_error() {
        // Port 9 on loopback: nothing listens there (discard is not run).
        let store = store("s3://b?endpoint=http://127.0.0.1:9");
        let err = store
            .get(&ObjectKey::new("a/b").unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::ObjectRequest { op: "get", bucket, key, .. }
                if bucket == "b" && key == "a/b"),
            "{err:?}"
        );
        assert!(store.check().await.is_err());
    }
}
