//! API keys: how they are made, what of them is stored, how one is checked.
//! Backend-independent, so every [`MetadataStore`](crate::MetadataStore)
//! keeps keys the same way.
//!
//! A key is `kiln_` followed by 64 hex digits: 256 random bits from the
//! operating system. Stores keep only its SHA-256 and its first
//! [`PREFIX_LEN`] characters (to tell keys apart in listings), never the key.
//!
//! In a deployment with regions, its owner is given the key tagged with its
//! home region, `kiln_<region>_<64 hex>` ([`ApiKey::tagged`]), so that any
//! region's gateway can tell where the key's tenant lives without looking
//! anything up ([`key_region`]). The tag is routing, not secret: the hash
//! is of the untagged key, which only the home region's store knows, so a
//! key with its tag changed is only sent to a region that refuses it.
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

/// Longest region name a key may carry.
pub const MAX_REGION_LEN: usize = 32;

/// Whether `name` can name a region: 1 to [`MAX_REGION_LEN`] lowercase
/// letters, digits and inner dashes (`eu-west-1`), and not `admin` (the
/// admin token is `kiln_admin_…`).
pub fn is_region_name(name: &str) -> bool {
    (1..=MAX_REGION_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name != "admin"
}

/// The home region a presented key is tagged with, or `None` for an
/// untagged key (or anything that is not a key).
pub fn key_region(key: &str) -> Option<&str> {
    split_tag(key).map(|(region, _)| region)
}

/// `kiln_<region>_<secret>` → (`region`, `<secret>`).
fn split_tag(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (region, secret) = rest.rsplit_once('_')?;
    (is_region_name(region) && secret.len() == 2 * SECRET_BYTES).then_some((region, secret))
}

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

    /// The key tagged with its home `region` (see the module docs): what a
    /// deployment with regions gives its owner.
    pub fn tagged(&self, region: &str) -> String {
        format!("{KEY_PREFIX}{region}_{}", &self.0[KEY_PREFIX.len()..])
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
    /// The hash of `key` (without its region tag, if it has one), or
    /// `None` when `key` does not have the shape of a key (so it cannot be
    /// one, and no lookup is needed).
    pub fn of_key(key: &str) -> Option<KeyHash> {
        let untagged;
        let key = match split_tag(key) {
            Some((_, secret)) => {
                untagged = format!("{KEY_PREFIX}{secret}");
                untagged.as_str()
            }
            None => key,
        };
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

    /// Guards the region tag: the same hash as the key itself, the region
    /// read back, and names that are not regions refused.
    #[test]
    fn tagged_keys_hash_as_the_key_and_name_their_region() {
        let key = ApiKey::generate().unwrap();
        let tagged = key.tagged("eu-west-1");
        assert!(tagged.starts_with("kiln_eu-west-1_"));
        assert_eq!(KeyHash::of_key(&tagged), Some(key.hash()));
        assert_eq!(key_region(&tagged), Some("eu-west-1"));
        assert_eq!(key_region(key.expose()), None);
        let secret = &key.expose()[KEY_PREFIX.len()..];
        for bad in ["EU", "-eu", "eu-", "admin", "", "e_u", &"r".repeat(33)] {
            assert!(!is_region_name(bad), "{bad:?}");
            let forged = format!("{KEY_PREFIX}{bad}_{secret}");
            assert_eq!(key_region(&forged), None, "{forged}");
        }
        assert!(is_region_name("us-east-2") && is_region_name(&"r".repeat(32)));
        // A short secret is no key, tagged or not.
        assert_eq!(KeyHash::of_key(&format!("kiln_eu_{}", &secret[1..])), None);
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
