//! The geometry of the metric charts: each series of a metric as an SVG
//! path over the range's time axis (the one CPU over time uses), its
//! colour, its name in the legend, and its value at a time. Plain Rust,
//! tested without a browser; `metrics_panel` draws what this computes.

use crate::api::{MetricSeries, MetricSeriesSet, MetricValue};
use crate::figures::Unit;
use crate::palette::{Rgb, hsl};

/// Width of the charts' SVG view box: x runs over the range in 0..WIDTH.
pub const WIDTH: f64 = 1000.0;
/// Height of the view box: y runs from HEIGHT (the bottom) to 0.
pub const HEIGHT: f64 = 100.0;

/// One metric's chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The metric.
    pub name: String,
    /// How its values read.
    pub unit: Unit,
    /// Value at the bottom of the chart.
    pub bottom: f64,
    /// Highest value of the scale (lines stay a little below the top
    /// edge, which is 5 % higher).
    pub top: f64,
    /// One line per series, in the order of the series.
    pub lines: Vec<Line>,
}

/// One series of a [`Chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Its name in the legend: the labels that tell it from the metric's
    /// other series (`gpu=1`), else its host or GPU.
    pub name: String,
    /// Its colour.
    pub color: Rgb,
    /// SVG path data in view-box coordinates; a gap in the readings
    /// starts a new sub-path.
    pub path: String,
    /// Its points, for values under the pointer.
    pub points: Vec<MetricValue>,
}

impl Chart {
    /// The chart of `set`.
    pub fn of(set: &MetricSeriesSet) -> Chart {
        let unit = Unit::of_metric(&set.name);
        let values = || {
            set.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.value))
        };
        let (min, max) = values().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        let (bottom, mut top) = if min.is_finite() {
            (min.min(0.0), max.max(0.0))
        } else {
            (0.0, 1.0)
        };
        if unit == Unit::Percent {
            top = top.max(100.0);
        }
        if top <= bottom {
            top = bottom + 1.0;
        }
        let names = series_names(&set.series);
        let lines = set
            .series
            .iter()
            .zip(names)
            .enumerate()
            .map(|(i, (series, name))| Line {
                name,
                color: series_color(i),
                path: path(set, &series.points, bottom, top),
                points: series.points.clone(),
            })
            .collect();
        Chart {
            name: set.name.clone(),
            unit,
            bottom,
            top,
            lines,
        }
    }
}

impl Line {
    /// The value of the step holding `t_ns`, if the series has one; the
    /// last value when `t_ns` is `None`.
    pub fn value_at(&self, t_ns: Option<i64>, step_ns: i64) -> Option<f64> {
        let Some(t) = t_ns else {
            return self.points.last().map(|p| p.value);
        };
        let i = self.points.partition_point(|p| p.t_ns <= t);
        let p = self.points.get(i.checked_sub(1)?)?;
        (t < p.t_ns.saturating_add(step_ns)).then_some(p.value)
    }
}

/// The path of one series: a point at the middle of each step, sub-paths
/// broken where steps hold no readings. A lone reading gets a dot (a
/// zero-length segment, drawn with round caps).
fn path(set: &MetricSeriesSet, points: &[MetricValue], bottom: f64, top: f64) -> String {
    // Headroom, so that a line at its peak is not drawn on the edge.
    let top = top + (top - bottom) * 0.05;
    let span = (set.to_ns - set.from_ns).max(1) as f64;
    let step = set.step_ns.max(1);
    let x = |t: i64| ((t - set.from_ns) as f64 + step as f64 / 2.0) / span * WIDTH;
    let y = |v: f64| HEIGHT - (v - bottom) / (top - bottom) * HEIGHT;
    let mut d = String::new();
    let mut run = 0;
    for (i, p) in points.iter().enumerate() {
        let joined = i > 0 && p.t_ns - points[i - 1].t_ns <= step;
        if !joined {
            if run == 1 {
                d.push_str(" l0.01,0");
            }
            run = 0;
        }
        let command = if joined { 'L' } else { 'M' };
        if !d.is_empty() {
            d.push(' ');
        }
        d.push_str(&format!("{command}{:.2},{:.2}", x(p.t_ns), y(p.value)));
        run += 1;
    }
    if run == 1 {
        d.push_str(" l0.01,0");
    }
    d
}

/// The legend names of `series`: the labels whose values differ between
/// them (`gpu=0`, `gpu=1`); a lone series is named by its GPU or host.
pub fn series_names(series: &[MetricSeries]) -> Vec<String> {
    let varying: Vec<&str> = {
        let mut names: Vec<&str> = series
            .iter()
            .flat_map(|s| s.labels.keys().map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter(|name| {
                let first = series[0].labels.get(*name);
                series.iter().any(|s| s.labels.get(*name) != first)
            })
            .collect()
    };
    series
        .iter()
        .map(|s| {
            let shown: Vec<String> = if varying.is_empty() {
                ["gpu", "host"]
                    .iter()
                    .find_map(|n| s.labels.get(*n).map(|v| format!("{n}={v}")))
                    .into_iter()
                    .collect()
            } else {
                varying
                    .iter()
                    .filter_map(|n| s.labels.get(*n).map(|v| format!("{n}={v}")))
                    .collect()
            };
            shown.join(" · ")
        })
        .collect()
}

/// Colour of the `i`th series: hues a golden angle apart, so neighbours
/// differ however many there are.
pub fn series_color(i: usize) -> Rgb {
    hsl(200.0 + i as f64 * 137.508, 0.65, 0.58)
}

/// The CPU-over-time chart's two paths in a 1000 × 100 box: busy cores as
/// an area from the bottom, idle cores as a band on top of it (so busy and
/// idle together reach the machines' capacity where agents count idle),
/// both scaled to 110% of the highest busy + idle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimelineShape {
    /// The busy area.
    pub busy: String,
    /// The idle band (empty when nothing was idle).
    pub idle: String,
    /// The most cores busy in one step.
    pub peak_busy: f64,
    /// Whether any step has idle cores.
    pub has_idle: bool,
}

/// [`TimelineShape`] of a timeline answer.
pub fn timeline_shape(t: &crate::api::Timeline) -> TimelineShape {
    let top_value = t
        .points
        .iter()
        .map(|p| p.cores + p.idle_cores)
        .fold(0.0f64, f64::max);
    let peak_busy = t.points.iter().map(|p| p.cores).fold(0.0f64, f64::max);
    let has_idle = t.points.iter().any(|p| p.idle_cores > 0.0);
    let span = (t.to_ns - t.from_ns).max(1) as f64;
    let top = if top_value > 0.0 {
        top_value * 1.1
    } else {
        1.0
    };
    let y = |cores: f64| 100.0 - cores / top * 100.0;
    let mut busy = String::from("M0,100");
    // The idle band's upper edge left to right, then its lower edge (the
    // busy line) right to left.
    let mut upper = Vec::new();
    let mut lower = Vec::new();
    for p in &t.points {
        let x0 = (p.t_ns - t.from_ns) as f64 / span * 1000.0;
        let x1 = ((p.t_ns + t.step_ns - t.from_ns) as f64 / span * 1000.0).min(1000.0);
        let (b, i) = (y(p.cores), y(p.cores + p.idle_cores));
        busy.push_str(&format!(" L{x0:.2},{b:.2} L{x1:.2},{b:.2}"));
        upper.push(format!("{x0:.2},{i:.2} L{x1:.2},{i:.2}"));
        lower.push(format!("{x1:.2},{b:.2} L{x0:.2},{b:.2}"));
    }
    busy.push_str(" L1000,100 Z");
    let idle = if has_idle {
        lower.reverse();
        format!("M{} L{} Z", upper.join(" L"), lower.join(" L"))
    } else {
        String::new()
    };
    TimelineShape {
        busy,
        idle,
        peak_busy,
        has_idle,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    // Guards the CPU chart's truth: idle is its own band above busy, the
    // scale holds busy + idle, and the peak named is the busy one.
    #[test]
    fn timeline_draws_idle_above_busy() {
        let point = |t_ns, cores, idle_cores| crate::api::TimelinePoint {
            t_ns,
            samples: 0,
            cores,
            idle_cores,
        };
        let t = crate::api::Timeline {
            from_ns: 0,
            to_ns: 20,
            step_ns: 10,
            points: vec![point(0, 0.5, 1.5), point(10, 2.0, 0.0)],
        };
        let shape = timeline_shape(&t);
        assert_eq!(shape.peak_busy, 2.0);
        assert!(shape.has_idle);
        // Top = 2.2: 0.5 busy sits at y = 77.27, 2.0 busy + 1.5 idle at 9.09.
        assert!(shape.busy.contains("L0.00,77.27"), "{}", shape.busy);
        assert!(shape.idle.starts_with("M0.00,9.09"), "{}", shape.idle);
        let no_idle = crate::api::Timeline {
            points: vec![point(0, 1.0, 0.0)],
            ..t
        };
        assert_eq!(timeline_shape(&no_idle).idle, "");
    }

    const S: i64 = 1_000_000_000;

    fn series(labels: &[(&str, &str)], points: &[(i64, f64)]) -> MetricSeries {
        MetricSeries {
            labels: labels
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            points: points
                .iter()
                .map(|&(t, value)| MetricValue { t_ns: t * S, value })
                .collect(),
        }
    }

    fn set(name: &str, series: Vec<MetricSeries>) -> MetricSeriesSet {
        MetricSeriesSet {
            name: name.into(),
            from_ns: 0,
            to_ns: 10 * S,
            step_ns: S,
            series,
        }
    }

    #[test]
    fn lines_span_the_range_and_break_at_gaps() {
        let chart = Chart::of(&set(
            "gpu.power_watts",
            vec![series(
                &[("gpu", "0")],
                &[(0, 0.0), (1, 100.0), (5, 50.0), (9, 100.0)],
            )],
        ));
        assert_eq!(chart.unit, Unit::Watts);
        assert_eq!((chart.bottom, chart.top), (0.0, 100.0));
        let d = &chart.lines[0].path;
        // Middles of steps 0 and 1, then a lone dot at 5, a lone dot at 9.
        assert!(
            d.starts_with("M50.00,100.00 L150.00,4.76 M550.00,52.38 l0.01,0 M950.00,4.76 l0.01,0"),
            "{d}"
        );
    }

    #[test]
    fn percent_charts_reach_a_hundred_and_negatives_show() {
        let chart = Chart::of(&set(
            "gpu.utilization_percent",
            vec![series(&[], &[(0, 12.0)])],
        ));
        assert_eq!(chart.top, 100.0);
        let chart = Chart::of(&set("x", vec![series(&[], &[(0, -5.0), (1, 5.0)])]));
        assert_eq!(chart.bottom, -5.0);
        let empty = Chart::of(&set("x", vec![]));
        assert_eq!((empty.bottom, empty.top), (0.0, 1.0));
    }

    #[test]
    fn legend_names_show_what_tells_series_apart() {
        let gpus = [
            series(&[("host", "a"), ("gpu", "0"), ("gpu_name", "H100")], &[]),
            series(&[("host", "a"), ("gpu", "1"), ("gpu_name", "H100")], &[]),
        ];
        assert_eq!(series_names(&gpus), ["gpu=0", "gpu=1"]);
        assert_eq!(series_names(&gpus[..1]), ["gpu=0"]);
        let hosts = [series(&[("host", "a")], &[]), series(&[("host", "b")], &[])];
        assert_eq!(series_names(&hosts), ["host=a", "host=b"]);
        assert_eq!(series_names(&hosts[1..]), ["host=b"]);
        assert_ne!(series_color(0), series_color(1));
    }

    #[test]
    fn values_under_the_pointer_come_from_their_step() {
        let chart = Chart::of(&set(
            "m",
            vec![series(&[], &[(2, 1.0), (3, 2.0), (7, 3.0)])],
        ));
        let line = &chart.lines[0];
        assert_eq!(line.value_at(Some(2 * S), S), Some(1.0));
        assert_eq!(line.value_at(Some(3 * S + 999), S), Some(2.0));
        assert_eq!(line.value_at(Some(5 * S), S), None);
        assert_eq!(line.value_at(Some(S), S), None);
        assert_eq!(line.value_at(None, S), Some(3.0));
    }
}
