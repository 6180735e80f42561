//! The metric charts under CPU over time: one small chart per metric that
//! has series in the range (GPU utilization, memory, power, …), one line
//! per series, on CPU over time's time axis, with its brush and pointer
//! line. Hidden when the range holds no metrics. The geometry is
//! `chart`'s.

use leptos::prelude::*;

use crate::api::MetricSeriesSet;
use crate::chart::{Chart, HEIGHT, WIDTH};
use crate::load::Load;
use crate::panels::BrushArea;

/// The metric charts of the current range and filters.
#[component]
pub fn MetricCharts(
    /// Every metric with matching series; the panel keeps showing the last
    /// answer while a new one loads, and hides when it fails or is empty.
    data: Signal<Load<Vec<MetricSeriesSet>>>,
    /// Called with a range picked on any chart, unix seconds.
    on_brush: Callback<(f64, f64)>,
    /// The pointer's place, shared with CPU over time.
    hover: RwSignal<Option<f64>>,
) -> impl IntoView {
    let shown = RwSignal::new(Vec::<MetricSeriesSet>::new());
    Effect::new(move |_| match data.get() {
        Load::Ready(sets) => shown.set(sets),
        Load::Failed(_) => shown.set(Vec::new()),
        Load::Loading => {}
    });
    move || {
        let sets = shown.get();
        (!sets.is_empty()).then(|| {
            let charts = sets
                .into_iter()
                .map(|set| view! { <MetricChart set=set on_brush=on_brush hover=hover /> })
                .collect_view();
            view! { <div class="panel metrics-panel">{charts}</div> }
        })
    }
}

/// One metric's chart: its name, a legend with each series' value at the
/// pointer (or its last value), and the lines.
#[component]
fn MetricChart(
    set: MetricSeriesSet,
    on_brush: Callback<(f64, f64)>,
    hover: RwSignal<Option<f64>>,
) -> impl IntoView {
    let chart = Chart::of(&set);
    let (from_ns, to_ns, step_ns) = (set.from_ns, set.to_ns, set.step_ns);
    let hovered_ns = move || {
        hover
            .get()
            .map(|f| from_ns + ((to_ns - from_ns) as f64 * f) as i64)
    };
    let unit = chart.unit;
    let legend = chart
        .lines
        .iter()
        .map(|line| {
            let line = line.clone();
            let (name, color) = (line.name.clone(), line.color.css());
            let value = move || {
                line.value_at(hovered_ns(), step_ns)
                    .map_or_else(|| "–".to_owned(), |v| unit.format(v))
            };
            view! {
                <span class="metric-key">
                    <span class="metric-swatch" style:background=color></span>
                    {name}
                    " "
                    <span class="metric-value">{value}</span>
                </span>
            }
        })
        .collect_view();
    let paths = chart
        .lines
        .iter()
        .map(|line| {
            view! {
                <path
                    class="metric-line"
                    data-series=line.name.clone()
                    stroke=line.color.css()
                    d=line.path.clone()
                ></path>
            }
        })
        .collect_view();
    let scale = format!("{} – {}", unit.format(chart.bottom), unit.format(chart.top));
    view! {
        <div class="metric-chart" data-metric=chart.name.clone()>
            <div class="metric-head">
                <h2 class="metric-name">{chart.name.clone()}</h2>
                <span class="metric-legend">{legend}</span>
                <span class="muted metric-scale">{scale}</span>
            </div>
            <BrushArea
                range=Signal::derive(move || Some((from_ns, to_ns)))
                on_brush=on_brush
                hover=hover
                class="metric-box"
            >
                <svg
                    class="metric-svg"
                    viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                    preserveAspectRatio="none"
                >
                    {paths}
                </svg>
            </BrushArea>
        </div>
    }
}
