//! Key layout of the embedded store: the one place that turns rows into
//! LSM keys. Each table is its own fjall keyspace, so keys carry no table tag.
//!
//! ```text
//! frames, stacks,     len(tenant):u8  tenant  id:16 BE
//! labelsets,
//! executables
//!
//! samples             len(tenant):u8  tenant  len(project):u8  project
//!                     hour:8  shard:2 BE  timestamp_ns:8  stack_id:16 BE  labelset_id:16 BE
//!
//! metrics             len(tenant):u8  tenant  len(project):u8  project
//!                     len(name):u8  name  hour:8  timestamp_ns:8  labelset_id:16 BE
//!
//! metric_names        len(tenant):u8  tenant  len(project):u8  project
//!                     hour:8  len(name):u8  name
//!
//! stored_bytes        len(tenant):u8  tenant  len(project):u8  project
//!                     hour:8                                  → bytes:8 BE
//!
//! rollups             len(tenant):u8  tenant  len(project):u8  project
//!                     resolution:u8  window:8  stack_id:16 BE  labelset_id:16 BE
//!                     period_ns:8 BE                          → count:8 BE
//!
//! rollup_hours        len(tenant):u8  tenant  len(project):u8  project
//!                     resolution:u8  window:8                 → version:8 BE
//! ```
//!
//! Why this shape:
//!
//! - **Tenant (and project) first**, as in DESIGN.md's ScyllaDB partition
//!   keys, so one tenant's rows are one contiguous key range.
//! - **Length-prefixed names.** A plain concatenation would let tenant `a`
//!   project `bp` and tenant `ab` project `p` share the bytes `abp`, and a
//!   scan of tenant `a` would wander into tenant `ab`'s rows. With the length
//!   first, one encoded name is never a prefix of another (equal length
//!   bytes mean equal lengths, so a prefix would be the whole name), hence
//!   the keys of two scopes first differ inside the name part and never
//!   interleave. Names are at most 63 bytes ([`Scope`] checks), so one byte
//!   holds the length.
//! - **Integers big-endian**, so byte order is numeric order and a time
//!   range is a key range. Signed integers (`hour`, `timestamp_ns`) have
//!   their sign bit flipped first: two's complement puts negative numbers
//!   above positive ones when read unsigned; flipping the top bit maps
//!   `i64::MIN..=i64::MAX` onto `0..=u64::MAX` in order.
//! - **hour, shard** mirror the ScyllaDB partition key
//!   `(tenant, project, hour, shard)`: there, the shard count grows with a
//!   tenant's sample rate to keep partitions under ~10 MB. The embedded store
//!   writes shard 0 only ([`EMBEDDED_SHARD`]), which keeps `(hour, ts)`
//!   monotone in `ts`, so a whole time range is one key range (see
//!   [`sample_range`]). The hour is `timestamp_ns.div_euclid(NANOS_PER_HOUR)`
//!   (rounds toward minus infinity, so -1 ns is in hour -1), kept as an `i64`
//!   for the same encoding as the timestamp.
//! - **stack, labels last**, so the same (time, stack, labels) is the same
//!   key and writing it again replaces its value (idempotent replay).
//! - **Metrics: the name before the time**, as in the ScyllaDB partition
//!   key `(tenant, project, name, hour)`: a query reads one metric's
//!   series over a range, which is one key range ([`metric_range`]); the
//!   names are length-prefixed like tenants, so one name's keys never run
//!   into another's. `metric_names` keys put the hour first so that the
//!   names of a range of hours are one key range too. Metric names are at
//!   most 128 bytes (`kiln_model::check_metric_name`), so one byte holds
//!   the length.
//! - **Rollups: the resolution, then the window's first hour** after the
//!   scope ([`rollup_prefix`]), so one window's rollup is one key range
//!   and so are a resolution's windows over a range of hours;
//!   `rollup_hours` (one row per rolled window, the version it was made
//!   from) is laid out the same way.

use kiln_model::{LabelSetId, MAX_METRIC_NAME_LEN, StackId};

use crate::error::DecodeError;
use crate::profile::{StoredSample, hour_of};
use crate::rollup::{Resolution, RollupRow};
use crate::scope::{MAX_NAME_LEN, Scope};

/// The shard every sample of the embedded store is written to.
pub(crate) const EMBEDDED_SHARD: u16 = 0;

/// Bytes of a sample key after the scope prefix: hour, shard, timestamp,
/// stack, labels.
const SAMPLE_TAIL_LEN: usize = 8 + 2 + 8 + 16 + 16;

/// The key of a dictionary row (frames, stacks, labelsets, executables).
/// `tenant` must be valid (checked by the caller).
pub(crate) fn dict_key(tenant: &str, id: [u8; 16]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + tenant.len() + 16);
    push_name(&mut key, tenant);
    key.extend_from_slice(&id);
    key
}

/// The prefix every sample key of `scope` starts with.
pub(crate) fn scope_prefix(scope: &Scope) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + scope.tenant().len() + scope.project().len());
    push_name(&mut key, scope.tenant());
    push_name(&mut key, scope.project());
    key
}

/// The prefix every key of `tenant` (valid, checked by the caller) starts
/// with, in the tables keyed by scope: all its projects.
pub(crate) fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + tenant.len());
    push_name(&mut key, tenant);
    key
}

/// The `stored_bytes` key of one (scope, hour): the hour right after the
/// scope, so a scope's hours before a bound are one key range
/// ([`hour_bound`]).
pub(crate) fn usage_key(scope_prefix: &[u8], hour: i64) -> Vec<u8> {
    hour_bound(scope_prefix, hour)
}

/// The first key after every key that starts with `prefix`, or `None`
/// when there is none (a prefix of 0xff bytes only): the exclusive end
/// of a prefix scan, or where a skip scan goes on after one prefix.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The metric prefix (scope, name) a `metrics` key under `scope_prefix`
/// starts with, or `None` when the key is too short to hold one.
pub(crate) fn metric_prefix_of(key: &[u8], scope_prefix_len: usize) -> Option<&[u8]> {
    let len = *key.get(scope_prefix_len)? as usize;
    key.get(..scope_prefix_len + 1 + len)
        .filter(|_| len > 0 && key.len() >= scope_prefix_len + 1 + len + METRIC_TAIL_LEN)
}

/// The key of one sample row.
pub(crate) fn sample_key(prefix: &[u8], sample: &StoredSample) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + SAMPLE_TAIL_LEN);
    push_time(&mut key, prefix, sample.timestamp_ns);
    key.extend_from_slice(&sample.stack.to_be_bytes());
    key.extend_from_slice(&sample.labels.to_be_bytes());
    key
}

/// The key range `start..end` holding exactly the scope's samples with
/// `from_ns <= timestamp_ns < to_ns`, or `None` when that is empty.
///
/// Exact because the embedded store writes one shard only: the end bound is
/// the key prefix of a row at `to_ns`, which sorts before every row at
/// `to_ns` and after every row before it.
pub(crate) fn sample_range(prefix: &[u8], from_ns: i64, to_ns: i64) -> Option<(Vec<u8>, Vec<u8>)> {
    if from_ns >= to_ns {
        return None;
    }
    let mut start = Vec::with_capacity(prefix.len() + 18);
    push_time(&mut start, prefix, from_ns);
    let mut end = Vec::with_capacity(prefix.len() + 18);
    push_time(&mut end, prefix, to_ns);
    Some((start, end))
}

/// A sample key's time, stack and labels; `prefix_len` is the length of its
/// scope prefix.
pub(crate) fn decode_sample_key(
    key: &[u8],
    prefix_len: usize,
) -> Result<(i64, StackId, LabelSetId), DecodeError> {
    let tail = key
        .get(prefix_len..)
        .filter(|tail| tail.len() == SAMPLE_TAIL_LEN)
        .ok_or(DecodeError::KeyLength {
            len: key.len(),
            expected: prefix_len + SAMPLE_TAIL_LEN,
        })?;
    // The lengths are checked above, so these splits cannot fail.
    let (_hour_and_shard, rest) = tail.split_at(10);
    let (ts, rest) = rest.split_at(8);
    let (stack, labels) = rest.split_at(16);
    let ts = from_ordered(ts.try_into().unwrap_or_default());
    let stack = StackId::from_be_bytes(stack.try_into().unwrap_or_default());
    let labels = LabelSetId::from_be_bytes(labels.try_into().unwrap_or_default());
    Ok((ts, stack, labels))
}

/// The smallest key of `hour` under `prefix`: a scope prefix of the
/// samples table or a metric prefix of the metrics table, the two layouts
/// whose hour follows their prefix. Every key of an hour at or after
/// `hour` sorts at or after it, every key of an earlier hour before it, so
/// a seek to it finds the first hour holding rows (see
/// `EmbeddedProfileStore::hours_with_rows`).
pub(crate) fn hour_bound(prefix: &[u8], hour: i64) -> Vec<u8> {
    [prefix, &ordered(hour)].concat()
}

/// The hour of a samples or metrics key under `prefix` (of `prefix_len`
/// bytes): the 8 bytes after it.
pub(crate) fn decode_hour(key: &[u8], prefix_len: usize) -> Result<i64, DecodeError> {
    key.get(prefix_len..prefix_len + 8)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map(from_ordered)
        .ok_or(DecodeError::KeyLength {
            len: key.len(),
            expected: prefix_len + 8,
        })
}

/// Bytes of a rollup key after its [`rollup_prefix`]: window, stack,
/// labels, period.
const ROLLUP_TAIL_LEN: usize = 8 + 16 + 16 + 8;

/// The prefix of the `rollups` and `rollup_hours` keys of one resolution
/// of a scope; windows follow it as hours follow a scope's prefix in
/// `samples` ([`hour_bound`] applies).
pub(crate) fn rollup_prefix(scope_prefix: &[u8], resolution: Resolution) -> Vec<u8> {
    [scope_prefix, &[resolution.code()]].concat()
}

/// The key of one rollup row of the window starting at hour `window`,
/// under a [`rollup_prefix`].
pub(crate) fn rollup_key(prefix: &[u8], window: i64, row: &RollupRow) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + ROLLUP_TAIL_LEN);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&ordered(window));
    key.extend_from_slice(&row.stack.to_be_bytes());
    key.extend_from_slice(&row.labels.to_be_bytes());
    key.extend_from_slice(&row.period_ns.to_be_bytes());
    key
}

/// A rollup key's stack, labels and period; `prefix_len` is the length of
/// its [`rollup_prefix`].
pub(crate) fn decode_rollup_key(
    key: &[u8],
    prefix_len: usize,
) -> Result<(StackId, LabelSetId, u64), DecodeError> {
    let tail = key
        .get(prefix_len..)
        .filter(|tail| tail.len() == ROLLUP_TAIL_LEN)
        .ok_or(DecodeError::KeyLength {
            len: key.len(),
            expected: prefix_len + ROLLUP_TAIL_LEN,
        })?;
    // The length is checked above, so these splits cannot fail.
    let (stack, rest) = tail[8..].split_at(16);
    let (labels, period) = rest.split_at(16);
    Ok((
        StackId::from_be_bytes(stack.try_into().unwrap_or_default()),
        LabelSetId::from_be_bytes(labels.try_into().unwrap_or_default()),
        u64::from_be_bytes(period.try_into().unwrap_or_default()),
    ))
}

/// Bytes of a metric key after its scope and name: hour, timestamp, labels.
const METRIC_TAIL_LEN: usize = 8 + 8 + 16;

/// The prefix every key of metric `name` (valid, checked by the caller)
/// in the scope of `scope_prefix` starts with.
pub(crate) fn metric_prefix(scope_prefix: &[u8], name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(scope_prefix.len() + 1 + name.len());
    key.extend_from_slice(scope_prefix);
    push_metric_name(&mut key, name);
    key
}

/// The key of one metric point under its metric's prefix.
pub(crate) fn metric_key(prefix: &[u8], timestamp_ns: i64, labels: LabelSetId) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + METRIC_TAIL_LEN);
    push_metric_time(&mut key, prefix, timestamp_ns);
    key.extend_from_slice(&labels.to_be_bytes());
    key
}

/// The key range holding exactly the points under `prefix` with `from_ns
/// <= timestamp_ns < to_ns`, or `None` when that is empty (exact as
/// [`sample_range`] is: the hour grows with the timestamp).
pub(crate) fn metric_range(prefix: &[u8], from_ns: i64, to_ns: i64) -> Option<(Vec<u8>, Vec<u8>)> {
    if from_ns >= to_ns {
        return None;
    }
    let mut start = Vec::with_capacity(prefix.len() + 16);
    push_metric_time(&mut start, prefix, from_ns);
    let mut end = Vec::with_capacity(prefix.len() + 16);
    push_metric_time(&mut end, prefix, to_ns);
    Some((start, end))
}

/// A metric key's time and labels; `prefix_len` is the length of its
/// metric prefix.
pub(crate) fn decode_metric_key(
    key: &[u8],
    prefix_len: usize,
) -> Result<(i64, LabelSetId), DecodeError> {
    let tail = key
        .get(prefix_len..)
        .filter(|tail| tail.len() == METRIC_TAIL_LEN)
        .ok_or(DecodeError::KeyLength {
            len: key.len(),
            expected: prefix_len + METRIC_TAIL_LEN,
        })?;
    // The length is checked above, so these splits cannot fail.
    let (ts, labels) = tail[8..].split_at(8);
    let ts = from_ordered(ts.try_into().unwrap_or_default());
    let labels = LabelSetId::from_be_bytes(labels.try_into().unwrap_or_default());
    Ok((ts, labels))
}

/// The `metric_names` key saying that metric `name` has points in `hour`.
pub(crate) fn metric_name_key(scope_prefix: &[u8], hour: i64, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(scope_prefix.len() + 9 + name.len());
    key.extend_from_slice(scope_prefix);
    key.extend_from_slice(&ordered(hour));
    push_metric_name(&mut key, name);
    key
}

/// The `metric_names` key range of hours `first..=last`.
pub(crate) fn metric_name_range(scope_prefix: &[u8], first: i64, last: i64) -> (Vec<u8>, Vec<u8>) {
    let bound = |hour: i64| [scope_prefix, &ordered(hour)].concat();
    // Hours are timestamps / 1 h, far from i64::MAX: `last + 1` cannot
    // overflow.
    (bound(first), bound(last + 1))
}

/// The metric name of a `metric_names` key.
pub(crate) fn decode_metric_name_key(
    key: &[u8],
    scope_prefix_len: usize,
) -> Result<String, DecodeError> {
    let rest = key.get(scope_prefix_len + 8..).unwrap_or_default();
    let expected = scope_prefix_len + 9 + rest.first().map_or(0, |&n| n as usize);
    let name = match rest.split_first() {
        Some((&len, name)) if name.len() == len as usize => name,
        _ => {
            return Err(DecodeError::KeyLength {
                len: key.len(),
                expected,
            });
        }
    };
    String::from_utf8(name.to_vec()).map_err(|_| DecodeError::NotUtf8 {
        field: "metric name",
    })
}

fn push_metric_name(key: &mut Vec<u8>, name: &str) {
    debug_assert!(!name.is_empty() && name.len() <= MAX_METRIC_NAME_LEN);
    key.push(name.len() as u8);
    key.extend_from_slice(name.as_bytes());
}

/// Metric prefix, hour and timestamp: everything before the labels.
fn push_metric_time(key: &mut Vec<u8>, prefix: &[u8], timestamp_ns: i64) {
    key.extend_from_slice(prefix);
    key.extend_from_slice(&ordered(hour_of(timestamp_ns)));
    key.extend_from_slice(&ordered(timestamp_ns));
}

fn push_name(key: &mut Vec<u8>, name: &str) {
    debug_assert!(!name.is_empty() && name.len() <= MAX_NAME_LEN);
    key.push(name.len() as u8);
    key.extend_from_slice(name.as_bytes());
}

/// Scope prefix, hour, shard and timestamp: everything before the ids.
fn push_time(key: &mut Vec<u8>, prefix: &[u8], timestamp_ns: i64) {
    key.extend_from_slice(prefix);
    key.extend_from_slice(&ordered(hour_of(timestamp_ns)));
    key.extend_from_slice(&EMBEDDED_SHARD.to_be_bytes());
    key.extend_from_slice(&ordered(timestamp_ns));
}

/// Big-endian with the sign bit flipped: byte order equals numeric order.
fn ordered(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn from_ordered(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_model::NANOS_PER_HOUR;
    use proptest::prelude::*;

    const NAME: &str = "[a-z0-9][a-z0-9_-]{0,62}";

    fn sample(timestamp_ns: i64, stack: u128, labels: u128) -> StoredSample {
        StoredSample {
            timestamp_ns,
            stack: StackId(stack),
            labels: LabelSetId(labels),
            count: 1,
            period_ns: 1,
        }
    }

    fn scope(t: &str, p: &str) -> Vec<u8> {
        scope_prefix(&Scope::new(t, p).unwrap())
    }

    /// The concatenation trap the length prefixes exist for.
    #[test]
    fn adjacent_names_do_not_collide() {
        assert_ne!(scope("a", "bp"), scope("ab", "p"));
        assert!(!scope("ab", "p").starts_with(&scope("a", "b")));
        assert!(!dict_key("ab", [0; 16]).starts_with(&dict_key("a", [0; 16])[..2]));
    }

    /// Negative timestamps sort before positive ones, hour edges included.
    #[test]
    fn timestamps_sort_numerically() {
        let prefix = scope("t", "p");
        let times = [
            i64::MIN,
            i64::MIN + 1,
            -NANOS_PER_HOUR - 1,
            -NANOS_PER_HOUR,
            -1,
            0,
            1,
            NANOS_PER_HOUR - 1,
            NANOS_PER_HOUR,
            i64::MAX - 1,
            i64::MAX,
        ];
        let keys: Vec<_> = times
            .iter()
            .map(|&t| sample_key(&prefix, &sample(t, u128::MAX, u128::MAX)))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(hour_of(-1), -1);
        assert_eq!(hour_of(-NANOS_PER_HOUR), -1);
        assert_eq!(hour_of(NANOS_PER_HOUR - 1), 0);
    }

    proptest! {
        /// Keys of two different scopes never interleave: every key of one
        /// sorts on the same side of every key of the other.
        #[test]
        fn scopes_never_interleave(
            (t1, p1, t2, p2) in (NAME, NAME, NAME, NAME),
            a in any::<(i64, u128, u128)>(),
            b in any::<(i64, u128, u128)>(),
            c in any::<(i64, u128, u128)>(),
        ) {
            let (s1, s2) = (scope(&t1, &p1), scope(&t2, &p2));
            prop_assume!(s1 != s2);
            let key = |s: &[u8], (ts, st, l): (i64, u128, u128)| sample_key(s, &sample(ts, st, l));
            let side = key(&s1, a).cmp(&key(&s2, b));
            prop_assert_eq!(key(&s1, c).cmp(&key(&s2, a)), side);
            prop_assert_eq!(key(&s1, b).cmp(&key(&s2, c)), side);
            prop_assert!(!s1.starts_with(&s2) && !s2.starts_with(&s1));
            // And a scan of one scope never covers a key of the other.
            let (start, end) = sample_range(&s1, i64::MIN, i64::MAX).unwrap();
            let other = key(&s2, a);
            prop_assert!(other < start || other >= end);
        }

        #[test]
        fn dict_keys_of_tenants_never_interleave(
            (t1, t2) in (NAME, NAME),
            (a, b) in any::<(u128, u128)>(),
        ) {
            prop_assume!(t1 != t2);
            let side = dict_key(&t1, a.to_be_bytes()).cmp(&dict_key(&t2, b.to_be_bytes()));
            prop_assert_eq!(dict_key(&t1, b.to_be_bytes()).cmp(&dict_key(&t2, a.to_be_bytes())), side);
        }

        #[test]
        fn key_order_is_timestamp_order(a: i64, b: i64, ids in any::<[u128; 4]>()) {
            let prefix = scope("t", "p");
            let ka = sample_key(&prefix, &sample(a, ids[0], ids[1]));
            let kb = sample_key(&prefix, &sample(b, ids[2], ids[3]));
            if a != b {
                prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            }
        }

        /// The range holds a row exactly when from <= ts < to.
        #[test]
        fn range_is_exact(ts: i64, from: i64, to: i64, ids in any::<[u128; 2]>()) {
            let prefix = scope("t", "p");
            let key = sample_key(&prefix, &sample(ts, ids[0], ids[1]));
            let inside = match sample_range(&prefix, from, to) {
                Some((start, end)) => start <= key && key < end,
                None => false,
            };
            prop_assert_eq!(inside, from <= ts && ts < to);
        }

        #[test]
        fn sample_keys_decode(ts: i64, ids in any::<[u128; 2]>(), t in NAME, p in NAME) {
            let prefix = scope(&t, &p);
            let key = sample_key(&prefix, &sample(ts, ids[0], ids[1]));
            prop_assert_eq!(
                decode_sample_key(&key, prefix.len()).unwrap(),
                (ts, StackId(ids[0]), LabelSetId(ids[1]))
            );
        }
    }

    proptest! {
        /// A metric's range holds a point exactly when from <= ts < to,
        /// and never a point of another metric, even one whose name
        /// starts with this one's.
        #[test]
        fn metric_ranges_are_exact_and_per_name(ts: i64, from: i64, to: i64, labels: u128) {
            let scope = scope("t", "p");
            let (gpu, gpu_x) = (metric_prefix(&scope, "gpu"), metric_prefix(&scope, "gpu.x"));
            let key = metric_key(&gpu, ts, LabelSetId(labels));
            let other = metric_key(&gpu_x, ts, LabelSetId(labels));
            let (inside, other_inside) = match metric_range(&gpu, from, to) {
                Some((start, end)) => (
                    start <= key && key < end,
                    start <= other && other < end,
                ),
                None => (false, false),
            };
            prop_assert_eq!(inside, from <= ts && ts < to);
            prop_assert!(!other_inside);
            prop_assert_eq!(
                decode_metric_key(&key, gpu.len()).unwrap(),
                (ts, LabelSetId(labels))
            );
        }

        #[test]
        fn metric_name_keys_decode_and_sort_by_hour(
            (a, b) in (-1_000_000i64..1_000_000, -1_000_000i64..1_000_000),
            name in "[a-z0-9_.]{1,128}",
        ) {
            let scope = scope("t", "p");
            let ka = metric_name_key(&scope, a, &name);
            prop_assert_eq!(decode_metric_name_key(&ka, scope.len()).unwrap(), name.clone());
            let kb = metric_name_key(&scope, b, "x");
            if a != b {
                prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            }
            let (start, end) = metric_name_range(&scope, a, a);
            prop_assert!(start <= ka && ka < end);
        }
    }

    proptest! {
        /// A row's hour bound sorts at or before the row and after every
        /// row of an earlier hour, and the hour decodes from the row's key,
        /// for samples and metric points alike.
        #[test]
        fn hour_bounds_split_rows_by_hour(ts: i64, other: i64, ids in any::<[u128; 2]>()) {
            let scope = scope("t", "p");
            let key = sample_key(&scope, &sample(ts, ids[0], ids[1]));
            let hour = hour_of(ts);
            prop_assert_eq!(decode_hour(&key, scope.len()).unwrap(), hour);
            prop_assert!(hour_bound(&scope, hour) <= key);
            let other_key = sample_key(&scope, &sample(other, ids[1], ids[0]));
            prop_assert_eq!(hour_bound(&scope, hour) <= other_key, hour_of(other) >= hour);

            let metric = metric_prefix(&scope, "m");
            let key = metric_key(&metric, ts, LabelSetId(ids[0]));
            prop_assert_eq!(decode_hour(&key, metric.len()).unwrap(), hour);
            prop_assert!(hour_bound(&metric, hour) <= key);
            let other_key = metric_key(&metric, other, LabelSetId(ids[1]));
            prop_assert_eq!(hour_bound(&metric, hour) <= other_key, hour_of(other) >= hour);
        }
    }

    #[test]
    fn short_keys_have_no_hour() {
        let scope = scope("t", "p");
        assert!(decode_hour(&scope, scope.len()).is_err());
        assert!(decode_hour(&hour_bound(&scope, 3)[..scope.len() + 7], scope.len()).is_err());
    }

    #[test]
    fn damaged_metric_keys_are_refused() {
        let scope = scope("t", "p");
        let prefix = metric_prefix(&scope, "m");
        let key = metric_key(&prefix, 5, LabelSetId(2));
        assert!(decode_metric_key(&key[..key.len() - 1], prefix.len()).is_err());
        let name = metric_name_key(&scope, 3, "abc");
        assert!(decode_metric_name_key(&name[..name.len() - 1], scope.len()).is_err());
        assert!(decode_metric_name_key(&[name.as_slice(), b"d"].concat(), scope.len()).is_err());
        assert!(decode_metric_name_key(&[], scope.len()).is_err());
    }

    #[test]
    fn short_and_long_keys_are_refused() {
        let prefix = scope("t", "p");
        let key = sample_key(&prefix, &sample(5, 1, 2));
        for bad in [
            &key[..key.len() - 1],
            &[key.as_slice(), &[0]].concat(),
            &key[..1],
        ] {
            assert!(matches!(
                decode_sample_key(bad, prefix.len()),
                Err(DecodeError::KeyLength { .. })
            ));
        }
        assert!(decode_sample_key(&[], 10).is_err());
    }
}
