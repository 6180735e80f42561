//! Credential checks made while the metadata store was down.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::OutageLabels;

/// Credential checks made while the metadata store could not be asked
/// (`http/auth/`): a database restart is then visible on every node that
/// checks keys, rather than only as 503s in clients' logs.
#[derive(Debug, Clone, Default)]
pub struct AuthMetrics {
    outage: Family<OutageLabels, Counter>,
}

/// What a credential check looked up in the metadata store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthLookup {
    /// The grant of an API key.
    Key,
    /// A tenant's limits.
    Limits,
}

/// How a check was answered while the metadata store was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageAnswer {
    /// From what the store said within the stale-if-error window.
    LastKnown,
    /// Refused with a 503: nothing read recently to go on.
    Refused,
}

impl AuthMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "auth_metadata_unavailable",
            "Credential checks made while the metadata store could not be asked, by lookup (key: \
             an API key's grant; limits: a tenant's limits) and answer (last_known: taken as the \
             store answered within the last 10 minutes; refused: a 503, nothing recent to go on)",
            self.outage.clone(),
        );
    }

    /// Counts a `lookup` answered as `answer` while the store was down.
    pub fn metadata_unavailable(&self, lookup: AuthLookup, answer: OutageAnswer) {
        self.outage
            .get_or_create(&OutageLabels {
                lookup: match lookup {
                    AuthLookup::Key => "key",
                    AuthLookup::Limits => "limits",
                },
                answer: match answer {
                    OutageAnswer::LastKnown => "last_known",
                    OutageAnswer::Refused => "refused",
                },
            })
            .inc();
    }
}
