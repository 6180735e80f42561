//! Retention and usage checks of the `ProfileStore` suite:
//! `delete_hours_before` and `stored_bytes`.

use kiln_model::{LabelSetId, MetricPoint, NANOS_PER_HOUR, StackId};

use super::{Check, Names, ensure, ensure_eq};
use crate::error::StoreError;
use crate::profile::{
    DeletedHours, ProfileStore, StoredSample, metric_row_bytes, sample_row_bytes,
};
use crate::scope::Scope;

const H: i64 = NANOS_PER_HOUR;
/// The start of an hour in November 2023.
const K: i64 = 1_700_000_000_000_000_000 / H;

fn sample(timestamp_ns: i64, stack: u128) -> StoredSample {
    StoredSample {
        timestamp_ns,
        stack: StackId(stack),
        labels: LabelSetId(7),
        count: 3,
        period_ns: 10_101_010,
    }
}

fn point(name: &str, timestamp_ns: i64) -> MetricPoint {
    MetricPoint {
        name: name.to_owned(),
        labels: LabelSetId(9),
        timestamp_ns,
        value: 1.5,
    }
}

/// Writes, in `scope`, two samples at the start and end of each hour
/// `K-3..=K+1` and a point of two metrics (one name a prefix of the
/// other) in each.
async fn fill(store: &dyn ProfileStore, scope: &Scope) -> Result<(), StoreError> {
    let mut samples = Vec::new();
    let mut points = Vec::new();
    for hour in K - 3..=K + 1 {
        samples.push(sample(hour * H, 1));
        samples.push(sample(hour * H + H - 1, 2));
        points.push(point("gpu.power", hour * H + 5));
        points.push(point("gpu.power.max", hour * H + 6));
    }
    store.put_samples(scope, &samples).await?;
    store.put_metric_points(scope, &points).await
}

/// What is left of `scope` after a delete before hour `K` (in the middle
/// of hour K): hours K and K+1 whole, nothing earlier.
async fn expect_kept_from_k(store: &dyn ProfileStore, scope: &Scope) -> Check {
    let all = (i64::MIN, i64::MAX);
    let hours = store.sample_hours(scope, all.0, all.1).await?;
    ensure_eq!(
        hours,
        vec![K, K + 1],
        "sample hours of {scope} after the delete"
    );
    let mut times: Vec<i64> = store
        .scan_samples(scope, all.0, all.1)
        .await?
        .iter()
        .map(|s| s.timestamp_ns)
        .collect();
    times.sort_unstable();
    ensure_eq!(
        times,
        vec![K * H, K * H + H - 1, (K + 1) * H, (K + 1) * H + H - 1],
        "samples of {scope} after the delete (the cutoff's own hour is kept whole)"
    );
    for name in ["gpu.power", "gpu.power.max"] {
        let hours = store.metric_hours(scope, name, all.0, all.1).await?;
        ensure_eq!(hours, vec![K, K + 1], "hours of metric {name} of {scope}");
        let points = store.scan_metric_points(scope, name, all.0, all.1).await?;
        ensure_eq!(points.len(), 2, "points of metric {name} of {scope}");
    }
    let names = store.metric_names(scope, (K - 3) * H, K * H).await?;
    ensure!(
        names.is_empty(),
        "metric names of {scope} in the deleted hours: {names:?}"
    );
    Ok(())
}

/// A delete drops whole hours before the cutoff's hour, samples and
/// metrics and their indexes, in that scope only; a second one finds
/// nothing.
pub(super) async fn retention_deletes_whole_hours_before(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let others = [
        names.scope("a", "q"),
        names.scope("ab", "p"),
        names.scope("b", "p"),
    ];
    fill(store, &scope).await?;
    for other in &others {
        fill(store, other).await?;
    }
    let cutoff = K * H + H / 2;
    let deleted = store.delete_hours_before(&scope, cutoff).await?;
    ensure_eq!(deleted.sample_hours, 3, "sample hours deleted");
    ensure_eq!(
        deleted.metric_hours,
        6,
        "(metric, hour) partitions deleted (two metrics, three hours)"
    );
    expect_kept_from_k(store, &scope).await?;
    for other in &others {
        let hours = store.sample_hours(other, i64::MIN, i64::MAX).await?;
        ensure_eq!(
            hours,
            (K - 3..=K + 1).collect::<Vec<_>>(),
            "sample hours of {other}, which the delete of {scope} must not touch"
        );
        let points = store
            .scan_metric_points(other, "gpu.power", i64::MIN, i64::MAX)
            .await?;
        ensure_eq!(points.len(), 5, "points of {other}, untouched");
    }
    let again = store.delete_hours_before(&scope, cutoff).await?;
    ensure_eq!(again, DeletedHours::default(), "a second delete");
    // A cutoff at an hour's very start deletes the hour before it, not it.
    let deleted = store.delete_hours_before(&scope, (K + 1) * H).await?;
    ensure_eq!(deleted.sample_hours, 1, "sample hours before hour K+1");
    let hours = store.sample_hours(&scope, i64::MIN, i64::MAX).await?;
    ensure_eq!(hours, vec![K + 1], "sample hours left");
    // Extreme bounds neither fail nor overflow.
    store.delete_hours_before(&others[0], i64::MIN).await?;
    let deleted = store.delete_hours_before(&others[0], i64::MAX).await?;
    ensure_eq!(deleted.sample_hours, 5, "everything before the end of time");
    let left = store.scan_samples(&others[0], i64::MIN, i64::MAX).await?;
    ensure!(left.is_empty(), "samples left after deleting all: {left:?}");
    Ok(())
}

/// Stored bytes count every row written, per tenant over its projects,
/// and drop by exactly what a retention delete removed.
pub(super) async fn stored_bytes_follow_writes_and_retention(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let tenant = names.tenant("a");
    let scope = names.scope("a", "p");
    let second = names.scope("a", "quux");
    let other = names.scope("ab", "p");
    ensure_eq!(
        store.stored_bytes(&tenant).await?,
        0,
        "a new tenant's bytes"
    );
    fill(store, &scope).await?;
    // Per hour: two sample rows, one point of each metric.
    let hour_bytes = 2 * sample_row_bytes(&scope)
        + metric_row_bytes(&scope, "gpu.power")
        + metric_row_bytes(&scope, "gpu.power.max");
    ensure_eq!(
        store.stored_bytes(&tenant).await?,
        5 * hour_bytes,
        "bytes after five hours"
    );
    store
        .put_samples(&second, &[sample(K * H, 1), sample(K * H + 1, 1)])
        .await?;
    let second_bytes = 2 * sample_row_bytes(&second);
    ensure_eq!(
        store.stored_bytes(&tenant).await?,
        5 * hour_bytes + second_bytes,
        "bytes with a second project"
    );
    fill(store, &other).await?;
    ensure_eq!(
        store.stored_bytes(&tenant).await?,
        5 * hour_bytes + second_bytes,
        "bytes after another tenant (whose name extends this one's) wrote"
    );
    let deleted = store.delete_hours_before(&scope, K * H).await?;
    ensure_eq!(deleted.bytes, 3 * hour_bytes, "bytes the delete reports");
    ensure_eq!(
        store.stored_bytes(&tenant).await?,
        2 * hour_bytes + second_bytes,
        "bytes after deleting three hours"
    );
    ensure_eq!(
        store.stored_bytes(&names.tenant("ab")).await?,
        5 * (2 * sample_row_bytes(&other)
            + metric_row_bytes(&other, "gpu.power")
            + metric_row_bytes(&other, "gpu.power.max")),
        "the other tenant's bytes, untouched"
    );
    // Writes to an hour after its delete count afresh.
    store.put_samples(&scope, &[sample((K - 3) * H, 5)]).await?;
    ensure_eq!(
        store.stored_bytes(&tenant).await?,
        2 * hour_bytes + second_bytes + sample_row_bytes(&scope),
        "bytes after a late write to a deleted hour"
    );
    let result = store.stored_bytes("Not A Tenant").await;
    ensure!(
        matches!(result, Err(StoreError::InvalidName { .. })),
        "stored_bytes of an invalid tenant gave {result:?}"
    );
    Ok(())
}
