//! Rollup checks of the `ProfileStore` suite: `hour_versions`,
//! `put_rollup`, `rollup_versions` and `scan_rollup`, at both
//! resolutions.

use kiln_model::{LabelSetId, MetricPoint, NANOS_PER_HOUR, StackId};

use super::{Check, Names, ensure, ensure_eq};
use crate::profile::{ProfileStore, StoredSample};
use crate::rollup::{HourVersion, Resolution, RollupRow, current_rollups};

const H: i64 = NANOS_PER_HOUR;
/// The start of an hour in November 2023.
const K: i64 = 1_700_000_000_000_000_000 / H;

fn sample(timestamp_ns: i64, stack: u128, count: u64) -> StoredSample {
    StoredSample {
        timestamp_ns,
        stack: StackId(stack),
        labels: LabelSetId(7),
        count,
        period_ns: 10_101_010,
    }
}

fn row(stack: u128, labels: u128, period_ns: u64, count: u64) -> RollupRow {
    RollupRow {
        stack: StackId(stack),
        labels: LabelSetId(labels),
        period_ns,
        count,
    }
}

fn sorted(mut rows: Vec<RollupRow>) -> Vec<RollupRow> {
    rows.sort();
    rows
}

/// Every write of an hour (samples or metric points) makes its version
/// grow; hours without data have none; versions are per scope.
pub(super) async fn hour_versions_grow_with_every_write(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let other = names.scope("a", "q");
    let all = (i64::MIN, i64::MAX);
    ensure_eq!(
        store.hour_versions(&scope, all.0, all.1).await?,
        Vec::<HourVersion>::new(),
        "hour versions of an empty scope"
    );
    store
        .put_samples(
            &scope,
            &[sample(K * H + 5, 1, 1), sample((K + 2) * H, 1, 1)],
        )
        .await?;
    let before = store.hour_versions(&scope, all.0, all.1).await?;
    let hours: Vec<i64> = before.iter().map(|v| v.hour).collect();
    ensure_eq!(hours, vec![K, K + 2], "hours with versions");
    ensure!(
        before.iter().all(|v| v.version > 0),
        "versions of hours with data are above 0: {before:?}"
    );

    // The same sample again (a replay) and a metric point: each is a
    // write of hour K.
    store
        .put_samples(&scope, &[sample(K * H + 5, 1, 1)])
        .await?;
    let replayed = store.hour_versions(&scope, K * H, K * H + 1).await?;
    ensure!(
        replayed.len() == 1 && replayed[0].version > before[0].version,
        "a replayed sample makes hour K's version grow: {before:?} then {replayed:?}"
    );
    let point = MetricPoint {
        name: "gpu.power".to_owned(),
        labels: LabelSetId(9),
        timestamp_ns: K * H + 9,
        value: 2.0,
    };
    store.put_metric_points(&scope, &[point]).await?;
    let after_point = store.hour_versions(&scope, K * H, (K + 1) * H).await?;
    ensure!(
        after_point.len() == 1 && after_point[0].version > replayed[0].version,
        "a metric point makes hour K's version grow: {replayed:?} then {after_point:?}"
    );
    // Hour K+2 untouched; the range bounds are by hour, exclusive at the end.
    ensure_eq!(
        store
            .hour_versions(&scope, (K + 1) * H, (K + 2) * H)
            .await?,
        Vec::<HourVersion>::new(),
        "versions of [K+1, K+2)"
    );
    ensure_eq!(
        store
            .hour_versions(&scope, (K + 2) * H + 7, (K + 2) * H + 8)
            .await?,
        vec![before[1]],
        "versions of a nanosecond of hour K+2"
    );
    ensure_eq!(
        store.hour_versions(&scope, K * H, K * H).await?,
        Vec::<HourVersion>::new(),
        "an empty range"
    );
    ensure_eq!(
        store.hour_versions(&other, all.0, all.1).await?,
        Vec::<HourVersion>::new(),
        "versions of another project"
    );
    Ok(())
}

/// A rollup comes back as written (equal keys summed), marked with its
/// version; a second rollup of the hour replaces the first, rows and
/// version; rollups are per scope and per hour.
pub(super) async fn rollups_round_trip_and_replace(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let other_project = names.scope("a", "q");
    let other_tenant = names.scope("ab", "p");
    let all = (i64::MIN, i64::MAX);
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Hour, K).await?,
        Vec::<RollupRow>::new(),
        "the rollup of an hour never rolled"
    );
    let first = vec![
        row(1, 10, 10_000_000, 5),
        row(1, 11, 10_000_000, 6),
        // The same stack and labels at another period is another row.
        row(1, 10, 52_631_578, 7),
        row(u128::MAX, u128::MAX, u64::MAX, u64::MAX),
        row(2, 10, 10_000_000, 3),
        // Written twice in one call: summed.
        row(2, 10, 10_000_000, 4),
    ];
    store
        .put_rollup(&scope, Resolution::Hour, K, 40, &first)
        .await?;
    store
        .put_rollup(&scope, Resolution::Hour, K + 1, 41, &[row(9, 9, 9, 9)])
        .await?;
    let expected_first = sorted(vec![
        row(1, 10, 10_000_000, 5),
        row(1, 11, 10_000_000, 6),
        row(1, 10, 52_631_578, 7),
        row(u128::MAX, u128::MAX, u64::MAX, u64::MAX),
        row(2, 10, 10_000_000, 7),
    ]);
    ensure_eq!(
        sorted(store.scan_rollup(&scope, Resolution::Hour, K).await?),
        expected_first,
        "hour K's rollup as written"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, all.0, all.1)
            .await?,
        vec![
            HourVersion {
                hour: K,
                version: 40
            },
            HourVersion {
                hour: K + 1,
                version: 41
            }
        ],
        "rollup versions"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, (K + 1) * H, (K + 1) * H + 1)
            .await?,
        vec![HourVersion {
            hour: K + 1,
            version: 41
        }],
        "rollup versions of a nanosecond of hour K+1"
    );

    // Rolled again after a late write: fewer and other rows.
    let second = vec![row(1, 10, 10_000_000, 8), row(3, 10, 10_000_000, 1)];
    store
        .put_rollup(&scope, Resolution::Hour, K, 45, &second)
        .await?;
    ensure_eq!(
        sorted(store.scan_rollup(&scope, Resolution::Hour, K).await?),
        sorted(second),
        "hour K's rollup after a second rollup (the first one's other rows gone)"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, K * H, (K + 1) * H)
            .await?,
        vec![HourVersion {
            hour: K,
            version: 45
        }],
        "hour K's version after the second rollup"
    );
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Hour, K + 1).await?,
        vec![row(9, 9, 9, 9)],
        "hour K+1 untouched by hour K's rollups"
    );
    // An empty rollup (an hour of metric points only) is a rollup.
    store
        .put_rollup(&scope, Resolution::Hour, K + 3, 2, &[])
        .await?;
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, (K + 3) * H, (K + 4) * H)
            .await?,
        vec![HourVersion {
            hour: K + 3,
            version: 2
        }],
        "an empty rollup's version"
    );
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Hour, K + 3).await?,
        Vec::<RollupRow>::new(),
        "an empty rollup's rows"
    );

    for other in [&other_project, &other_tenant] {
        ensure_eq!(
            store
                .rollup_versions(other, Resolution::Hour, all.0, all.1)
                .await?,
            Vec::<HourVersion>::new(),
            "rollup versions of {other}"
        );
        ensure_eq!(
            store.scan_rollup(other, Resolution::Hour, K).await?,
            Vec::<RollupRow>::new(),
            "hour K's rollup of {other}"
        );
    }
    Ok(())
}

/// The life of an hour's rollup as the query path sees it: current once
/// made from the hour's version, stale after a late write, current again
/// once rolled again, and gone with the hour at retention.
pub(super) async fn rollups_go_stale_and_follow_retention(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let all = (i64::MIN, i64::MAX);
    store
        .put_samples(&scope, &[sample(K * H, 1, 2), sample((K + 1) * H, 2, 3)])
        .await?;
    let current = |versions: &[HourVersion], hour: i64| {
        versions
            .iter()
            .find(|v| v.hour == hour)
            .map(|v| v.version)
            .unwrap_or_default()
    };
    let versions = store.hour_versions(&scope, all.0, all.1).await?;
    for hour in [K, K + 1] {
        let rows = [row(
            u128::try_from(hour - K + 1).unwrap_or(0),
            7,
            10_101_010,
            2,
        )];
        store
            .put_rollup(
                &scope,
                Resolution::Hour,
                hour,
                current(&versions, hour),
                &rows,
            )
            .await?;
    }
    let rollups = store
        .rollup_versions(&scope, Resolution::Hour, all.0, all.1)
        .await?;
    ensure_eq!(
        current_rollups(&versions, &rollups),
        vec![K, K + 1],
        "current rollups once both hours are rolled"
    );

    store
        .put_samples(&scope, &[sample(K * H + 1, 3, 1)])
        .await?;
    let versions = store.hour_versions(&scope, all.0, all.1).await?;
    ensure_eq!(
        current_rollups(&versions, &rollups),
        vec![K + 1],
        "current rollups after a late write to hour K"
    );
    store
        .put_rollup(
            &scope,
            Resolution::Hour,
            K,
            current(&versions, K),
            &[row(1, 7, 10_101_010, 3)],
        )
        .await?;
    let rollups = store
        .rollup_versions(&scope, Resolution::Hour, all.0, all.1)
        .await?;
    ensure_eq!(
        current_rollups(&versions, &rollups),
        vec![K, K + 1],
        "current rollups once hour K is rolled again"
    );

    store.delete_hours_before(&scope, (K + 1) * H).await?;
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, all.0, all.1)
            .await?,
        vec![HourVersion {
            hour: K + 1,
            version: current(&versions, K + 1)
        }],
        "rollup versions after retention deleted hour K"
    );
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Hour, K).await?,
        Vec::<RollupRow>::new(),
        "hour K's rollup after retention"
    );
    ensure_eq!(
        store
            .scan_rollup(&scope, Resolution::Hour, K + 1)
            .await?
            .len(),
        1,
        "hour K+1's rollup after retention"
    );
    Ok(())
}

/// Day rollups live beside hour rollups: a day and the hour it starts
/// with are two windows; a day's versions are listed by its first hour;
/// retention deletes the days that start before its cutoff.
pub(super) async fn day_rollups_are_apart_from_hours(
    store: &dyn ProfileStore,
    names: &Names,
) -> Check {
    let scope = names.scope("a", "p");
    let all = (i64::MIN, i64::MAX);
    let day = Resolution::Day.window_of(K);
    store
        .put_rollup(&scope, Resolution::Hour, day, 3, &[row(1, 1, 1, 1)])
        .await?;
    store
        .put_rollup(
            &scope,
            Resolution::Day,
            day,
            70,
            &[row(2, 2, 2, 2), row(2, 2, 2, 5)],
        )
        .await?;
    store
        .put_rollup(&scope, Resolution::Day, day + 24, 71, &[row(3, 3, 3, 3)])
        .await?;
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Day, day).await?,
        vec![row(2, 2, 2, 7)],
        "the day's rollup"
    );
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Hour, day).await?,
        vec![row(1, 1, 1, 1)],
        "the rollup of the day's first hour"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Day, all.0, all.1)
            .await?,
        vec![
            HourVersion {
                hour: day,
                version: 70
            },
            HourVersion {
                hour: day + 24,
                version: 71
            }
        ],
        "day rollup versions"
    );
    // Listed by the hour the window starts at: a range holding that hour.
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Day, (day + 24) * H, (day + 25) * H)
            .await?
            .len(),
        1,
        "day versions of the second day's first hour"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Day, (day + 1) * H, (day + 24) * H)
            .await?,
        Vec::<HourVersion>::new(),
        "day versions of hours where no day starts"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, all.0, all.1)
            .await?,
        vec![HourVersion {
            hour: day,
            version: 3
        }],
        "hour rollup versions beside days"
    );
    // Retention at the start of the second day: the first day goes, with
    // the hour rollup of its first hour; the second day stays.
    store.delete_hours_before(&scope, (day + 24) * H).await?;
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Day, all.0, all.1)
            .await?,
        vec![HourVersion {
            hour: day + 24,
            version: 71
        }],
        "day rollup versions after retention"
    );
    ensure_eq!(
        store.scan_rollup(&scope, Resolution::Day, day).await?,
        Vec::<RollupRow>::new(),
        "the first day's rollup after retention"
    );
    // Retention within the second day: the day goes too (it lost hours).
    store
        .delete_hours_before(&scope, (day + 24 + 5) * H)
        .await?;
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Day, all.0, all.1)
            .await?,
        Vec::<HourVersion>::new(),
        "day rollup versions after retention within the second day"
    );
    ensure_eq!(
        store
            .rollup_versions(&scope, Resolution::Hour, all.0, all.1)
            .await?,
        Vec::<HourVersion>::new(),
        "hour rollup versions after retention"
    );
    Ok(())
}
