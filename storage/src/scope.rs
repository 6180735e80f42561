//! Tenant and project names, validated once so every backend can put them
//! straight into keys, paths and partition keys.

use std::fmt;

use crate::error::StoreError;

/// Longest tenant or project name, in bytes. Short enough that a name fits a
/// one-byte length prefix in the embedded store's keys.
pub const MAX_NAME_LEN: usize = kiln_model::MAX_SCOPE_NAME_LEN;

/// A tenant and a project: every sample key starts with them.
///
/// Both names match `[a-z0-9][a-z0-9_-]{0,62}`: no separators, no dots, no
/// upper case, so a name is safe as a path segment, a bucket prefix and a
/// CQL text key alike, and two names never differ only by case.
///
/// # Examples
///
/// ```
/// use kiln_storage::Scope;
///
/// let scope = Scope::new("acme", "web-frontend")?;
/// assert_eq!(scope.tenant(), "acme");
/// assert!(Scope::new("Acme", "web").is_err());
/// assert!(Scope::new("acme", "../x").is_err());
/// # Ok::<(), kiln_storage::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    tenant: String,
    project: String,
}

impl Scope {
    /// A scope, once both names are valid.
    pub fn new(tenant: impl Into<String>, project: impl Into<String>) -> Result<Scope, StoreError> {
        let tenant = tenant.into();
        let project = project.into();
        validate_name("tenant", &tenant)?;
        validate_name("project", &project)?;
        Ok(Scope { tenant, project })
    }

    /// Checks a tenant name alone (the dictionary tables are keyed by tenant
    /// only).
    pub fn validate_tenant(tenant: &str) -> Result<(), StoreError> {
        validate_name("tenant", tenant)
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.project
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.project)
    }
}

/// Checks `name` against `[a-z0-9][a-z0-9_-]{0,62}` (the rule lives in
/// kiln-model, beside the bus envelope that carries names too); `what`
/// names it in the error.
fn validate_name(what: &'static str, name: &str) -> Result<(), StoreError> {
    kiln_model::check_scope_name(what, name).map_err(|e| StoreError::InvalidName {
        what: e.what,
        name: e.name,
        reason: e.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(tenant: &str) -> String {
        match Scope::new(tenant, "p") {
            Err(StoreError::InvalidName { reason, .. }) => reason,
            other => panic!("{tenant:?} was accepted: {other:?}"),
        }
    }

    #[test]
    fn accepts_the_documented_alphabet() {
        for name in ["a", "0", "acme", "a-b_c-9", &"x".repeat(MAX_NAME_LEN)] {
            Scope::new(name, name).unwrap();
        }
    }

    #[test]
    fn rejections_name_the_problem() {
        assert!(reason("").contains("empty"));
        assert!(reason(&"x".repeat(64)).contains("64 bytes"));
        assert!(reason("-a").contains("starts with '-'"));
        assert!(reason("_a").contains("starts with '_'"));
        assert!(reason("Acme").contains("starts with 'A'"));
        assert!(reason("ac.me").contains("contains '.'"));
        assert!(reason("a/b").contains("contains '/'"));
        assert!(reason("a b").contains("contains ' '"));
        assert!(reason("é").contains("starts with 'é'"));
    }

    #[test]
    fn project_is_checked_too() {
        let err = Scope::new("acme", "Web").unwrap_err();
        assert!(
            err.to_string().starts_with("invalid project name \"Web\""),
            "{err}"
        );
    }
}
