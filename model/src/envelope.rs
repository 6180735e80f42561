//! The bus envelope: what goes on the ingest bus for each agent batch,
//! whoever publishes it (a gateway, or an in-cluster agent's Kafka sink),
//! and the rule tenant and project names follow.
//!
//! The tenant and project come from the publisher's credential (at the
//! gateway) or configuration (a trusted agent), never from the batch body,
//! so they travel beside the batch:
//!
//! ```text
//! "KLNE" | version u8 (1) | tenant len u8 | tenant | project len u8 | project
//!        | received_at_ns i64 LE | batch bytes (Batch::encode)
//! ```
//!
//! The record's key is [`bus_key`]: tenant and host, so that one host's
//! batches stay in one partition (and so in one worker's dictionary cache).
//!
//! ```
//! use kiln_model::Envelope;
//!
//! let bytes = Envelope::new("acme", "web", 7, b"batch")?.encode();
//! let back = Envelope::parse(&bytes)?;
//! assert_eq!((back.tenant(), back.project(), back.batch()), ("acme", "web", &b"batch"[..]));
//! # Ok::<(), kiln_model::EnvelopeError>(())
//! ```

/// The envelope's magic bytes.
pub const ENVELOPE_MAGIC: &[u8; 4] = b"KLNE";
/// The envelope version this build writes and reads.
pub const ENVELOPE_VERSION: u8 = 1;
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

/// Why bus bytes are not an envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Wrong magic or a version this build does not read.
    #[error("bus record is not a kiln envelope of version {ENVELOPE_VERSION}")]
    NotAnEnvelope,
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

    /// The envelope's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let tenant = self.tenant.as_bytes();
        let project = self.project.as_bytes();
        let mut out = Vec::with_capacity(16 + tenant.len() + project.len() + self.batch.len());
        out.extend_from_slice(ENVELOPE_MAGIC);
        out.push(ENVELOPE_VERSION);
        // Checked names are at most 63 bytes.
        out.push(tenant.len() as u8);
        out.extend_from_slice(tenant);
        out.push(project.len() as u8);
        out.extend_from_slice(project);
        out.extend_from_slice(&self.received_at_ns.to_le_bytes());
        out.extend_from_slice(self.batch);
        out
    }

    /// Reads envelope bytes, checking the names.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, EnvelopeError> {
        let rest = bytes
            .strip_prefix(ENVELOPE_MAGIC.as_slice())
            .and_then(|r| r.strip_prefix(&[ENVELOPE_VERSION]))
            .ok_or(EnvelopeError::NotAnEnvelope)?;
        let (tenant, rest) = take_str(rest)?;
        let (project, rest) = take_str(rest)?;
        let (ts, batch) = rest.split_at_checked(8).ok_or(EnvelopeError::Truncated)?;
        let received_at_ns = i64::from_le_bytes(ts.try_into().expect("8 bytes"));
        Ok(Envelope::new(tenant, project, received_at_ns, batch)?)
    }
}

/// The bus key of a batch from host `source`: tenant and host, so that one
/// host's batches stay in one partition.
pub fn bus_key(tenant: &str, source: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(tenant.len() + source.len() + 1);
    key.extend_from_slice(tenant.as_bytes());
    key.push(0);
    key.extend_from_slice(source.as_bytes());
    key
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

    #[test]
    fn round_trip() {
        let bytes = Envelope::new("acme", "web", -5, &[1, 2, 3])
            .unwrap()
            .encode();
        let back = Envelope::parse(&bytes).unwrap();
        assert_eq!(back, Envelope::new("acme", "web", -5, &[1, 2, 3]).unwrap());
        assert_eq!(back.received_at_ns(), -5);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = Envelope::new("acme", "web", 0, &[]).unwrap().encode();
        for n in 0..bytes.len() {
            assert!(Envelope::parse(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
    }

    // Guards that a hand-made record with a name no store accepts is
    // refused on reading, naming the problem.
    #[test]
    fn invalid_names_are_refused_both_ways() {
        assert!(Envelope::new("Acme", "web", 0, &[]).is_err());
        let mut bytes = Envelope::new("acme", "web", 0, &[]).unwrap().encode();
        bytes[6] = b'A';
        let err = Envelope::parse(&bytes).unwrap_err();
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

    #[test]
    fn keys_put_the_tenant_first() {
        assert_eq!(bus_key("acme", "host-a"), b"acme\0host-a");
    }
}
