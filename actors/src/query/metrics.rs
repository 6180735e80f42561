//! Metric series: one metric's points over a range, one series per label
//! set that matches the filters, averaged per step.
//!
//! The coordinator asks the store which hours (the stores' partitions)
//! hold points of the metric ([`ProfileStore::metric_hours`]), cuts the
//! range at those hours as it does for samples and sends each to the
//! aggregator that owns it (rendezvous hashing, so its label sets stay
//! cached there); each aggregator scans the hour, keeps the series whose
//! labels match, and sums their points per step bucket. The coordinator
//! adds the partial sums up and divides. Only a few hours are in flight at
//! once, so memory stays at a few hours' points whatever the range, and
//! hours without points cost nothing. With peers, metric scans stay on the
//! asking node (the store is shared; the peer wire protocol carries sample
//! scans only).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix::Message;
use futures_util::{StreamExt, TryStreamExt, stream};
use kiln_model::{LabelSet, LabelSetId, MetricSeries, MetricSeriesSet, MetricValue};
use kiln_storage::{ProfileStore, StoreError};

use super::QueryRange;
use super::aggregator::{LabelCache, bucket_of, load_label_sets};

/// Hours scanned at once by one metrics query.
const HOURS_IN_FLIGHT: usize = 8;

/// One metric's series over a range, each point the average of the
/// readings in its step.
#[derive(Debug, Message)]
#[rtype(result = "Result<MetricSeriesSet, super::QueryError>")]
pub struct MetricsQuery {
    /// Where and which series (label filters).
    pub range: QueryRange,
    /// The metric (valid: `kiln_model::check_metric_name`).
    pub name: String,
    /// Width of one point (> 0).
    pub step_ns: i64,
}

/// The metric names with points in a range (label filters are not applied:
/// the index holds names per hour, not per series).
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<String>, super::QueryError>")]
pub struct MetricNamesQuery(pub QueryRange);

/// Sum and number of readings in one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Bucket {
    sum: f64,
    count: u64,
}

/// One series' buckets, by step index from the range's start.
type Buckets = HashMap<i64, Bucket>;

/// What one hour's scan adds up: per label set, its labels and buckets.
#[derive(Debug, Default)]
pub(crate) struct MetricPartial {
    series: HashMap<LabelSetId, (Arc<LabelSet>, Buckets)>,
}

impl MetricPartial {
    fn merge(&mut self, other: MetricPartial) {
        for (id, (labels, buckets)) in other.series {
            let mine = &mut self.series.entry(id).or_insert((labels, Buckets::new())).1;
            for (i, b) in buckets {
                let slot = mine.entry(i).or_default();
                slot.sum += b.sum;
                slot.count = slot.count.saturating_add(b.count);
            }
        }
    }
}

/// Scans one metric over a sub-range within one hour.
#[derive(Debug, Message)]
#[rtype(result = "Result<MetricPartial, StoreError>")]
pub(crate) struct MetricScan {
    /// The sub-range and filters.
    pub range: QueryRange,
    /// The metric.
    pub name: String,
    /// Buckets: (origin, step) in nanoseconds.
    pub buckets: (i64, i64),
}

/// Runs a [`MetricScan`] (on the aggregator that owns its hour).
pub(crate) async fn run_metric_scan(
    store: &dyn ProfileStore,
    cache: &Mutex<LabelCache>,
    scan: MetricScan,
) -> Result<MetricPartial, StoreError> {
    let MetricScan {
        range,
        name,
        buckets: (origin, step),
    } = scan;
    let points = store
        .scan_metric_points(&range.scope, &name, range.from_ns, range.to_ns)
        .await?;
    let tenant = range.scope.tenant();
    let label_sets = load_label_sets(store, cache, tenant, points.iter().map(|p| p.labels)).await?;
    let filters = || range.filters.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let mut partial = MetricPartial::default();
    for p in points {
        let Some(labels) = label_sets.get(&p.labels) else {
            continue; // a label set never written: shown nowhere
        };
        if !labels.matches(filters()) {
            continue;
        }
        let buckets = &mut partial
            .series
            .entry(p.labels)
            .or_insert_with(|| (labels.clone(), Buckets::new()))
            .1;
        let slot = buckets
            .entry(bucket_of(p.timestamp_ns, origin, step))
            .or_default();
        slot.sum += p.value;
        slot.count = slot.count.saturating_add(1);
    }
    Ok(partial)
}

/// Runs `scan` for each of `hours` (those of `range` that hold points),
/// at most [`HOURS_IN_FLIGHT`] at a time, merging as they come.
pub(crate) async fn gather<F>(
    range: &QueryRange,
    hours: Vec<i64>,
    name: &str,
    step_ns: i64,
    scan: impl Fn(MetricScan) -> F,
) -> Result<MetricPartial, super::QueryError>
where
    F: Future<Output = Result<MetricPartial, super::QueryError>>,
{
    let scans = hours.into_iter().map(|hour| {
        scan(MetricScan {
            range: range.partition(hour),
            name: name.to_owned(),
            buckets: (range.from_ns, step_ns),
        })
    });
    stream::iter(scans)
        .buffer_unordered(HOURS_IN_FLIGHT)
        .try_fold(MetricPartial::default(), |mut merged, partial| async move {
            merged.merge(partial);
            Ok(merged)
        })
        .await
}

/// The series of merged partials: averages per step, series sorted by
/// labels, points by time.
pub(crate) fn series(
    range: &QueryRange,
    name: &str,
    step_ns: i64,
    partial: MetricPartial,
) -> MetricSeriesSet {
    let mut series: Vec<MetricSeries> = partial
        .series
        .into_values()
        .map(|(labels, buckets)| {
            let mut points: Vec<MetricValue> = buckets
                .into_iter()
                .map(|(i, b)| MetricValue {
                    t_ns: range.from_ns.saturating_add(i.saturating_mul(step_ns)),
                    value: b.sum / b.count as f64,
                })
                .collect();
            points.sort_unstable_by_key(|p| p.t_ns);
            MetricSeries {
                labels: labels
                    .iter()
                    .map(|(n, v)| (n.to_owned(), v.to_owned()))
                    .collect(),
                points,
            }
        })
        .collect();
    series.sort_by(|a, b| a.labels.cmp(&b.labels));
    MetricSeriesSet {
        name: name.to_owned(),
        from_ns: range.from_ns,
        to_ns: range.to_ns,
        step_ns,
        series,
    }
}

#[cfg(test)]
mod tests {
    use kiln_model::{LabelSetEntry, MetricPoint, NANOS_PER_HOUR};
    use kiln_storage::{EmbeddedProfileStore, Scope};

    use super::*;
    use crate::query::cache::BoundedCache;

    const S: i64 = 1_000_000_000;

    fn gpu(index: &str) -> LabelSet {
        LabelSet::new().with("host", "h").with("gpu", index)
    }

    /// Guards the averaging across hour partitions: a step that spans an
    /// hour boundary averages the readings of both hours, once each, and
    /// filters keep only the matching series.
    #[tokio::test]
    async fn steps_average_across_hours_and_filters_pick_series() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedProfileStore::open(dir.path()).unwrap();
        let scope = Scope::new("t", "p").unwrap();
        let (g0, g1) = (gpu("0"), gpu("1"));
        let entries: Vec<_> = [&g0, &g1]
            .iter()
            .map(|l| LabelSetEntry {
                id: l.id(),
                labels: (*l).clone(),
            })
            .collect();
        store.put_label_sets("t", &entries).await.unwrap();
        let h = NANOS_PER_HOUR;
        // Readings every second from 2 s before an hour to 2 s after it.
        let points: Vec<MetricPoint> = (-2..2)
            .flat_map(|i| {
                [(&g0, 10.0), (&g1, 100.0)].map(|(l, base)| MetricPoint {
                    name: "m".into(),
                    labels: l.id(),
                    timestamp_ns: h + i * S,
                    value: base + i as f64,
                })
            })
            .collect();
        store.put_metric_points(&scope, &points).await.unwrap();
        let cache = Mutex::new(BoundedCache::counted(10, Default::default()));
        let range = QueryRange {
            scope,
            from_ns: h - 2 * S,
            to_ns: h + 2 * S,
            filters: vec![],
        };
        let (store, cache) = (&store, &cache);
        let scan = |s| async move { Ok(run_metric_scan(store, cache, s).await?) };
        let hours = |range: &QueryRange| {
            let scope = range.scope.clone();
            let (from, to) = (range.from_ns, range.to_ns);
            async move { store.metric_hours(&scope, "m", from, to).await.unwrap() }
        };
        assert_eq!(hours(&range).await, [0, 1]);
        let partial = gather(&range, hours(&range).await, "m", 4 * S, scan)
            .await
            .unwrap();
        let set = series(&range, "m", 4 * S, partial);
        assert_eq!(set.series.len(), 2);
        assert_eq!(set.series[0].labels["gpu"], "0");
        // (8 + 9 + 10 + 11) / 4 = 9.5 at the range's start.
        assert_eq!(
            set.series[0].points,
            [MetricValue {
                t_ns: h - 2 * S,
                value: 9.5
            }]
        );
        assert_eq!(set.series[1].points[0].value, 99.5);

        let filtered = QueryRange {
            filters: vec![("gpu".into(), "1".into())],
            ..range.clone()
        };
        let partial = gather(&filtered, hours(&filtered).await, "m", S, scan)
            .await
            .unwrap();
        let set = series(&filtered, "m", S, partial);
        assert_eq!(set.series.len(), 1);
        let values: Vec<f64> = set.series[0].points.iter().map(|p| p.value).collect();
        assert_eq!(values, [98.0, 99.0, 100.0, 101.0]);
    }
}
