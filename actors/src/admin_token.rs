//! The admin credential: the operator's bearer token. It creates tenants
//! and sets their limits, and writes to what every tenant shares (the
//! global symbol store); it belongs to no tenant and reads no profiles.
//!
//! A server is given its token (`--admin-token`, `KILN_ADMIN_TOKEN`), or
//! `kiln up` makes one and keeps it in its data directory
//! ([`AdminToken::load_or_create`]). A server without one refuses such
//! writes, saying how to configure it: a distributed deployment must choose
//! its token, the same on every node.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// What a generated token starts with, so that a leaked one is easy to
/// grep for.
const TOKEN_PREFIX: &str = "kiln_admin_";
/// Random bytes in a generated token.
const SECRET_BYTES: usize = 32;
/// Shortest token accepted: a short one could be guessed.
const MIN_TOKEN_LEN: usize = 16;

/// The admin token. Its `Debug` form hides it, so it cannot leak into
/// logs.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(Arc<str>);

/// Why a token could not be used or made.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    /// The token is too short or holds whitespace or control characters.
    #[error(
        "an admin token must be at least {MIN_TOKEN_LEN} characters, without spaces or control characters"
    )]
    Invalid,
    /// The operating system gave no random bytes.
    #[error("cannot draw random bytes for an admin token: {0}")]
    Random(String),
    /// The token file could not be read or written.
    #[error("admin token file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

impl AdminToken {
    /// A token given by the operator.
    pub fn new(token: &str) -> Result<Self, AdminTokenError> {
        let valid = token.len() >= MIN_TOKEN_LEN
            && !token.chars().any(|c| c.is_whitespace() || c.is_control());
        match valid {
            true => Ok(AdminToken(token.into())),
            false => Err(AdminTokenError::Invalid),
        }
    }

    /// A fresh random token: `kiln_admin_` and 256 random bits in hex.
    pub fn generate() -> Result<Self, AdminTokenError> {
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut secret).map_err(|e| AdminTokenError::Random(e.to_string()))?;
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        Ok(AdminToken(format!("{TOKEN_PREFIX}{hex}").into()))
    }

    /// The token kept in `path`, or a new one written there (readable by
    /// its owner only) when there is none: what `kiln up` does, so that
    /// `kiln symbols crawl` on the same machine finds it.
    pub fn load_or_create(path: &Path) -> Result<Self, AdminTokenError> {
        let file_error = |source| AdminTokenError::File {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::new(text.trim()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(file_error(e)),
        }
        let token = Self::generate()?;
        let mut file = owner_only_file(path).map_err(file_error)?;
        writeln!(file, "{}", token.expose()).map_err(file_error)?;
        file.sync_all().map_err(file_error)?;
        Ok(token)
    }

    /// The token itself, to hand to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is the token. Both are hashed first, so the
    /// comparison's time says nothing about how much of a guess was right.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        Sha256::digest(self.0.as_bytes()) == Sha256::digest(presented.as_bytes())
    }
}

/// Creates `path` for writing, readable and writable by its owner only.
fn owner_only_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_spaced_tokens_are_refused() {
        assert!(AdminToken::new("short").is_err());
        assert!(AdminToken::new("0123456789 abcdef").is_err());
        assert!(AdminToken::new("0123456789abcdef\n").is_err());
    }

    /// Guards "kiln up keeps one token across restarts", and that the file
    /// is its owner's only.
    #[test]
    fn a_created_token_is_kept_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-token");
        let first = AdminToken::load_or_create(&path).unwrap();
        assert!(first.expose().starts_with(TOKEN_PREFIX));
        assert_eq!(first.expose().len(), TOKEN_PREFIX.len() + 2 * SECRET_BYTES);
        assert_eq!(AdminToken::load_or_create(&path).unwrap(), first);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(format!("{first:?}"), "AdminToken(…)");
    }
}
