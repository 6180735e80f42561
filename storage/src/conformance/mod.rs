//! The conformance suites every backend runs: the embedded ones in this
//! crate's tests, ScyllaDB, PostgreSQL and S3 in theirs. Behind the
//! `conformance` feature. [`profile_store`], [`object_store`] and
//! [`metadata_store`] (which takes the profile store of the same database
//! too, as executables are shared between the two).
//!
//! Each suite runs many named checks against one store and panics, after
//! running them all, with a message listing every check that failed and why.
//! Every run uses fresh tenant names and key prefixes (derived from the
//! clock and the process id), so runs and checks never see each other's
//! data, and a suite can run against a long-lived shared server.
//!
//! ```
//! use kiln_storage::{EmbeddedProfileStore, LocalObjectStore, conformance};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), kiln_storage::StoreError> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = EmbeddedProfileStore::open(&dir.path().join("profiles"))?;
//! conformance::profile_store(&store).await;
//! let objects = LocalObjectStore::open(&dir.path().join("objects"))?;
//! conformance::object_store(&objects).await;
//! # Ok(())
//! # }
//! ```

mod metadata;
mod metrics;
mod object;
mod profile;
mod retention;
mod rollups;
mod sealing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use metadata::metadata_store;
pub use object::object_store;
pub use profile::profile_store;
pub use sealing::sealed_store;

use crate::error::StoreError;
use crate::object_key::ObjectKey;
use crate::scope::Scope;

/// Why one check failed.
struct Failure(String);

/// The outcome of one check.
type Check = Result<(), Failure>;

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let mut message = format!("store error: {e}");
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        Failure(message)
    }
}

/// Fails the check with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::conformance::Failure(format!($($msg)+)));
        }
    };
}

/// Fails the check unless the two values are equal, showing both.
macro_rules! ensure_eq {
    ($got:expr, $expected:expr, $($msg:tt)+) => {
        match (&$got, &$expected) {
            (got, expected) => {
                if got != expected {
                    return Err($crate::conformance::Failure(format!(
                        "{}\n      got:      {:?}\n      expected: {:?}",
                        format_args!($($msg)+),
                        got,
                        expected
                    )));
                }
            }
        }
    };
}

/// Runs each named check with its own [`Names`], then panics listing the
/// failures, if any.
macro_rules! run_checks {
    ($suite:literal, $store:expr, [$($check:ident),* $(,)?]) => {{
        let run = $crate::conformance::RunId::new();
        let mut failures: Vec<String> = Vec::new();
        let mut count = 0u32;
        $(
            count += 1;
            tracing::debug!(check = stringify!($check), "{} conformance", $suite);
            if let Err(failure) = $check($store, &run.names(count)).await {
                failures.push(format!("check `{}` failed: {}", stringify!($check), failure.0));
            }
        )*
        if !failures.is_empty() {
            panic!(
                "{} conformance: {} of {} checks failed\n  {}",
                $suite,
                failures.len(),
                count,
                failures.join("\n  ")
            );
        }
    }};
}

use {ensure, ensure_eq, run_checks};

/// Distinguishes one run of a suite from every other.
struct RunId(String);

impl RunId {
    fn new() -> Self {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        // Mix clock, process and a counter so that runs started in the same
        // nanosecond, in one process or several, still differ.
        let mut x = nanos
            ^ (u64::from(std::process::id()) << 40)
            ^ RUNS
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 29;
        RunId(base36(x % 36u64.pow(9), 9))
    }

    /// The names of check number `check` of this run.
    fn names(&self, check: u32) -> Names {
        Names {
            base: format!("k{}{check:02}", self.0),
        }
    }
}

/// Tenant names, scopes and keys that belong to one check of one run.
struct Names {
    /// `[a-z0-9]{12}`-ish, unique per check and run.
    base: String,
}

impl Names {
    /// A tenant name ending in `suffix` (`a`, `ab`, …): the prefix relations
    /// between suffixes carry over to the names.
    fn tenant(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.base)
    }

    fn scope(&self, tenant: &str, project: &str) -> Scope {
        Scope::new(self.tenant(tenant), project).expect("conformance names are valid")
    }

    /// The prefix of this check's object keys, ending in '/'.
    fn key_prefix(&self) -> String {
        format!("conformance/{}/", self.base)
    }

    fn key(&self, rest: &str) -> ObjectKey {
        ObjectKey::new(&format!("{}{rest}", self.key_prefix())).expect("conformance keys are valid")
    }

    /// A number unique to this check, for ids that must not collide with
    /// other runs' (global objects).
    fn unique(&self) -> u128 {
        self.base.bytes().fold(0u128, |h, b| {
            h.wrapping_mul(0x100_0000_01b3).wrapping_add(u128::from(b))
        })
    }
}

fn base36(mut n: u64, digits: usize) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = vec![b'0'; digits];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_valid_and_distinct() {
        let (a, b) = (RunId::new(), RunId::new());
        assert_ne!(a.0, b.0);
        let names = a.names(99);
        Scope::new(names.tenant("ab"), "p").unwrap();
        assert!(names.tenant("ab").starts_with(&names.tenant("a")));
        assert_ne!(a.names(1).unique(), a.names(2).unique());
    }
}
