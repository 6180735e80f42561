//! `SealedStore`: a profile store whose settled hours of samples live as
//! segments (`crate::segment`) in the object store, not as rows.
//!
//! Rows are the right shape while an hour is being written (any batch
//! may land in it, a replay must replace its rows) and the wrong one
//! after: about 330 bytes a sample row on PostgreSQL, against a few
//! bytes in a segment. So the store takes writes as rows, and once an
//! hour has settled the rollup job seals it ([`SealedStore::seal_hour`]):
//! the hour's rows and segments are read, written back as one segment,
//! and the rows and older segments read are deleted. Reads merge the two
//! forms, so a query sees every sample whichever form it is in.
//!
//! Every other call passes to the row store unchanged: dictionaries,
//! metrics, rollups, usage (what [`ProfileStore::stored_bytes`] counts is
//! what was written, so sealing changes no hour's version and no rollup
//! goes stale).
//!
//! # Why no lock is needed
//!
//! Several query nodes may seal the same hour at once, and ingest may
//! write to it meanwhile (a late batch, a replay). Three rules keep every
//! sample readable:
//!
//! - **A segment is written before anything it holds is deleted**, and a
//!   sealer deletes only what it read and put in its segment: rows by
//!   key (a row with the same key written since is a replay of the same
//!   row) and segments by name.
//! - **Segments are named by their content's digest**, never overwritten:
//!   two sealers that read different things write two segments, and
//!   neither deletes what the other wrote. Reads keep one row per key, so
//!   overlapping segments count nothing twice; the next pass merges them.
//! - **Reads look at rows before segments**, and list segments again when
//!   one listed is gone: whatever a concurrent seal moved, the read finds
//!   it on one side or the other.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kiln_model::{
    Executable, FileId, FrameId, LabelSet, LabelSetEntry, LabelSetId, MetricPoint, NANOS_PER_HOUR,
    StackEntry, StackId,
};
use sha2::{Digest as _, Sha256};

use crate::error::StoreError;
use crate::object::ObjectStore;
use crate::object_key::ObjectKey;
use crate::profile::{
    DeletedHours, ProfileStore, StoredFrame, StoredMetricPoint, StoredSample, hour_of,
};
use crate::rollup::{HourVersion, Resolution, RollupRow};
use crate::scope::Scope;
use crate::segment;

/// How long before a seal's scan a row must have been written for the
/// seal to delete it where the row store deletes by write time
/// (ScyllaDB, see [`ProfileStore::delete_sealed_samples`]): a write still
/// in flight when the scan began, or from a client whose clock runs
/// behind, stays a row, and the next pass seals it. Row stores that
/// delete by key need no margin and ignore it.
pub const SEAL_WRITE_MARGIN: Duration = Duration::from_secs(60);

/// How many times a read lists an hour's segments again when one it
/// listed was deleted before it was read (a concurrent seal merged it).
const RELIST_ATTEMPTS: usize = 5;

/// A row store with settled hours sealed into segments in an object store.
#[derive(Debug, Clone)]
pub struct SealedStore {
    rows: Arc<dyn ProfileStore>,
    objects: Arc<dyn ObjectStore>,
    /// [`SEAL_WRITE_MARGIN`] unless set otherwise, in nanoseconds.
    write_margin_ns: i64,
}

/// What sealing one hour did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealedHour {
    /// Rows moved from the row store into the segment.
    pub rows: u64,
    /// Segments merged into it (and deleted).
    pub merged: u64,
    /// Samples the new segment holds.
    pub samples: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

impl SealedHour {
    /// Whether the hour was already sealed (nothing to do).
    pub fn is_empty(&self) -> bool {
        *self == SealedHour::default()
    }
}

impl SealedStore {
    /// Seals into `objects` the hours of `rows`.
    pub fn new(rows: Arc<dyn ProfileStore>, objects: Arc<dyn ObjectStore>) -> Self {
        SealedStore {
            rows,
            objects,
            write_margin_ns: SEAL_WRITE_MARGIN.as_nanos() as i64,
        }
    }

    /// Sets the [`SEAL_WRITE_MARGIN`]: tests of a store that deletes by
    /// write time set none, so that what they just wrote is sealed whole.
    pub fn with_write_margin(mut self, margin: Duration) -> Self {
        self.write_margin_ns = i64::try_from(margin.as_nanos()).unwrap_or(i64::MAX);
        self
    }

    /// The hours before the hour of `before_ns` with something to seal:
    /// rows in the row store, or more than one segment. Sorted.
    pub async fn unsealed_hours(
        &self,
        scope: &Scope,
        before_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let before_hour = hour_of(before_ns);
        let mut hours: Vec<i64> = self
            .rows
            .sample_hours(scope, i64::MIN, before_hour.saturating_mul(NANOS_PER_HOUR))
            .await?;
        let segments = self.segments(scope, i64::MIN, before_hour - 1).await?;
        hours.extend(
            segments
                .into_iter()
                .filter(|(_, keys)| keys.len() > 1)
                .map(|(hour, _)| hour),
        );
        hours.sort_unstable();
        hours.dedup();
        Ok(hours)
    }

    /// Seals `hour` of `scope`: its rows and segments become one segment.
    /// Does nothing when the hour is one segment already (or empty), or
    /// when a segment it listed is gone before it is read (another node is
    /// sealing the hour: the next pass sees what that one made).
    pub async fn seal_hour(&self, scope: &Scope, hour: i64) -> Result<SealedHour, StoreError> {
        let start = hour.saturating_mul(NANOS_PER_HOUR);
        let end = start.saturating_add(NANOS_PER_HOUR);
        let written_before = kiln_model::now_ns().saturating_sub(self.write_margin_ns);
        // Rows before segments, as every read.
        let rows = self.rows.scan_samples(scope, start, end).await?;
        let listed = self
            .segments(scope, hour, hour)
            .await?
            .remove(&hour)
            .unwrap_or_default();
        if rows.is_empty() && listed.len() <= 1 {
            return Ok(SealedHour::default());
        }
        let Some(mut all) = self.read_segments(&listed).await? else {
            return Ok(SealedHour::default());
        };
        // The rows last: where a key is in both, the row is the newer
        // write, and the last given wins.
        all.extend_from_slice(&rows);
        let (bytes, samples) = segment::encode(hour, &all);
        let key = segment_key(scope, hour, &bytes)?;
        // What the new segment replaces: every listed one but itself (a
        // merge that adds nothing is the same bytes, so the same key).
        let replaced: Vec<&ObjectKey> = listed.iter().filter(|k| **k != key).collect();
        let sealed = SealedHour {
            rows: rows.len() as u64,
            merged: replaced.len() as u64,
            samples: samples as u64,
            bytes: bytes.len() as u64,
        };
        self.objects.put(&key, bytes.into()).await?;
        self.rows
            .delete_sealed_samples(scope, &rows, written_before)
            .await?;
        for old in replaced {
            self.objects.delete(old).await?;
        }
        Ok(sealed)
    }

    /// The object store the segments are in.
    pub fn objects(&self) -> &dyn ObjectStore {
        &*self.objects
    }

    /// Bytes of the scope's segments, and how many there are.
    pub async fn segment_bytes(&self, scope: &Scope) -> Result<(u64, u64), StoreError> {
        let mut bytes = 0;
        let mut count = 0;
        for keys in self.segments(scope, i64::MIN, i64::MAX).await?.values() {
            for key in keys {
                if let Some(object) = self.objects.get(key).await? {
                    bytes += object.len() as u64;
                    count += 1;
                }
            }
        }
        Ok((bytes, count))
    }

    /// The scope's segments of hours `first..=last`, by hour.
    async fn segments(
        &self,
        scope: &Scope,
        first: i64,
        last: i64,
    ) -> Result<BTreeMap<i64, Vec<ObjectKey>>, StoreError> {
        let mut by_hour: BTreeMap<i64, Vec<ObjectKey>> = BTreeMap::new();
        if first > last {
            return Ok(by_hour);
        }
        // Queries scan an hour at a time: one hour lists its own prefix
        // (one small request on S3), not the scope's every segment.
        let prefix = match first == last {
            true => hour_prefix(scope, first),
            false => scope_prefix(scope),
        };
        for key in self.objects.list(&prefix).await? {
            let Some(hour) = hour_of_key(&key) else {
                continue;
            };
            if (first..=last).contains(&hour) {
                by_hour.entry(hour).or_default().push(key);
            }
        }
        Ok(by_hour)
    }

    /// The samples of `keys`' segments, or `None` when one is gone.
    async fn read_segments(
        &self,
        keys: &[ObjectKey],
    ) -> Result<Option<Vec<StoredSample>>, StoreError> {
        let mut samples = Vec::new();
        for key in keys {
            let Some(bytes) = self.objects.get(key).await? else {
                return Ok(None);
            };
            let (_, rows) = segment::decode(&bytes).map_err(|reason| StoreError::Corrupt {
                what: "segment",
                key: key.to_string(),
                reason,
            })?;
            samples.extend(rows);
        }
        Ok(Some(samples))
    }

    /// The segments' samples of hours `first..=last`, listing again when
    /// a concurrent seal deleted one between the listing and the read;
    /// and whether any hour had more than one segment.
    async fn segment_samples(
        &self,
        scope: &Scope,
        first: i64,
        last: i64,
    ) -> Result<(Vec<StoredSample>, bool), StoreError> {
        for _ in 0..RELIST_ATTEMPTS {
            let listed = self.segments(scope, first, last).await?;
            let overlapping = listed.values().any(|keys| keys.len() > 1);
            let keys: Vec<ObjectKey> = listed.into_values().flatten().collect();
            if let Some(samples) = self.read_segments(&keys).await? {
                return Ok((samples, overlapping));
            }
        }
        Err(StoreError::Backend {
            backend: "segments",
            op: "read sealed hours",
            source: format!(
                "segments of {scope} were deleted under {RELIST_ATTEMPTS} reads in a row"
            )
            .into(),
        })
    }
}

/// Where a scope's segments live: `segments/<tenant>/<project>/`.
fn scope_prefix(scope: &Scope) -> String {
    format!("segments/{}/{}/", scope.tenant(), scope.project())
}

/// `segments/<tenant>/<project>/<hour>/<digest>.kseg`. The hour is
/// written as 16 hex digits of its bits with the sign flipped, so keys
/// list in hour order, negative hours first.
pub(crate) fn segment_key(scope: &Scope, hour: i64, bytes: &[u8]) -> Result<ObjectKey, StoreError> {
    let digest = Sha256::digest(bytes);
    ObjectKey::new(&format!(
        "{}{}.kseg",
        hour_prefix(scope, hour),
        hex::encode(&digest[..16])
    ))
}

/// Where one hour's segments live: `segments/<tenant>/<project>/<hour>/`.
fn hour_prefix(scope: &Scope, hour: i64) -> String {
    format!("{}{:016x}/", scope_prefix(scope), (hour as u64) ^ (1 << 63))
}

/// The hour of a segment key; `None` for another object under the prefix.
fn hour_of_key(key: &ObjectKey) -> Option<i64> {
    let mut segments = key.segments().skip(3);
    let hour = segments.next()?;
    let name = segments.next()?;
    if segments.next().is_some() || !name.ends_with(".kseg") || hour.len() != 16 {
        return None;
    }
    let bits = u64::from_str_radix(hour, 16).ok()?;
    Some((bits ^ (1 << 63)) as i64)
}

/// One sample per key (timestamp, stack, label set), the first found kept:
/// callers put rows before segments, and a row is the newer write.
fn one_per_key(samples: Vec<StoredSample>) -> Vec<StoredSample> {
    let mut seen = HashSet::with_capacity(samples.len());
    samples
        .into_iter()
        .filter(|s| seen.insert((s.timestamp_ns, s.stack, s.labels)))
        .collect()
}

#[async_trait]
impl ProfileStore for SealedStore {
    async fn put_frames(&self, tenant: &str, frames: &[StoredFrame]) -> Result<(), StoreError> {
        self.rows.put_frames(tenant, frames).await
    }

    async fn put_stacks(&self, tenant: &str, stacks: &[StackEntry]) -> Result<(), StoreError> {
        self.rows.put_stacks(tenant, stacks).await
    }

    async fn put_label_sets(&self, tenant: &str, sets: &[LabelSetEntry]) -> Result<(), StoreError> {
        self.rows.put_label_sets(tenant, sets).await
    }

    async fn put_executables(
        &self,
        tenant: &str,
        executables: &[Executable],
    ) -> Result<(), StoreError> {
        self.rows.put_executables(tenant, executables).await
    }

    async fn put_samples(&self, scope: &Scope, samples: &[StoredSample]) -> Result<(), StoreError> {
        self.rows.put_samples(scope, samples).await
    }

    async fn delete_sealed_samples(
        &self,
        scope: &Scope,
        samples: &[StoredSample],
        written_before_ns: i64,
    ) -> Result<u64, StoreError> {
        self.rows
            .delete_sealed_samples(scope, samples, written_before_ns)
            .await
    }

    async fn get_frames(
        &self,
        tenant: &str,
        ids: &[FrameId],
    ) -> Result<Vec<Option<StoredFrame>>, StoreError> {
        self.rows.get_frames(tenant, ids).await
    }

    async fn get_stacks(
        &self,
        tenant: &str,
        ids: &[StackId],
    ) -> Result<Vec<Option<Vec<FrameId>>>, StoreError> {
        self.rows.get_stacks(tenant, ids).await
    }

    async fn get_label_sets(
        &self,
        tenant: &str,
        ids: &[LabelSetId],
    ) -> Result<Vec<Option<LabelSet>>, StoreError> {
        self.rows.get_label_sets(tenant, ids).await
    }

    async fn get_executables(
        &self,
        tenant: &str,
        ids: &[FileId],
    ) -> Result<Vec<Option<Executable>>, StoreError> {
        self.rows.get_executables(tenant, ids).await
    }

    /// Rows, then the segments of the hours the range touches; one sample
    /// per key where both hold it.
    async fn scan_samples(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredSample>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let rows = self.rows.scan_samples(scope, from_ns, to_ns).await?;
        let (sealed, overlapping) = self
            .segment_samples(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        if sealed.is_empty() {
            return Ok(rows);
        }
        let in_range = |s: &StoredSample| (from_ns..to_ns).contains(&s.timestamp_ns);
        let both = !rows.is_empty() || overlapping;
        let mut samples = rows;
        samples.extend(sealed.into_iter().filter(in_range));
        Ok(match both {
            true => one_per_key(samples),
            false => samples,
        })
    }

    async fn sample_hours(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if from_ns >= to_ns {
            return Ok(Vec::new());
        }
        let mut hours = self.rows.sample_hours(scope, from_ns, to_ns).await?;
        let sealed = self
            .segments(scope, hour_of(from_ns), hour_of(to_ns - 1))
            .await?;
        hours.extend(sealed.into_keys());
        hours.sort_unstable();
        hours.dedup();
        Ok(hours)
    }

    async fn metric_hours(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<i64>, StoreError> {
        self.rows.metric_hours(scope, name, from_ns, to_ns).await
    }

    async fn put_metric_points(
        &self,
        scope: &Scope,
        points: &[MetricPoint],
    ) -> Result<(), StoreError> {
        self.rows.put_metric_points(scope, points).await
    }

    async fn scan_metric_points(
        &self,
        scope: &Scope,
        name: &str,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<StoredMetricPoint>, StoreError> {
        self.rows
            .scan_metric_points(scope, name, from_ns, to_ns)
            .await
    }

    async fn metric_names(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.rows.metric_names(scope, from_ns, to_ns).await
    }

    /// The row store's retention, then the segments of the hours it
    /// removed; the count of sample hours covers both forms.
    async fn delete_hours_before(
        &self,
        scope: &Scope,
        before_ns: i64,
    ) -> Result<DeletedHours, StoreError> {
        let last = hour_of(before_ns).saturating_sub(1);
        let sealed = self.segments(scope, i64::MIN, last).await?;
        let mut hours: HashSet<i64> = sealed.keys().copied().collect();
        let cutoff = hour_of(before_ns).saturating_mul(NANOS_PER_HOUR);
        hours.extend(self.rows.sample_hours(scope, i64::MIN, cutoff).await?);
        let mut deleted = self.rows.delete_hours_before(scope, before_ns).await?;
        for key in sealed.values().flatten() {
            self.objects.delete(key).await?;
        }
        deleted.sample_hours = hours.len() as u64;
        Ok(deleted)
    }

    async fn stored_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        self.rows.stored_bytes(tenant).await
    }

    async fn hour_versions(
        &self,
        scope: &Scope,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        self.rows.hour_versions(scope, from_ns, to_ns).await
    }

    async fn put_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
        version: u64,
        rows: &[RollupRow],
    ) -> Result<(), StoreError> {
        self.rows
            .put_rollup(scope, resolution, window, version, rows)
            .await
    }

    async fn rollup_versions(
        &self,
        scope: &Scope,
        resolution: Resolution,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<HourVersion>, StoreError> {
        self.rows
            .rollup_versions(scope, resolution, from_ns, to_ns)
            .await
    }

    async fn scan_rollup(
        &self,
        scope: &Scope,
        resolution: Resolution,
        window: i64,
    ) -> Result<Vec<RollupRow>, StoreError> {
        self.rows.scan_rollup(scope, resolution, window).await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        self.rows.sync().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_keys_list_in_hour_order_and_parse_back() {
        let scope = Scope::new("acme", "web").unwrap();
        let hours = [i64::MIN, -5, -1, 0, 1, 494_000, i64::MAX];
        let keys: Vec<ObjectKey> = hours
            .iter()
            .map(|&h| segment_key(&scope, h, b"x").unwrap())
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, keys);
        for (key, hour) in keys.iter().zip(hours) {
            assert!(key.as_str().starts_with("segments/acme/web/"), "{key}");
            assert_eq!(hour_of_key(key), Some(hour));
        }
        assert_eq!(
            hour_of_key(&ObjectKey::new("segments/acme/web/x").unwrap()),
            None
        );
    }
}
