//! What a credential grants: a scope and a set of roles. Every request's
//! tenant comes from here, never from what the request says of itself.

use std::fmt;
use std::str::FromStr;

use crate::scope::Scope;

/// One thing a key may do. The numbers are stored: never renumbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Role {
    /// Send profiles: agent batches, imports, symbol uploads.
    Ingest = 0,
    /// Query profiles and metrics; use the UI.
    Read = 1,
    /// Manage the tenant's own keys (create, list, revoke).
    Admin = 2,
}

impl Role {
    /// Every role, in number order.
    pub const ALL: [Role; 3] = [Role::Ingest, Role::Read, Role::Admin];

    /// The role's name, as the CLI and the API spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Ingest => "ingest",
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`Role`]s. Stored as its bits ([`Roles::bits`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Roles(u8);

impl Roles {
    /// No role at all.
    pub const NONE: Roles = Roles(0);
    /// What `kiln tenant create` gives a tenant's first key: send and read.
    pub const INGEST_READ: Roles = Roles(1 << Role::Ingest as u8 | 1 << Role::Read as u8);

    /// The set of `roles`.
    pub fn of(roles: &[Role]) -> Roles {
        Roles(roles.iter().fold(0, |bits, role| bits | role.bit()))
    }

    /// Whether the set holds `role`.
    pub fn contains(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The roles in the set, in number order.
    pub fn iter(self) -> impl Iterator<Item = Role> {
        Role::ALL.into_iter().filter(move |r| self.contains(*r))
    }

    /// The stored form.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The set stored as `bits`, or `None` when a bit names no role.
    pub fn from_bits(bits: u8) -> Option<Roles> {
        let known = Roles::of(&Role::ALL).0;
        (bits & !known == 0).then_some(Roles(bits))
    }
}

impl fmt::Debug for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Roles({self})")
    }
}

/// `ingest,read`; `none` for the empty set.
impl fmt::Display for Roles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.iter().map(Role::name).collect();
        f.write_str(&names.join(","))
    }
}

/// Why a role list did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a role (roles: ingest, read, admin, comma-separated)")]
pub struct UnknownRole(pub String);

/// Parses `ingest,read` (spaces around names allowed); at least one role.
impl FromStr for Roles {
    type Err = UnknownRole;

    fn from_str(text: &str) -> Result<Roles, UnknownRole> {
        let mut roles = Roles::NONE;
        for name in text.split(',').map(str::trim) {
            let role = Role::ALL
                .into_iter()
                .find(|r| r.name() == name)
                .ok_or_else(|| UnknownRole(name.to_owned()))?;
            roles = Roles(roles.0 | role.bit());
        }
        Ok(roles)
    }
}

/// What a valid, unrevoked key grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The tenant and project every request made with the key acts on.
    pub scope: Scope,
    /// What the key may do there.
    pub roles: Roles,
    /// The key's id within its tenant (to record its use, to revoke it).
    pub key_id: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_print_and_store() {
        let roles: Roles = "read, ingest".parse().unwrap();
        assert_eq!(roles, Roles::INGEST_READ);
        assert_eq!(roles.to_string(), "ingest,read");
        assert!(roles.contains(Role::Read) && !roles.contains(Role::Admin));
        assert_eq!(Roles::from_bits(roles.bits()), Some(roles));
        assert_eq!(Roles::from_bits(0b1000), None);
        assert_eq!(
            "read,root".parse::<Roles>(),
            Err(UnknownRole("root".into()))
        );
        assert!("".parse::<Roles>().is_err());
        assert_eq!(Roles::NONE.to_string(), "none");
    }
}
