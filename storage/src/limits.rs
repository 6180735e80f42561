//! Per-tenant limits, as an operator sets them (`kiln tenant set-limits`).
//! A `None` field means "the server's default": the servers hold the
//! defaults (and document them), the store holds only what was set.

use serde::{Deserialize, Serialize};

/// One tenant's limits. Every field is optional: unset, the server's
/// default applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Samples per second a tenant may send, summed over its agents and
    /// imports (a burst of one second's worth is allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest_samples_per_s: Option<u64>,
    /// Request bytes per second a tenant may send (as received, before
    /// decompression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest_bytes_per_s: Option<u64>,
    /// Queries of the tenant's that may run at once on one query node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_queries: Option<u32>,
    /// Days of profiles a query may reach back (older data is not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u32>,
    /// Bytes of samples and metric points the tenant may keep stored
    /// (as the store counts them, see `ProfileStore::stored_bytes`); over
    /// it, ingest is refused until retention or the operator makes room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stored_bytes: Option<u64>,
}

impl TenantLimits {
    /// The limits in `self`, with `other`'s where `self` has none.
    pub fn or(self, other: TenantLimits) -> TenantLimits {
        TenantLimits {
            ingest_samples_per_s: self.ingest_samples_per_s.or(other.ingest_samples_per_s),
            ingest_bytes_per_s: self.ingest_bytes_per_s.or(other.ingest_bytes_per_s),
            max_concurrent_queries: self.max_concurrent_queries.or(other.max_concurrent_queries),
            retention_days: self.retention_days.or(other.retention_days),
            max_stored_bytes: self.max_stored_bytes.or(other.max_stored_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_fall_back() {
        let set = TenantLimits {
            ingest_samples_per_s: Some(10),
            ..TenantLimits::default()
        };
        let defaults = TenantLimits {
            ingest_samples_per_s: Some(1),
            retention_days: Some(30),
            ..TenantLimits::default()
        };
        let merged = set.or(defaults);
        assert_eq!(merged.ingest_samples_per_s, Some(10));
        assert_eq!(merged.retention_days, Some(30));
        assert_eq!(merged.max_concurrent_queries, None);
    }

    #[test]
    fn json_names_every_field_and_refuses_unknown_ones() {
        let json = r#"{"ingest_samples_per_s":5,"retention_days":7}"#;
        let limits: TenantLimits = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::to_string(&limits).unwrap(), json);
        assert!(serde_json::from_str::<TenantLimits>(r#"{"samples":5}"#).is_err());
    }
}
