//! The bus envelope: what a gateway puts on the ingest bus for each batch
//! it accepted, and the rule tenant and project names follow.
//!
//! The tenant and project come from the caller's credential at the
//! gateway, never from the batch body, so they travel beside the batch,
//! under a MAC that workers verify: HMAC-SHA256, keyed with the bus key
//! that gateways and workers share, over every other byte of the record.
//! A record whose MAC does not verify (no MAC, a forged one, another key)
//! names a tenant nobody vouched for, and is refused.
//!
//! ```text
//! "KLNE" | version u8 (2) | tenant len u8 | tenant | project len u8 | project
//!        | received_at_ns i64 LE | mac [32] | batch bytes (Batch::encode)
//! mac = HMAC-SHA256(bus key, every byte before the mac ‖ batch bytes)
//! ```
//!
//! Version 1 had no MAC; it is refused like a wrong MAC.
//!
//! ```
//! use kiln_model::Envelope;
//!
//! let key = b"the key gateways and workers share";
//! let bytes = Envelope::new("acme", "web", 7, b"batch")?.encode(key);
//! let back = Envelope::parse(&bytes, key)?;
//! assert_eq!((back.tenant(), back.project(), back.batch()), ("acme", "web", &b"batch"[..]));
//! assert!(Envelope::parse(&bytes, b"some other key").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use hmac::{KeyInit, Mac};

/// HMAC-SHA256, the envelope's MAC.
type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The envelope's magic bytes.
pub const ENVELOPE_MAGIC: &[u8; 4] = b"KLNE";
/// The envelope version this build writes and reads: 2 added the MAC.
pub const ENVELOPE_VERSION: u8 = 2;
/// Bytes of the envelope's MAC (HMAC-SHA256).
pub const ENVELOPE_MAC_LEN: usize = 32;
/// Longest tenant or project name, in bytes: a name fits a one-byte length
/// prefix (here and in the embedded store's keys).
pub const MAX_SCOPE_NAME_LEN: usize = 63;

/// A tenant or project name that breaks the rule of [`check_scope_name`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} name {name:?}: {reason}")]
pub struct ScopeNameError {
    /// `tenant` or `project`.
    pub what: &'static str,
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Checks a tenant or project name against `[a-z0-9][a-z0-9_-]{0,62}`: no
/// separators, no dots, no upper case, so a name is safe as a path
/// segment, a bucket prefix and a CQL text key alike, and two names never
/// differ only by case. `what` names it in the error.
pub fn check_scope_name(what: &'static str, name: &str) -> Result<(), ScopeNameError> {
    let invalid = |reason: String| ScopeNameError {
        what,
        name: name.to_owned(),
        reason,
    };
    let Some(first) = name.chars().next() else {
        return Err(invalid("it is empty".into()));
    };
    if name.len() > MAX_SCOPE_NAME_LEN {
        return Err(invalid(format!(
            "it is {} bytes long, the limit is {MAX_SCOPE_NAME_LEN}",
            name.len()
        )));
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return Err(invalid(format!(
            "it starts with {first:?}; a name starts with a lower-case letter or a digit"
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
    {
        return Err(invalid(format!(
            "it contains {bad:?}; allowed are a-z, 0-9, '_' and '-'"
        )));
    }
    Ok(())
}

/// Why bus bytes are not an envelope this worker can trust.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Wrong magic or a version this build does not read.
    #[error("bus record is not a kiln envelope of version {ENVELOPE_VERSION}")]
    NotAnEnvelope,
    /// An envelope of a version without a MAC (1): its scope is unproven.
    #[error(
        "envelope MAC does not verify: the record is a version {version} envelope, \
         which carries none (published by an older gateway, or straight to the bus)"
    )]
    Unsigned {
        /// The version in the record.
        version: u8,
    },
    /// The MAC is not the one the bus key gives: the record was forged,
    /// damaged, or published with another key.
    #[error(
        "envelope MAC does not verify: the record was not published by a gateway \
         holding this bus key"
    )]
    BadMac,
    /// The record ends inside the header.
    #[error("bus record is truncated inside its envelope header")]
    Truncated,
    /// The tenant or project is not a valid name.
    #[error("bus record names an invalid scope: {0}")]
    Scope(#[from] ScopeNameError),
}

/// One envelope: whose batch, when it arrived, and the encoded batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    tenant: &'a str,
    project: &'a str,
    received_at_ns: i64,
    batch: &'a [u8],
}

impl<'a> Envelope<'a> {
    /// An envelope around `batch` (an encoded [`Batch`](crate::Batch)),
    /// once both names are valid.
    pub fn new(
        tenant: &'a str,
        project: &'a str,
        received_at_ns: i64,
        batch: &'a [u8],
    ) -> Result<Self, ScopeNameError> {
        check_scope_name("tenant", tenant)?;
        check_scope_name("project", project)?;
        Ok(Envelope {
            tenant,
            project,
            received_at_ns,
            batch,
        })
    }

    /// Whose batch this is.
    pub fn tenant(&self) -> &'a str {
        self.tenant
    }

    /// Which of the tenant's projects.
    pub fn project(&self) -> &'a str {
        self.project
    }

    /// When it was accepted, in nanoseconds since the Unix epoch.
    pub fn received_at_ns(&self) -> i64 {
        self.received_at_ns
    }

    /// The encoded batch.
    pub fn batch(&self) -> &'a [u8] {
        self.batch
    }

    /// The envelope's bytes, with their MAC under `key` (the bus key
    /// gateways and workers share).
    pub fn encode(&self, key: &[u8]) -> Vec<u8> {
        let tenant = self.tenant.as_bytes();
        let project = self.project.as_bytes();
        let mut out = Vec::with_capacity(
            16 + tenant.len() + project.len() + ENVELOPE_MAC_LEN + self.batch.len(),
        );
        out.extend_from_slice(ENVELOPE_MAGIC);
        out.push(ENVELOPE_VERSION);
        // Checked names are at most 63 bytes.
        out.push(tenant.len() as u8);
        out.extend_from_slice(tenant);
        out.push(project.len() as u8);
        out.extend_from_slice(project);
        out.extend_from_slice(&self.received_at_ns.to_le_bytes());
        let mac = mac(key, &out, self.batch).finalize().into_bytes();
        out.extend_from_slice(&mac);
        out.extend_from_slice(self.batch);
        out
    }

    /// Reads envelope bytes, verifying their MAC under `key` (in constant
    /// time) before anything else of them is believed, then checking the
    /// names.
    ///
    /// # Errors
    ///
    /// [`EnvelopeError::BadMac`] or [`EnvelopeError::Unsigned`] when the
    /// record's scope cannot be trusted; the others when it is not an
    /// envelope at all.
    pub fn parse(bytes: &'a [u8], key: &[u8]) -> Result<Self, EnvelopeError> {
        let rest = bytes
            .strip_prefix(ENVELOPE_MAGIC.as_slice())
            .ok_or(EnvelopeError::NotAnEnvelope)?;
        let (&version, rest) = rest.split_first().ok_or(EnvelopeError::Truncated)?;
        match version {
            ENVELOPE_VERSION => {}
            1 => return Err(EnvelopeError::Unsigned { version }),
            _ => return Err(EnvelopeError::NotAnEnvelope),
        }
        let (tenant, rest) = take_str(rest)?;
        let (project, rest) = take_str(rest)?;
        let (ts, rest) = rest.split_at_checked(8).ok_or(EnvelopeError::Truncated)?;
        let (tag, batch) = rest
            .split_at_checked(ENVELOPE_MAC_LEN)
            .ok_or(EnvelopeError::Truncated)?;
        let signed = &bytes[..bytes.len() - rest.len()];
        mac(key, signed, batch)
            .verify_slice(tag)
            .map_err(|_| EnvelopeError::BadMac)?;
        let received_at_ns = i64::from_le_bytes(ts.try_into().expect("8 bytes"));
        Ok(Envelope::new(tenant, project, received_at_ns, batch)?)
    }
}

/// The MAC of a record whose bytes before the MAC are `header`.
fn mac(key: &[u8], header: &[u8], batch: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (long ones are hashed first).
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(header);
    mac.update(batch);
    mac
}

fn take_str(bytes: &[u8]) -> Result<(&str, &[u8]), EnvelopeError> {
    let (&len, rest) = bytes.split_first().ok_or(EnvelopeError::Truncated)?;
    let (s, rest) = rest
        .split_at_checked(len as usize)
        .ok_or(EnvelopeError::Truncated)?;
    let s = std::str::from_utf8(s).map_err(|_| EnvelopeError::NotAnEnvelope)?;
    Ok((s, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef";

    #[test]
    fn round_trip() {
        let bytes = Envelope::new("acme", "web", -5, &[1, 2, 3])
            .unwrap()
            .encode(KEY);
        let back = Envelope::parse(&bytes, KEY).unwrap();
        assert_eq!(back, Envelope::new("acme", "web", -5, &[1, 2, 3]).unwrap());
        assert_eq!(back.received_at_ns(), -5);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = Envelope::new("acme", "web", 0, &[]).unwrap().encode(KEY);
        for n in 0..bytes.len() {
            assert!(
                Envelope::parse(&bytes[..n], KEY).is_err(),
                "prefix of {n} bytes"
            );
        }
    }

    /// Guards the trust boundary: changing any byte of a record (its
    /// tenant, its time, its batch, its MAC), or verifying with another
    /// key, fails the MAC.
    #[test]
    fn any_changed_byte_or_another_key_fails_the_mac() {
        let bytes = Envelope::new("acme", "web", 9, b"batch")
            .unwrap()
            .encode(KEY);
        for i in 5..bytes.len() {
            let mut forged = bytes.clone();
            forged[i] ^= 0x01;
            let err = Envelope::parse(&forged, KEY).unwrap_err();
            // A changed length byte may instead cut the record short.
            assert!(
                matches!(err, EnvelopeError::BadMac | EnvelopeError::Truncated),
                "byte {i}: {err:?}"
            );
        }
        let err = Envelope::parse(&bytes, b"another key entirely").unwrap_err();
        assert_eq!(err, EnvelopeError::BadMac);
        assert!(
            err.to_string().contains("envelope MAC does not verify"),
            "{err}"
        );
    }

    /// A forged record naming another tenant, signed with a wrong key, is
    /// refused; so is an unsigned version-1 record.
    #[test]
    fn forged_and_unsigned_records_are_refused() {
        let forged = Envelope::new("victim", "web", 0, b"b")
            .unwrap()
            .encode(b"guess");
        assert_eq!(Envelope::parse(&forged, KEY), Err(EnvelopeError::BadMac));
        let mut v1 = b"KLNE\x01".to_vec();
        v1.extend_from_slice(b"\x06victim\x03web");
        v1.extend_from_slice(&0i64.to_le_bytes());
        v1.extend_from_slice(b"batch");
        let err = Envelope::parse(&v1, KEY).unwrap_err();
        assert_eq!(err, EnvelopeError::Unsigned { version: 1 });
        assert!(
            err.to_string().starts_with("envelope MAC does not verify"),
            "{err}"
        );
        let mut v9 = forged.clone();
        v9[4] = 9;
        assert_eq!(Envelope::parse(&v9, KEY), Err(EnvelopeError::NotAnEnvelope));
    }

    // Guards that a hand-made record with a name no store accepts is
    // refused on reading, naming the problem, even under a good MAC.
    #[test]
    fn invalid_names_are_refused_both_ways() {
        assert!(Envelope::new("Acme", "web", 0, &[]).is_err());
        let mut bytes = Envelope::new("acme", "web", 0, &[]).unwrap().encode(KEY);
        bytes[6] = b'A';
        let body = bytes.len() - ENVELOPE_MAC_LEN;
        let resigned = mac(KEY, &bytes[..body], &[]).finalize().into_bytes();
        bytes[body..].copy_from_slice(&resigned);
        let err = Envelope::parse(&bytes, KEY).unwrap_err();
        assert!(
            err.to_string().contains("invalid tenant name \"Acme\""),
            "{err}"
        );
    }

    #[test]
    fn name_rule_rejections_name_the_problem() {
        let reason = |name: &str| check_scope_name("tenant", name).unwrap_err().reason;
        for name in ["a", "0", "acme", "a-b_c-9", &"x".repeat(MAX_SCOPE_NAME_LEN)] {
            check_scope_name("tenant", name).unwrap();
        }
        assert!(reason("").contains("empty"));
        assert!(reason(&"x".repeat(64)).contains("64 bytes"));
        assert!(reason("-a").contains("starts with '-'"));
        assert!(reason("ac.me").contains("contains '.'"));
        assert!(reason("é").contains("starts with 'é'"));
    }
}
