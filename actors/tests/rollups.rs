//! Rollups (issue 16, item 7): queries of long ranges read each whole
//! day's rollup, and each other whole hour's, instead of the samples, and
//! answer exactly what the samples answer; a late write makes its hour's
//! and day's rollups stale until the job rolls them again; filters the
//! rollups cannot answer read samples.

mod common;

use kiln_actors::query::{FlamegraphQuery, Granularity, QueryRange, TimelineQuery, TopQuery};
use kiln_actors::rollup::Rollups;
use kiln_model::flamewire::read;
use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet, NANOS_PER_HOUR};
use kiln_storage::{ProfileStore, Resolution, Roles, RollupRow, Scope};

use common::{Credentials, Pipeline, T0};

const H: i64 = NANOS_PER_HOUR;
/// Hours of data, ending at [`T0`] (itself on an hour): two whole days
/// and parts of two more.
const HOURS: i64 = 60;
/// The first hour's start.
fn first_hour_ns() -> i64 {
    (T0 - HOURS * H).div_euclid(H) * H
}

fn frames(names: &[&str]) -> Vec<Frame> {
    names
        .iter()
        .map(|n| Frame::named(FrameKind::Native, *n))
        .collect()
}

/// Publishes [`HOURS`] hours of a small fleet: four hosts (two agents at
/// 100 Hz, two at 19 Hz), two services, a handful of stacks, each host
/// with its own pids and threads; off-CPU samples and GPU launch counts
/// beside the CPU samples, as an agent sends them.
async fn publish_fleet(p: &Pipeline) {
    let stacks = [
        frames(&["main", "serve", "parse"]),
        frames(&["main", "serve", "render"]),
        frames(&["main", "gc"]),
        frames(&["main", "serve", "parse", "memcpy"]),
    ];
    for (i, host) in ["h1", "h2", "h3", "h4"].into_iter().enumerate() {
        let period = if i < 2 { 10_000_000 } else { 52_631_578 };
        let mut b = BatchBuilder::new(host, T0, period);
        for minute in (0..HOURS * 60).step_by(7) {
            let t = first_hour_ns() + minute * 60_000_000_000 + i as i64 * 1_000_000_000;
            let process = if minute % 2 == 0 { "web" } else { "db" };
            let labels = LabelSet::new()
                .with("host", host)
                .with("pid", format!("{}", 100 + minute % 5))
                .with("tid", format!("{}", 200 + minute % 3))
                .with("process", process)
                .with("device_kind", "cpu");
            let stack = &stacks[(minute as usize + i) % stacks.len()];
            b.add(t, stack, &labels, 1 + (minute % 4) as u64);
            let off_cpu = labels.clone().with("device_kind", "off_cpu");
            b.add(t, &stacks[2], &off_cpu, 5);
            let launches = LabelSet::new()
                .with("host", host)
                .with("process", process)
                .with("device_kind", "gpu")
                .with("gpu_weight", "launches");
            b.add(t, &frames(&["main", "launch", "[gpu] gemm"]), &launches, 3);
        }
        p.publish(host, &b.finish().encode()).await;
    }
}

fn range(p: &Pipeline, from_ns: i64, to_ns: i64, filters: &[(&str, &str)]) -> QueryRange {
    QueryRange {
        scope: p.scope.clone(),
        from_ns,
        to_ns,
        filters: filters
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
    }
}

/// Every answer the test compares, as text: collapsed flamegraphs with
/// and without filters, top functions (cores: CPU time), a timeline on
/// the hour grid, over a range whose first and last hours are partial.
async fn answers(p: &Pipeline) -> Vec<String> {
    let (from, to) = (first_hour_ns() + H / 3, T0 + H);
    let mut out = Vec::new();
    for filters in [
        &[][..],
        &[("process", "web")][..],
        &[("device_kind", "off_cpu")][..],
        &[("gpu_weight", "launches")][..],
        &[("host", "h3")][..],
    ] {
        let wire = p
            .query
            .send(FlamegraphQuery(
                range(p, from, to, filters),
                Granularity::Function,
            ))
            .await
            .unwrap()
            .unwrap();
        let mut collapsed = Vec::new();
        read(&wire.to_bytes(), |g| g.write_collapsed(&mut collapsed))
            .unwrap()
            .unwrap();
        out.push(format!(
            "flamegraph {filters:?}:\n{}",
            String::from_utf8(collapsed).unwrap()
        ));
        let top = p
            .query
            .send(TopQuery {
                range: range(p, from, to, filters),
                limit: 10,
            })
            .await
            .unwrap()
            .unwrap();
        out.push(format!("top {filters:?}: {top:?}"));
    }
    // On the hour grid (hour rollups), and on the day grid (day rollups).
    let first_day_ns = Resolution::Day.window_of(first_hour_ns() / H) * H;
    // And off both grids: windows that straddle a step read samples, the
    // others their rollups.
    for (from, step_ns) in [
        (first_hour_ns(), 2 * H),
        (first_day_ns, 24 * H),
        (first_hour_ns() + H / 3, 5 * H),
        (first_day_ns - 7 * H, 30 * H),
    ] {
        let timeline = p
            .query
            .send(TimelineQuery {
                range: range(p, from, to, &[]),
                step_ns,
            })
            .await
            .unwrap()
            .unwrap();
        out.push(format!("timeline from {from} by {step_ns}: {timeline:?}"));
    }
    out
}

/// Adds `extra` to the count of a CPU row of a rollup, its version kept:
/// a rollup a query reads shows it.
async fn doctor(p: &Pipeline, resolution: Resolution, window: i64, extra: u64) {
    let scope: &Scope = &p.scope;
    let all = (i64::MIN, i64::MAX);
    let version = p
        .store
        .rollup_versions(scope, resolution, all.0, all.1)
        .await
        .unwrap()
        .into_iter()
        .find(|v| v.hour == window)
        .expect("the window is rolled")
        .version;
    let mut rows: Vec<RollupRow> = p
        .store
        .scan_rollup(scope, resolution, window)
        .await
        .unwrap();
    let ids: Vec<_> = rows.iter().map(|r| r.labels).collect();
    let sets = p.store.get_label_sets(scope.tenant(), &ids).await.unwrap();
    let cpu = sets
        .iter()
        .position(|set| set.as_ref().unwrap().get("device_kind") == Some("cpu"))
        .expect("the rollup has CPU rows");
    assert_eq!(
        sets[cpu].as_ref().unwrap().get("host"),
        None,
        "rollups drop per-instance labels"
    );
    rows[cpu].count += extra;
    p.store
        .put_rollup(scope, resolution, window, version, &rows)
        .await
        .unwrap();
}

/// The flamegraph total of the whole range, no filter.
async fn total(p: &Pipeline) -> u64 {
    let wire = p
        .query
        .send(FlamegraphQuery(
            range(p, first_hour_ns(), T0 + H, &[]),
            Granularity::Function,
        ))
        .await
        .unwrap()
        .unwrap();
    read(&wire.to_bytes(), |g| g.node(0).total).unwrap()
}

#[actix_rt::test]
async fn rolled_up_hours_and_days_answer_what_their_samples_answer() {
    let p = Pipeline::start(2).await;
    let credentials = Credentials::new(p.dir.path(), &p.scope, Roles::INGEST_READ).await;
    let job = Rollups::new(p.store.clone(), credentials.metadata.clone());
    publish_fleet(&p).await;

    let from_samples = answers(&p).await;
    let report = job.run_once(T0 + 2 * H).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.rolled_hours, HOURS as u64, "{report:?}");
    // The days that ended by then: three, the last one of them partial.
    assert_eq!(report.rolled_days, 3, "{report:?}");
    assert!(
        report.rollup_rows * 4 < report.sample_rows,
        "hosts, pids and tids summed away: {report:?}"
    );
    let from_rollups = answers(&p).await;
    for (samples, rollups) in from_samples.iter().zip(&from_rollups) {
        assert_eq!(samples, rollups, "the same query from samples and rollups");
    }
    // A second pass finds nothing to do.
    assert_eq!(job.run_once(T0 + 2 * H).await.rolled_hours, 0);
}

#[actix_rt::test]
async fn a_late_write_makes_its_rollups_stale_until_rolled_again() {
    let p = Pipeline::start(2).await;
    let credentials = Credentials::new(p.dir.path(), &p.scope, Roles::INGEST_READ).await;
    let job = Rollups::new(p.store.clone(), credentials.metadata.clone());
    publish_fleet(&p).await;
    let before = total(&p).await;
    job.run_once(T0 + 2 * H).await;
    assert_eq!(total(&p).await, before);

    // Proof that queries read rollups: a day's and an hour's (of the day
    // not yet rolled) doctored in place, versions kept, show.
    let first_hour = first_hour_ns() / H;
    let whole_day = Resolution::Day.window_of(first_hour) + 24;
    let last_day_hour = Resolution::Day.window_of(T0 / H) + 2;
    doctor(&p, Resolution::Day, whole_day, 1_000).await;
    doctor(&p, Resolution::Hour, last_day_hour, 500).await;
    assert_eq!(
        total(&p).await,
        before + 1_500,
        "the doctored rollups are read"
    );

    // A late batch into an hour of that day: the day's rollup and the
    // hour's are stale, the day is read from its hours' rollups and that
    // hour from its samples (the day's doctoring gone, the late samples
    // in) at once.
    let late_hour = whole_day + 6;
    let mut late = BatchBuilder::new("h9", T0, 10_000_000);
    let labels = LabelSet::new().with("host", "h9").with("process", "web");
    late.add(late_hour * H + 17, &frames(&["main", "late"]), &labels, 9);
    p.publish("h9", &late.finish().encode()).await;
    assert_eq!(total(&p).await, before + 500 + 9);
    let again = job.run_once(T0 + 2 * H).await;
    assert_eq!((again.rolled_hours, again.rolled_days), (1, 1), "{again:?}");
    assert_eq!(total(&p).await, before + 500 + 9);
}

/// Sealing (`kiln_storage::SealedStore`): the pass moves every settled
/// hour's rows into one segment each, and every answer, those read from
/// samples (a per-host filter, which rollups cannot answer) included, is
/// what the rows gave; a late write into a sealed hour is read at once
/// and sealed by the next pass.
#[actix_rt::test]
async fn sealed_hours_answer_what_their_rows_answered() {
    let p = Pipeline::start(2).await;
    let credentials = Credentials::new(p.dir.path(), &p.scope, Roles::INGEST_READ).await;
    publish_fleet(&p).await;
    let from_rows = answers(&p).await;
    let before = total(&p).await;

    let job =
        Rollups::new(p.sealed.clone(), credentials.metadata.clone()).sealing(p.sealed.clone());
    let report = job.run_once(T0 + 2 * H).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.sealed_hours, HOURS as u64, "{report:?}");
    assert_eq!(report.sealed_rows, report.sample_rows, "{report:?}");
    let all = (i64::MIN, i64::MAX);
    assert!(
        p.store
            .scan_samples(&p.scope, all.0, all.1)
            .await
            .unwrap()
            .is_empty(),
        "rows left in the row store"
    );
    let (bytes, segments) = p.sealed.segment_bytes(&p.scope).await.unwrap();
    assert_eq!((segments, bytes), (HOURS as u64, report.segment_bytes));

    let from_segments = answers(&p).await;
    for (rows, sealed) in from_rows.iter().zip(&from_segments) {
        assert_eq!(rows, sealed, "the same query from rows and from segments");
    }

    let sealed_hour = first_hour_ns() / H + 5;
    let mut late = BatchBuilder::new("h9", T0, 10_000_000);
    let labels = LabelSet::new().with("host", "h9").with("process", "web");
    late.add(sealed_hour * H + 17, &frames(&["main", "late"]), &labels, 9);
    p.publish("h9", &late.finish().encode()).await;
    assert_eq!(total(&p).await, before + 9);
    let again = job.run_once(T0 + 2 * H).await;
    assert_eq!((again.sealed_hours, again.sealed_rows), (1, 1), "{again:?}");
    assert_eq!(total(&p).await, before + 9);
    assert_eq!(
        p.sealed.segment_bytes(&p.scope).await.unwrap().1,
        HOURS as u64
    );
}
