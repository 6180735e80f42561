//! `scylla://` URLs: the contact points, keyspace, credentials and the
//! options `migrate` applies.

use std::time::Duration;

use crate::error::StoreError;

/// The CQL native protocol's port.
const DEFAULT_PORT: u16 = 9042;
/// Longest keyspace name ScyllaDB accepts.
const MAX_KEYSPACE_LEN: usize = 48;

/// What a `scylla://[user:password@]host[:port][,host[:port]…]/keyspace
/// [?replication_factor=N&sample_ttl_days=N&sample_shards=N]` URL says.
///
/// The options matter to `migrate` only: the replication factor of a new
/// keyspace (default 3), the default TTL of sample rows (default 30 days)
/// and the number of partitions an hour of a project's samples is split
/// into (default 16; fixed at the keyspace's first migration).
#[derive(Clone, PartialEq, Eq)]
pub struct ScyllaUrl {
    /// Contact points, `host:port`; the driver discovers the other nodes.
    pub nodes: Vec<String>,
    /// The keyspace: `[a-z][a-z0-9_]{0,47}`.
    pub keyspace: String,
    /// User and password for PasswordAuthenticator, if given.
    pub credentials: Option<(String, String)>,
    /// Replicas per datacenter of a keyspace `migrate` creates.
    pub replication_factor: u16,
    /// Default TTL of sample rows.
    pub sample_ttl: Duration,
    /// Partitions per project and hour, for a keyspace's first migration.
    pub sample_shards: i16,
}

impl ScyllaUrl {
    /// Parses `url`; the error names what is wrong (with any password
    /// hidden in the URL it shows).
    pub fn parse(url: &str) -> Result<ScyllaUrl, StoreError> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: redact(url),
            source: reason.into(),
        };
        let rest = url.strip_prefix("scylla://").ok_or_else(|| {
            invalid("expected scylla://host[:port][,host[:port]…]/keyspace".into())
        })?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, keyspace) = rest
            .split_once('/')
            .ok_or_else(|| invalid("it names no keyspace (scylla://host:port/keyspace)".into()))?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let credentials = match userinfo {
            None => None,
            Some(userinfo) => {
                let (user, password) = userinfo
                    .split_once(':')
                    .ok_or_else(|| invalid("credentials must be user:password@".into()))?;
                Some((
                    decode(user).map_err(&invalid)?,
                    decode(password).map_err(&invalid)?,
                ))
            }
        };
        let nodes = hosts
            .split(',')
            .map(node)
            .collect::<Result<Vec<_>, _>>()
            .map_err(&invalid)?;
        validate_keyspace(keyspace).map_err(&invalid)?;

        let mut parsed = ScyllaUrl {
            nodes,
            keyspace: keyspace.to_owned(),
            credentials,
            replication_factor: 3,
            sample_ttl: Duration::from_secs(30 * 86_400),
            sample_shards: 16,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let number = |max: u64| -> Result<u64, StoreError> {
                match value.parse::<u64>() {
                    Ok(n) if (1..=max).contains(&n) => Ok(n),
                    _ => Err(invalid(format!("{name}={value:?}: expected 1 to {max}"))),
                }
            };
            match name {
                "replication_factor" => parsed.replication_factor = number(32)? as u16,
                // TTLs are 32-bit seconds in CQL, at most 20 years.
                "sample_ttl_days" => {
                    parsed.sample_ttl = Duration::from_secs(number(7_300)? * 86_400)
                }
                "sample_shards" => parsed.sample_shards = number(4_096)? as i16,
                other => {
                    return Err(invalid(format!(
                        "unknown option {other:?}; the options are replication_factor, \
                         sample_ttl_days and sample_shards"
                    )));
                }
            }
        }
        Ok(parsed)
    }

    /// The URL with its password hidden, for logs and `Debug`.
    pub fn shown(&self) -> String {
        let user = match &self.credentials {
            Some((user, _)) => format!("{user}:***@"),
            None => String::new(),
        };
        format!("scylla://{user}{}/{}", self.nodes.join(","), self.keyspace)
    }
}

impl std::fmt::Debug for ScyllaUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// `host[:port]` → `host:port`; IPv6 in brackets (`[::1]:9042`).
fn node(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("an empty host".into());
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (text, None),
    };
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return Err(format!("host {text:?} is not a host name or address"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("port {port:?} of {text:?} is not a port number"))?,
    };
    Ok(format!("{host}:{port}"))
}

/// Keyspace names are formatted into `CREATE KEYSPACE`, so only plain
/// lowercase identifiers pass.
fn validate_keyspace(keyspace: &str) -> Result<(), String> {
    let mut chars = keyspace.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !first_ok
        || keyspace.len() > MAX_KEYSPACE_LEN
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!(
            "keyspace {keyspace:?} is not [a-z][a-z0-9_]{{0,{}}}",
            MAX_KEYSPACE_LEN - 1
        ));
    }
    Ok(())
}

/// Percent-decodes a user or password (`%40` for '@' and so on).
fn decode(text: &str) -> Result<String, String> {
    ::url::form_urlencoded::parse(format!("x={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| format!("cannot decode {text:?}"))
}

/// `url` with the password between "user:" and '@' replaced by `***`.
fn redact(url: &str) -> String {
    let Some(rest) = url.strip_prefix("scylla://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, _)) => match userinfo.split_once(':') {
            Some((user, _)) => {
                let at = userinfo.len();
                format!("scylla://{user}:***{}", &rest[at..])
            }
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        match ScyllaUrl::parse(url) {
            Err(StoreError::InvalidUrl { source, .. }) => source.to_string(),
            other => panic!("{url} was accepted: {other:?}"),
        }
    }

    #[test]
    fn a_single_node_with_defaults() {
        let url = ScyllaUrl::parse("scylla://127.0.0.1:9042/kiln").unwrap();
        assert_eq!(url.nodes, ["127.0.0.1:9042"]);
        assert_eq!(url.keyspace, "kiln");
        assert_eq!(url.credentials, None);
        assert_eq!(url.replication_factor, 3);
        assert_eq!(url.sample_ttl, Duration::from_secs(30 * 86_400));
        assert_eq!(url.sample_shards, 16);
    }

    #[test]
    fn several_nodes_credentials_and_options() {
        let url = ScyllaUrl::parse(
            "scylla://kiln:p%40ss@db1,db2:19042,[::1]:9043/prod_2\
             ?replication_factor=1&sample_ttl_days=7&sample_shards=64",
        )
        .unwrap();
        assert_eq!(url.nodes, ["db1:9042", "db2:19042", "[::1]:9043"]);
        assert_eq!(url.keyspace, "prod_2");
        assert_eq!(url.credentials, Some(("kiln".into(), "p@ss".into())));
        assert_eq!(url.replication_factor, 1);
        assert_eq!(url.sample_ttl, Duration::from_secs(7 * 86_400));
        assert_eq!(url.sample_shards, 64);
        assert_eq!(
            url.shown(),
            "scylla://kiln:***@db1:9042,db2:19042,[::1]:9043/prod_2"
        );
    }

    #[test]
    fn bad_urls_are_refused_naming_the_problem() {
        assert!(reason("postgres://h/k").contains("expected scylla://"));
        assert!(reason("scylla://h").contains("no keyspace"));
        assert!(reason("scylla://h/Kiln").contains("keyspace \"Kiln\""));
        assert!(reason("scylla://h/k;drop").contains("is not [a-z]"));
        assert!(reason("scylla://h/").contains("keyspace \"\""));
        assert!(reason(&format!("scylla://h/{}", "k".repeat(49))).contains("is not"));
        assert!(reason("scylla://h:99999/k").contains("not a port number"));
        assert!(reason("scylla://h,,g/k").contains("empty host"));
        assert!(reason("scylla://u@h/k").contains("user:password@"));
        assert!(reason("scylla://h/k?sample_shards=0").contains("expected 1 to 4096"));
        assert!(reason("scylla://h/k?consistency=one").contains("unknown option"));
    }

    /// Guards that a password never reaches an error message.
    #[test]
    fn errors_hide_the_password() {
        let err = ScyllaUrl::parse("scylla://u:secret@h/BAD").unwrap_err();
        let StoreError::InvalidUrl { url, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(url, "scylla://u:***@h/BAD");
        assert!(!format!("{err:?}").contains("secret"));
    }
}
