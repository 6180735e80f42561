//! API keys: how they are made, what of them is stored, how one is checked.
//! Backend-independent, so every [`MetadataStore`](crate::MetadataStore)
//! keeps keys the same way.
//!
//! A key is `kiln_` followed by 64 hex digits: 256 random bits from the
//! operating system. Stores keep only its SHA-256 and its first
//! [`PREFIX_LEN`] characters (to tell keys apart in listings), never the key.
//!
//! Why plain SHA-256 and not a password hash (argon2, bcrypt): those are
//! slow on purpose because passwords are guessable. A 256-bit random key is
//! not, so a fast hash loses nothing, and the gateway checks a key on every
//! request. Looking a key up by its hash also leaks nothing through timing:
//! an attacker cannot choose inputs whose hashes come near a stored one.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::error::StoreError;

/// What every key starts with, so that leaked keys are easy to grep for.
const KEY_PREFIX: &str = "kiln_";
/// Random bytes in a key.
const SECRET_BYTES: usize = 32;
/// Length of a whole key.
const KEY_LEN: usize = KEY_PREFIX.len() + 2 * SECRET_BYTES;
/// How much of a key is stored in the clear to tell keys apart: `kiln_`
/// and 7 hex digits (28 bits), too little to help guess the rest.
pub(crate) const PREFIX_LEN: usize = KEY_PREFIX.len() + 7;

/// A secret API key, as handed to its owner once at creation.
///
/// Its `Debug` form hides the secret, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A fresh random key.
    pub(crate) fn generate() -> Result<ApiKey, StoreError> {
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut secret).map_err(|e| StoreError::Backend {
            backend: "os",
            op: "draw random bytes for an api key",
            source: Box::new(std::io::Error::from(e)),
        })?;
        Ok(ApiKey(format!("{KEY_PREFIX}{}", hex::encode(secret))))
    }

    /// The key, to show its owner once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What a store keeps of the key.
    pub fn hash(&self) -> KeyHash {
        KeyHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// The part of the key stored in the clear.
    pub fn prefix(&self) -> &str {
        &self.0[..PREFIX_LEN]
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}…)", self.prefix())
    }
}

/// The SHA-256 of a key: all a store keeps of it, and what a UI session
/// names its key by (so the session cookie never holds the key itself).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    /// The hash of `key`, or `None` when `key` does not have the shape of
    /// a key (so it cannot be one, and no lookup is needed).
    pub fn of_key(key: &str) -> Option<KeyHash> {
        let well_formed = key.len() == KEY_LEN
            && key.starts_with(KEY_PREFIX)
            && key[KEY_PREFIX.len()..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        well_formed.then(|| KeyHash(Sha256::digest(key.as_bytes()).into()))
    }

    /// Lowercase hex, 64 digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The hash written by [`to_hex`](Self::to_hex), or `None`.
    pub fn from_hex(text: &str) -> Option<KeyHash> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(KeyHash(bytes))
    }
}

/// Shows a few digits only: enough to tell hashes apart in a log.
impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({}…)", &self.to_hex()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the key format and that fresh keys differ.
    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let a = ApiKey::generate().unwrap();
        let b = ApiKey::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), KEY_LEN);
        assert_eq!(KeyHash::of_key(a.expose()), Some(a.hash()));
        assert_eq!(a.prefix(), &a.expose()[..12]);
        assert!(!format!("{a:?}").contains(&a.expose()[PREFIX_LEN..]));
        let hash = a.hash();
        assert_eq!(KeyHash::from_hex(&hash.to_hex()), Some(hash));
        assert_eq!(KeyHash::from_hex("zz"), None);
    }

    #[test]
    fn malformed_keys_have_no_hash() {
        let key = ApiKey::generate().unwrap();
        let k = key.expose();
        assert!(KeyHash::of_key("").is_none());
        assert!(KeyHash::of_key(&k[..KEY_LEN - 1]).is_none());
        assert!(KeyHash::of_key(&format!("{k}0")).is_none());
        assert!(KeyHash::of_key(&k.to_uppercase()).is_none());
        assert!(KeyHash::of_key(&k.replacen("kiln_", "klin_", 1)).is_none());
        // Multi-byte characters must not make the slicing above panic.
        assert!(KeyHash::of_key(&format!("kiln_{}", "é".repeat(32))).is_none());
    }
}
