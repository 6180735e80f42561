//! Hash maps and sets keyed by our own ids, hashed with foldhash.

use std::collections::{HashMap, HashSet};

/// A `HashMap` with foldhash instead of SipHash. A million-node query
/// looks up ids and indices millions of times, and ingest checks every
/// batch's ids; their keys are ids we computed (content hashes) or our own
/// indices, not strings an attacker picks to collide, so the faster hash
/// is safe here.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with foldhash, as [`FastMap`].
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;
