//! The bus envelope with a validated [`Scope`]: what the gateway publishes
//! for each accepted batch, under a MAC keyed with the [`BusKey`] that
//! gateways and workers share. The byte format is
//! [`kiln_model::Envelope`]'s; see there.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use kiln_model::Envelope;
use kiln_storage::Scope;

pub use kiln_model::EnvelopeError;

/// Shortest bus key accepted, in characters: a short one could be guessed
/// (the admin token's rule).
pub const MIN_BUS_KEY_LEN: usize = 16;
/// What a generated bus key starts with, so that a leaked one is easy to
/// grep for.
const BUS_KEY_PREFIX: &str = "kiln_bus_";
/// Random bytes in a generated bus key.
const BUS_KEY_SECRET_BYTES: usize = 32;

/// The key gateways sign bus records with and workers verify them with
/// (`--bus-key`, `KILN_BUS_KEY`; `kiln up` keeps one in its data
/// directory). A worker stores only records a holder of the key
/// published, so the tenant a record names is the one a gateway
/// authenticated. Its `Debug` form hides it, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct BusKey(Arc<str>);

/// Why a bus key could not be used or made.
#[derive(Debug, thiserror::Error)]
pub enum BusKeyError {
    /// The key is too short or holds whitespace or control characters.
    #[error(
        "a bus key must be at least {MIN_BUS_KEY_LEN} characters, without spaces or control characters"
    )]
    Invalid,
    /// The operating system gave no random bytes.
    #[error("cannot draw random bytes for a bus key: {0}")]
    Random(String),
    /// The key file could not be read or written.
    #[error("bus key file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl fmt::Debug for BusKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BusKey(…)")
    }
}

impl BusKey {
    /// A key given by the operator: the same on every gateway and worker of
    /// a deployment.
    pub fn new(key: &str) -> Result<Self, BusKeyError> {
        let valid = key.chars().count() >= MIN_BUS_KEY_LEN
            && !key.chars().any(|c| c.is_whitespace() || c.is_control());
        match valid {
            true => Ok(BusKey(key.into())),
            false => Err(BusKeyError::Invalid),
        }
    }

    /// A fresh random key: `kiln_bus_` and 256 random bits in hex.
    pub fn generate() -> Result<Self, BusKeyError> {
        let mut secret = [0u8; BUS_KEY_SECRET_BYTES];
        getrandom::fill(&mut secret).map_err(|e| BusKeyError::Random(e.to_string()))?;
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        Ok(BusKey(format!("{BUS_KEY_PREFIX}{hex}").into()))
    }

    /// The key kept in `path`, or a new one written there (readable by its
    /// owner only) when there is none: what `kiln up` does, so that its
    /// gateway and worker, and the next start, agree.
    pub fn load_or_create(path: &Path) -> Result<Self, BusKeyError> {
        let file_error = |source| BusKeyError::File {
            path: path.display().to_string(),
            source,
        };
        match load_or_create_secret_file(path, || Ok(Self::generate()?.0.to_string())) {
            Ok(text) => Self::new(&text),
            Err(SecretFileError::Io(e)) => Err(file_error(e)),
            Err(SecretFileError::Make(e)) => Err(e),
        }
    }

    /// The key itself, to hand to the other processes of a deployment.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Why [`load_or_create_secret_file`] failed.
#[derive(Debug)]
pub(crate) enum SecretFileError<E> {
    /// Reading or writing the file.
    Io(std::io::Error),
    /// Making the secret.
    Make(E),
}

/// The secret kept in `path` (trimmed), or a new one from `make` written
/// there first, in a file created readable and writable by its owner only
/// (`0600`) and synced. For every secret a process keeps in its data
/// directory (the bus key here; the admin token could use it too).
pub(crate) fn load_or_create_secret_file<E>(
    path: &Path,
    make: impl FnOnce() -> Result<String, E>,
) -> Result<String, SecretFileError<E>> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::read_to_string(path) {
        Ok(text) => return Ok(text.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(SecretFileError::Io(e)),
    }
    let secret = make().map_err(SecretFileError::Make)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(SecretFileError::Io)?;
    writeln!(file, "{secret}").map_err(SecretFileError::Io)?;
    file.sync_all().map_err(SecretFileError::Io)?;
    Ok(secret)
}

/// Who a batch belongs to and when it arrived: the envelope's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeHeader {
    /// Whose batch this is.
    pub scope: Scope,
    /// When the gateway accepted it.
    pub received_at_ns: i64,
}

impl EnvelopeHeader {
    /// The bus key: tenant and host, so that one host's batches stay in one
    /// partition (and one worker's dictionary cache).
    pub fn bus_key(&self, source: &str) -> Vec<u8> {
        let tenant = self.scope.tenant();
        let mut key = Vec::with_capacity(tenant.len() + source.len() + 1);
        key.extend_from_slice(tenant.as_bytes());
        key.push(0);
        key.extend_from_slice(source.as_bytes());
        key
    }

    /// The envelope's bytes around `batch` (an encoded
    /// [`kiln_model::Batch`]), signed with `key`.
    pub fn wrap(&self, batch: &[u8], key: &BusKey) -> Vec<u8> {
        Envelope::new(
            self.scope.tenant(),
            self.scope.project(),
            self.received_at_ns,
            batch,
        )
        .expect("a Scope's names pass the envelope's check: it is the same rule")
        .encode(key.bytes())
    }

    /// Splits envelope bytes into the header and the batch bytes, once
    /// their MAC verifies under `key`.
    pub fn parse<'a>(
        bytes: &'a [u8],
        key: &BusKey,
    ) -> Result<(EnvelopeHeader, &'a [u8]), EnvelopeError> {
        let envelope = Envelope::parse(bytes, key.bytes())?;
        let header = EnvelopeHeader {
            scope: Scope::new(envelope.tenant(), envelope.project())
                .expect("checked names make a Scope: it is the same rule"),
            received_at_ns: envelope.received_at_ns(),
        };
        Ok((header, envelope.batch()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> EnvelopeHeader {
        EnvelopeHeader {
            scope: Scope::new("acme", "web").unwrap(),
            received_at_ns: -5,
        }
    }

    fn key() -> BusKey {
        BusKey::new("0123456789abcdef").unwrap()
    }

    #[test]
    fn round_trip() {
        let bytes = header().wrap(&[1, 2, 3], &key());
        let (h, batch) = EnvelopeHeader::parse(&bytes, &key()).unwrap();
        assert_eq!(h, header());
        assert_eq!(batch, [1, 2, 3]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = header().wrap(&[], &key());
        for n in 0..bytes.len() {
            assert!(
                EnvelopeHeader::parse(&bytes[..n], &key()).is_err(),
                "prefix of {n} bytes"
            );
        }
    }

    #[test]
    fn another_key_does_not_verify() {
        let bytes = header().wrap(b"batch", &key());
        let other = BusKey::generate().unwrap();
        let err = EnvelopeHeader::parse(&bytes, &other).unwrap_err();
        assert_eq!(err, EnvelopeError::BadMac);
    }

    #[test]
    fn keys_put_the_tenant_first() {
        assert_eq!(header().bus_key("host-a"), b"acme\0host-a");
    }

    #[test]
    fn short_or_spaced_keys_are_refused() {
        assert!(BusKey::new("short").is_err());
        assert!(BusKey::new("0123456789 abcdef").is_err());
        assert!(BusKey::new("0123456789abcdef\n").is_err());
        let err = BusKey::new("").unwrap_err().to_string();
        assert!(err.contains("at least 16 characters"), "{err}");
    }

    /// Guards "kiln up keeps one key across restarts", that the file is
    /// its owner's only, and that the key never shows in a log line.
    #[test]
    fn a_created_key_is_kept_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus-key");
        let first = BusKey::load_or_create(&path).unwrap();
        assert!(first.expose().starts_with(BUS_KEY_PREFIX));
        assert_eq!(
            first.expose().len(),
            BUS_KEY_PREFIX.len() + 2 * BUS_KEY_SECRET_BYTES
        );
        assert_eq!(BusKey::load_or_create(&path).unwrap(), first);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(format!("{first:?}"), "BusKey(…)");
        std::fs::write(&path, "short\n").unwrap();
        assert!(matches!(
            BusKey::load_or_create(&path),
            Err(BusKeyError::Invalid)
        ));
    }
}
