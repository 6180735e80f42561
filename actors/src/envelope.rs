//! The bus envelope: what the gateway publishes for each accepted batch.
//!
//! The tenant and project come from the caller's credential at the gateway,
//! never from the batch body, so they travel beside the batch:
//!
//! ```text
//! "KLNE" | version u8 (1) | tenant len u8 | tenant | project len u8 | project
//!        | received_at_ns i64 LE | batch bytes (kiln_model::Batch::encode)
//! ```

use kiln_storage::Scope;

const MAGIC: &[u8; 4] = b"KLNE";
const VERSION: u8 = 1;

/// Who a batch belongs to and when it arrived: the envelope's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeHeader {
    /// Whose batch this is.
    pub scope: Scope,
    /// When the gateway accepted it.
    pub received_at_ns: i64,
}

/// Why bus bytes are not an envelope.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// Wrong magic or a version this build does not read.
    #[error("bus record is not a kiln envelope of version {VERSION}")]
    NotAnEnvelope,
    /// The record ends inside the header.
    #[error("bus record is truncated inside its envelope header")]
    Truncated,
    /// The tenant or project in the header is not valid.
    #[error("bus record names an invalid scope: {0}")]
    Scope(#[from] kiln_storage::StoreError),
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

    /// The envelope's bytes around `batch` (an encoded [`kiln_model::Batch`]).
    pub fn wrap(&self, batch: &[u8]) -> Vec<u8> {
        let tenant = self.scope.tenant().as_bytes();
        let project = self.scope.project().as_bytes();
        let mut out = Vec::with_capacity(16 + tenant.len() + project.len() + batch.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        // Scope names are at most 63 bytes (Scope validates them).
        out.push(tenant.len() as u8);
        out.extend_from_slice(tenant);
        out.push(project.len() as u8);
        out.extend_from_slice(project);
        out.extend_from_slice(&self.received_at_ns.to_le_bytes());
        out.extend_from_slice(batch);
        out
    }

    /// Splits envelope bytes into the header and the batch bytes.
    pub fn parse(bytes: &[u8]) -> Result<(EnvelopeHeader, &[u8]), EnvelopeError> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .and_then(|r| r.strip_prefix(&[VERSION]))
            .ok_or(EnvelopeError::NotAnEnvelope)?;
        let (tenant, rest) = take_str(rest)?;
        let (project, rest) = take_str(rest)?;
        let (ts, batch) = rest.split_at_checked(8).ok_or(EnvelopeError::Truncated)?;
        let received_at_ns = i64::from_le_bytes(ts.try_into().expect("8 bytes"));
        let header = EnvelopeHeader {
            scope: Scope::new(tenant, project)?,
            received_at_ns,
        };
        Ok((header, batch))
    }
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

    fn header() -> EnvelopeHeader {
        EnvelopeHeader {
            scope: Scope::new("acme", "web").unwrap(),
            received_at_ns: -5,
        }
    }

    #[test]
    fn round_trip() {
        let bytes = header().wrap(&[1, 2, 3]);
        let (h, batch) = EnvelopeHeader::parse(&bytes).unwrap();
        assert_eq!(h, header());
        assert_eq!(batch, [1, 2, 3]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = header().wrap(&[]);
        for n in 0..bytes.len() {
            assert!(
                EnvelopeHeader::parse(&bytes[..n]).is_err(),
                "prefix of {n} bytes"
            );
        }
    }
}
