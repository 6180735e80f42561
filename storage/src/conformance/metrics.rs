//! The metric checks of the `ProfileStore` conformance suite: metric points
//! and the names index, run by [`profile_store`](super::profile_store)
//! against every implementation.
//!
//! Label filters are applied above the store (the query side resolves the
//! label sets), so what the store must get right is keeping each series'
//! label set id with its points; `series_keep_their_label_sets` checks that.

use kiln_model::{LabelSetId, MetricPoint, NANOS_PER_HOUR};

use super::{Check, Names, ensure, ensure_eq};
use crate::error::StoreError;
use crate::profile::{ProfileStore, StoredMetricPoint};
use crate::scope::Scope;

const H: i64 = NANOS_PER_HOUR;
/// 2023-11-14T22:13:20Z, a timestamp in the middle of an hour.
const T: i64 = 1_700_000_000_000_000_000;

fn point(name: &str, timestamp_ns: i64, labels: u128, value: f64) -> MetricPoint {
    MetricPoint {
        name: name.to_owned(),
        labels: LabelSetId(labels),
        timestamp_ns,
        value,
    }
}

/// What a scan of `points`' metric returns for them.
fn stored(points: &[MetricPoint]) -> Vec<(i64, u128, u64)> {
    points
        .iter()
        .map(|p| (p.timestamp_ns, p.labels.0, p.value.to_bits()))
        .collect()
}

/// A scan's rows as comparable tuples (values by their bits), sorted.
fn sorted(points: Vec<StoredMetricPoint>) -> Vec<(i64, u128, u64)> {
    let mut rows: Vec<_> = points
        .into_iter()
        .map(|p| (p.timestamp_ns, p.labels.0, p.value.to_bits()))
        .collect();
    rows.sort_unstable();
    rows
}

/// Scans metric `name` and compares, order aside.
async fn expect_points(
    store: &dyn ProfileStore,
    scope: &Scope,
    name: &str,
    (from, to): (i64, i64),
    expected: &[MetricPoint],
) -> Check {
    let got = sorted(store.scan_metric_points(scope, name, from, to).await?);
    let mut expected = stored(expected);
    expected.sort_unstable();
    ensure_eq!(
        got,
        expected,
        "scan of metric {name:?} of {scope} over [{from}, {to})"
    );
    Ok(())
}

async fn expect_names(
    store: &dyn ProfileStore,
    scope: &Scope,
    (from, to): (i64, i64),
    expected: &[&str],
) -> Check {
    let got = store.metric_names(scope, from, to).await?;
    ensure_eq!(
        got,
        expected.to_vec(),
        "metric names of {scope} over [{from}, {to})"
    );
    Ok(())
}

/// Asks `metric_hours` and compares.
async fn expect_metric_hours(
    store: &dyn ProfileStore,
    scope: &Scope,
    name: &str,
    (from, to): (i64, i64),
    expected: &[i64],
) -> Check {
    let got = store.metric_hours(scope, name, from, to).await?;
    ensure_eq!(
        got,
        expected.to_vec(),
        "hours holding points of metric {name:?} of {scope} over [{from}, {to})"
    );
    Ok(())
}

/// The hours of each metric, as `sample_hours` gives those of samples:
/// exactly the hours holding its points, sorted, whatever other metrics
/// (one whose name starts with its name included) or scopes hold.
pub(super) async fn metric_hours_index(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let k = T.div_euclid(H);
    let at = |hour: i64, offset: i64| hour * H + offset;
    store
        .put_metric_points(
            &scope,
            &[
                point("gpu.power", at(k, H - 1), 1, 1.0),
                point("gpu.power", at(k, 3), 2, 1.0),
                point("gpu.power", at(k + 2, 0), 1, 1.0),
                point("gpu.power", at(k + 50, 0), 1, 1.0),
                point("gpu.power.max", at(k + 1, 0), 1, 1.0),
                point("gpu.clock", at(k - 1, 0), 1, 1.0),
            ],
        )
        .await?;
    store
        .put_metric_points(
            &names.scope("a", "q"),
            &[point("gpu.power", at(k + 1, 0), 1, 1.0)],
        )
        .await?;
    let all = (i64::MIN, i64::MAX);
    expect_metric_hours(store, &scope, "gpu.power", all, &[k, k + 2, k + 50]).await?;
    expect_metric_hours(store, &scope, "gpu.power.max", all, &[k + 1]).await?;
    expect_metric_hours(store, &scope, "gpu.clock", all, &[k - 1]).await?;
    expect_metric_hours(store, &scope, "gpu.memory", all, &[]).await?;
    expect_metric_hours(store, &names.scope("a", "q"), "gpu.power", all, &[k + 1]).await?;
    expect_metric_hours(store, &names.scope("ab", "p"), "gpu.power", all, &[]).await?;
    expect_metric_hours(
        store,
        &scope,
        "gpu.power",
        (0, 4_102_444_800_000_000_000),
        &[k, k + 2, k + 50],
    )
    .await?;
    expect_metric_hours(
        store,
        &scope,
        "gpu.power",
        (at(k, H - 1), at(k + 2, 1)),
        &[k, k + 2],
    )
    .await?;
    expect_metric_hours(
        store,
        &scope,
        "gpu.power",
        (at(k + 3, 0), at(k + 50, 0)),
        &[],
    )
    .await?;
    expect_metric_hours(store, &scope, "gpu.power", (at(k, 0), at(k, 0)), &[]).await?;
    // A name no point could have is refused, as by a scan.
    let result = store.metric_hours(&scope, "GPU Power", all.0, all.1).await;
    ensure!(
        matches!(result, Err(StoreError::InvalidMetric(_))),
        "metric_hours of an invalid name gave {result:?}, expected InvalidMetric"
    );
    Ok(())
}

/// Values of every shape come back exactly, each metric apart.
pub(super) async fn metric_points_round_trip(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let values = [
        0.0,
        1.0,
        -1.5,
        87.25,
        1e300,
        -1e-300,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
        80.0 * 1024.0 * 1024.0 * 1024.0,
    ];
    let power: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| point("gpu.power_watts", T + i as i64, 1, v))
        .collect();
    // Another metric with the same times and series, and one whose name
    // starts with the first's.
    let clock: Vec<_> = (0..3)
        .map(|i| point("gpu.sm_clock_mhz", T + i, 1, 1980.0 + i as f64))
        .collect();
    let longer = [point("gpu.power_watts.max", T, 1, 700.0)];
    store.put_metric_points(&scope, &power).await?;
    store
        .put_metric_points(&scope, &[clock.clone(), longer.to_vec()].concat())
        .await?;
    expect_points(store, &scope, "gpu.power_watts", (T, T + 100), &power).await?;
    expect_points(store, &scope, "gpu.sm_clock_mhz", (T, T + 100), &clock).await?;
    expect_points(store, &scope, "gpu.power_watts.max", (T, T + 1), &longer).await?;
    expect_points(store, &scope, "gpu.utilization_percent", (T, T + 100), &[]).await
}

/// The same point written twice is one point; a later value replaces the
/// earlier (at-least-once delivery never double-counts).
pub(super) async fn metric_rewrite_replaces_not_adds(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let batch: Vec<_> = (0..10).map(|i| point("m", T + i, 1, i as f64)).collect();
    store.put_metric_points(&scope, &batch).await?;
    store.put_metric_points(&scope, &batch).await?;
    expect_points(store, &scope, "m", (T, T + 10), &batch).await?;
    let replaced = point("m", T + 3, 1, 42.5);
    store
        .put_metric_points(&scope, std::slice::from_ref(&replaced))
        .await?;
    let mut expected = batch.clone();
    expected[3] = replaced;
    expect_points(store, &scope, "m", (T, T + 10), &expected).await
}

/// Points of several series (label sets) at the same times stay apart,
/// each with its own label set id.
pub(super) async fn series_keep_their_label_sets(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let points: Vec<_> = (0..4u128)
        .flat_map(|gpu| {
            (0..5).map(move |i| point("gpu.utilization_percent", T + i, gpu, (gpu * 10) as f64))
        })
        .chain([point("gpu.utilization_percent", T, u128::MAX, 1.0)])
        .collect();
    store.put_metric_points(&scope, &points).await?;
    expect_points(
        store,
        &scope,
        "gpu.utilization_percent",
        (T, T + 5),
        &points,
    )
    .await?;
    let got = store
        .scan_metric_points(&scope, "gpu.utilization_percent", T, T + 5)
        .await?;
    let gpu2 = got.iter().filter(|p| p.labels == LabelSetId(2)).count();
    ensure_eq!(gpu2, 5, "points of the series with label set 2");
    Ok(())
}

/// Scan bounds are exact: `from` inclusive, `to` exclusive, across hours,
/// with negative and extreme timestamps.
pub(super) async fn metric_scan_bounds_are_exact(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let k = T.div_euclid(H) * H;
    let times = [
        i64::MIN,
        -H - 1,
        -1,
        0,
        k - 1,
        k,
        k + 1,
        k + H - 1,
        k + H,
        k + 5 * H,
        i64::MAX,
    ];
    let p: Vec<_> = times.iter().map(|&t| point("m", t, 7, t as f64)).collect();
    store.put_metric_points(&scope, &p).await?;
    // `to` is exclusive, so no scan returns a point at i64::MAX.
    expect_points(store, &scope, "m", (i64::MIN, i64::MAX), &p[..10]).await?;
    expect_points(store, &scope, "m", (k, k + H), &p[5..8]).await?;
    expect_points(store, &scope, "m", (k - 1, k + 1), &p[4..6]).await?;
    expect_points(store, &scope, "m", (k + H - 1, k + 5 * H + 1), &p[7..10]).await?;
    expect_points(store, &scope, "m", (-H - 1, 1), &p[1..4]).await?;
    expect_points(store, &scope, "m", (k + 2 * H, k + 3 * H), &[]).await?;
    expect_points(store, &scope, "m", (k, k), &[]).await?;
    expect_points(store, &scope, "m", (k + 1, k), &[]).await?;
    expect_points(store, &scope, "m", (i64::MAX - 1, i64::MAX), &[]).await
}

/// The names index lists each name once, sorted, for the hours a range
/// touches, and nothing for hours without points.
pub(super) async fn metric_names_by_hour(store: &dyn ProfileStore, names: &Names) -> Check {
    let scope = names.scope("a", "p");
    let k = T.div_euclid(H) * H;
    store
        .put_metric_points(
            &scope,
            &[
                point("gpu.power_watts", k + 10, 1, 1.0),
                point("gpu.power_watts", k + 20, 2, 1.0),
                point("gpu.memory_used_bytes", k + H + 5, 1, 1.0),
                point("agent.coverage", k + 3 * H, 1, 1.0),
            ],
        )
        .await?;
    store
        .put_metric_points(&scope, &[point("gpu.power_watts", k + 30, 1, 2.0)])
        .await?;
    expect_names(store, &scope, (k, k + 1), &["gpu.power_watts"]).await?;
    expect_names(
        store,
        &scope,
        (k, k + 2 * H),
        &["gpu.memory_used_bytes", "gpu.power_watts"],
    )
    .await?;
    expect_names(
        store,
        &scope,
        (i64::MIN, i64::MAX),
        &["agent.coverage", "gpu.memory_used_bytes", "gpu.power_watts"],
    )
    .await?;
    // Per hour: the last point of hour k is listed though the range starts
    // after it; hour k + 2 H has none.
    expect_names(store, &scope, (k + 100, k + 200), &["gpu.power_watts"]).await?;
    expect_names(store, &scope, (k + 2 * H, k + 3 * H), &[]).await?;
    expect_names(
        store,
        &scope,
        (k + 3 * H, k + 3 * H + 1),
        &["agent.coverage"],
    )
    .await?;
    expect_names(store, &scope, (k + H, k), &[]).await
}

/// Tenants and projects never see each other's points or names, even with
/// names that concatenate alike.
pub(super) async fn metrics_are_isolated(store: &dyn ProfileStore, names: &Names) -> Check {
    let scopes = [
        names.scope("a", "p"),
        names.scope("a", "pb"),
        names.scope("a", "bp"),
        names.scope("ab", "p"),
        names.scope("b", "p"),
    ];
    for (i, scope) in scopes.iter().enumerate() {
        store
            .put_metric_points(
                scope,
                &[
                    point("m", T, 1, i as f64),
                    point(&format!("only{i}"), T, 1, 1.0),
                ],
            )
            .await?;
    }
    for (i, scope) in scopes.iter().enumerate() {
        expect_points(
            store,
            scope,
            "m",
            (i64::MIN, i64::MAX),
            &[point("m", T, 1, i as f64)],
        )
        .await?;
        let only = format!("only{i}");
        expect_names(store, scope, (T, T + 1), &["m", &only]).await?;
    }
    let nobody = names.scope("c", "p");
    expect_points(store, &nobody, "m", (i64::MIN, i64::MAX), &[]).await?;
    expect_names(store, &nobody, (i64::MIN, i64::MAX), &[]).await
}

/// Invalid names and values are refused, whole calls at a time, naming
/// the problem; an empty write is fine.
pub(super) async fn invalid_metric_points_are_refused(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    store.put_metric_points(&scope, &[]).await?;
    for bad in [
        point("", T, 1, 1.0),
        point("GPU power", T, 1, 1.0),
        point(&"x".repeat(129), T, 1, 1.0),
        point("m", T, 1, f64::NAN),
        point("m", T, 1, f64::INFINITY),
    ] {
        let result = store
            .put_metric_points(&scope, &[point("m", T + 1, 1, 1.0), bad.clone()])
            .await;
        ensure!(
            matches!(result, Err(StoreError::InvalidMetric(_))),
            "writing {bad:?} gave {result:?}, expected InvalidMetric"
        );
    }
    expect_points(store, &scope, "m", (i64::MIN, i64::MAX), &[]).await?;
    let result = store.scan_metric_points(&scope, "Bad Name", 0, 1).await;
    ensure!(
        matches!(result, Err(StoreError::InvalidMetric(_))),
        "scanning an invalid name gave {result:?}"
    );
    expect_names(store, &scope, (i64::MIN, i64::MAX), &[]).await
}

/// A day of one reading a second for 4 GPUs across 25 hours comes back
/// exactly, whole and in part.
pub(super) async fn many_metric_points_come_back_exactly(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let start = T.div_euclid(H) * H - 30 * 60 * 1_000_000_000;
    // 4 series × 1 reading every 4 s over 25 hours: 90 000 points.
    let step = 4_000_000_000;
    let points: Vec<MetricPoint> = (0..22_500i64)
        .flat_map(|i| {
            (0..4u128).map(move |gpu| {
                point(
                    "gpu.utilization_percent",
                    start + i * step,
                    gpu,
                    ((i * 7 + gpu as i64) % 101) as f64,
                )
            })
        })
        .collect();
    for chunk in points.chunks(10_000) {
        store.put_metric_points(&scope, chunk).await?;
    }
    let got = sorted(
        store
            .scan_metric_points(&scope, "gpu.utilization_percent", i64::MIN, i64::MAX)
            .await?,
    );
    let mut expected = stored(&points);
    expected.sort_unstable();
    ensure!(
        got == expected,
        "full scan returned {} points, {} were written (or values differ)",
        got.len(),
        expected.len()
    );
    let (from, to) = (start + 3 * H + H / 3, start + 7 * H + 1);
    let got = sorted(
        store
            .scan_metric_points(&scope, "gpu.utilization_percent", from, to)
            .await?,
    );
    let expected: Vec<_> = expected
        .into_iter()
        .filter(|p| (from..to).contains(&p.0))
        .collect();
    ensure!(
        got == expected,
        "scan over [{from}, {to}) returned {} points, expected {}",
        got.len(),
        expected.len()
    );
    Ok(())
}
