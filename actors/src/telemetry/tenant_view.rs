//! Who sees tenants' names in `/metrics`. The per-tenant families (ingest
//! volume, refusals, quota rejections) name every tenant and how much it
//! sends, which is not for anyone who can reach the port: the operator
//! chooses ([`TenantNames`]) whether other scrapers see those series with
//! each tenant's name replaced by a keyed hash, or not at all. A scrape
//! with the admin token (`Authorization: Bearer …`, as Prometheus sends
//! with `authorization` in its scrape config) always sees the names.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// What a scrape without the admin token sees of per-tenant series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TenantNames {
    /// The series, each tenant named by a keyed hash (`t_` and 16 hex
    /// digits), the same on every node that shares the admin token and
    /// across restarts: dashboards and alerts work per tenant, and the
    /// operator maps a hash back with its admin-token scrape.
    #[default]
    Hashed,
    /// None of them: only the admin token's scrapes see per-tenant series.
    OperatorOnly,
}

impl TenantNames {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TenantNames::Hashed => "hashed",
            TenantNames::OperatorOnly => "operator-only",
        }
    }
}

/// The hash key and the token that sees names.
#[derive(Debug, Clone)]
pub(crate) struct TenantView {
    names: TenantNames,
    /// The admin token's SHA-256: compared, never the token itself.
    admin: Option<[u8; 32]>,
    key: [u8; 32],
}

impl Default for TenantView {
    fn default() -> Self {
        TenantView::new(TenantNames::default(), None)
    }
}

impl TenantView {
    /// Hashes keyed by the admin token `admin` (so nodes sharing it
    /// agree), or by a random key where there is none (hashes then change
    /// at each start).
    pub(crate) fn new(names: TenantNames, admin: Option<&str>) -> Self {
        let mut key = [0u8; 32];
        let digest = admin.map(|token| Sha256::digest(token.as_bytes()).into());
        match admin {
            Some(token) => {
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(token.as_bytes())
                    .expect("HMAC takes any key length");
                mac.update(b"kiln metrics tenant names");
                key.copy_from_slice(&mac.finalize().into_bytes());
            }
            None => {
                if getrandom::fill(&mut key).is_err() {
                    // Without randomness, hide the series rather than
                    // hash with a key anyone could guess.
                    return TenantView {
                        names: TenantNames::OperatorOnly,
                        admin: digest,
                        key,
                    };
                }
            }
        }
        TenantView {
            names,
            admin: digest,
            key,
        }
    }

    /// Whether `authorization` (the request's header) is the admin token.
    pub(crate) fn is_operator(&self, authorization: Option<&str>) -> bool {
        let presented = authorization.and_then(|h| h.strip_prefix("Bearer "));
        match (&self.admin, presented) {
            (Some(admin), Some(presented)) => {
                Sha256::digest(presented.trim().as_bytes()).as_slice() == admin
            }
            _ => false,
        }
    }

    /// The per-tenant text `text` (Prometheus text) as a scraper sees it:
    /// as is for the operator, else hashed or left out.
    pub(crate) fn show(&self, text: String, operator: bool) -> String {
        match (operator, self.names) {
            (true, _) => text,
            (false, TenantNames::OperatorOnly) => String::new(),
            (false, TenantNames::Hashed) => self.hash_names(&text),
        }
    }

    /// `tenant` as hashed for scrapers without the admin token.
    pub(crate) fn hashed(&self, tenant: &str) -> String {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(tenant.as_bytes());
        let digest = mac.finalize().into_bytes();
        format!("t_{}", hex::encode(&digest[..8]))
    }

    /// Replaces the value of every `tenant="…"` label in `text`. Tenant
    /// names are lowercase letters, digits and dashes
    /// (`kiln_storage::Scope`), so a value never holds a quote or escape.
    fn hash_names(&self, text: &str) -> String {
        const LABEL: &str = "tenant=\"";
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(LABEL) {
            let value_start = at + LABEL.len();
            let Some(len) = rest[value_start..].find('"') else {
                break;
            };
            out.push_str(&rest[..value_start]);
            out.push_str(&self.hashed(&rest[value_start..value_start + len]));
            rest = &rest[value_start + len..];
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP kiln_ingest_samples Samples, by tenant\n\
        # TYPE kiln_ingest_samples counter\n\
        kiln_ingest_samples_total{tenant=\"acme\"} 5\n\
        kiln_quota_rejections_total{tenant=\"globex\",quota=\"max_stored_bytes\"} 1\n";

    fn admin() -> Option<&'static str> {
        Some("kiln_admin_0123456789abcdef")
    }

    #[test]
    fn scrapers_without_the_token_see_hashes_or_nothing() {
        let view = TenantView::new(TenantNames::Hashed, admin());
        let shown = view.show(TEXT.to_owned(), false);
        assert!(
            !shown.contains("acme") && !shown.contains("globex"),
            "{shown}"
        );
        assert!(
            shown.contains(&format!("{{tenant=\"{}\"}} 5", view.hashed("acme"))),
            "{shown}"
        );
        assert!(shown.contains(",quota=\"max_stored_bytes\"} 1"), "{shown}");
        assert_eq!(view.show(TEXT.to_owned(), true), TEXT);

        let hidden = TenantView::new(TenantNames::OperatorOnly, admin());
        assert_eq!(hidden.show(TEXT.to_owned(), false), "");
        assert_eq!(hidden.show(TEXT.to_owned(), true), TEXT);
    }

    #[test]
    fn hashes_are_keyed_by_the_admin_token_and_stable() {
        let a = TenantView::new(TenantNames::Hashed, admin());
        let b = TenantView::new(TenantNames::Hashed, admin());
        assert_eq!(a.hashed("acme"), b.hashed("acme"));
        assert_ne!(a.hashed("acme"), a.hashed("globex"));
        let other = TenantView::new(TenantNames::Hashed, Some("kiln_admin_fedcba9876543210"));
        assert_ne!(a.hashed("acme"), other.hashed("acme"));
        assert_eq!(a.hashed("acme").len(), 2 + 16);
    }

    #[test]
    fn only_the_admin_token_is_the_operator() {
        let view = TenantView::new(TenantNames::Hashed, admin());
        assert!(view.is_operator(Some("Bearer kiln_admin_0123456789abcdef")));
        assert!(!view.is_operator(Some("Bearer kiln_admin_0123456789abcdeX")));
        assert!(!view.is_operator(Some("kiln_admin_0123456789abcdef")));
        assert!(!view.is_operator(None));
        let no_token = TenantView::new(TenantNames::Hashed, None);
        assert!(!no_token.is_operator(Some("Bearer anything-at-all-long")));
    }
}
