//! The panels around the flamegraph: top functions, CPU over time with a
//! brush (the brush area the metric charts share), label filters.

use std::collections::BTreeMap;

use leptos::html;
use leptos::prelude::*;

use crate::api::{LabelValues, Timeline, TopFunction};
use crate::chart::TimelineShape;
use crate::figures;
use crate::load::Load;

/// Columns the top table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortBy {
    Name,
    SelfCores,
    TotalCores,
}

/// Top functions by self or total time; a click on a row calls `on_pick`.
#[component]
pub fn TopTable(rows: Signal<Load<Vec<TopFunction>>>, on_pick: Callback<String>) -> impl IntoView {
    let sort = RwSignal::new((SortBy::SelfCores, true));
    let sorted = move || {
        let mut rows = rows.get().ready().cloned().unwrap_or_default();
        let (by, descending) = sort.get();
        rows.sort_by(|a, b| {
            let order = match by {
                SortBy::Name => a.name.cmp(&b.name),
                SortBy::SelfCores => a.self_samples.cmp(&b.self_samples),
                SortBy::TotalCores => a.total_samples.cmp(&b.total_samples),
            };
            if descending { order.reverse() } else { order }
        });
        rows
    };
    let header = move |by: SortBy, label: &'static str| {
        let click = move |_| {
            sort.update(|(current, descending)| {
                if *current == by {
                    *descending = !*descending;
                } else {
                    *current = by;
                    *descending = by != SortBy::Name;
                }
            })
        };
        let arrow = move || match sort.get() {
            (current, true) if current == by => " ▾",
            (current, false) if current == by => " ▴",
            _ => "",
        };
        view! {
            <th class="sortable" data-sort=label on:click=click>
                {label}
                {arrow}
            </th>
        }
    };
    view! {
        <div class="panel top-panel">
            <h2>"Top functions"</h2>
            {move || match rows.get() {
                Load::Failed(message) => {
                    view! { <p class="error">{message}</p> }.into_any()
                }
                _ => {
                    view! {
                        <table class="top-table">
                            <thead>
                                <tr>
                                    {header(SortBy::Name, "function")}
                                    {header(SortBy::SelfCores, "self")}
                                    {header(SortBy::TotalCores, "total")}
                                </tr>
                            </thead>
                            <tbody>
                                {move || {
                                    sorted()
                                        .into_iter()
                                        .map(|row| {
                                            let name = row.name.clone();
                                            let title = format!(
                                                "{} · {} · {} self samples, {} total",
                                                row.kind.as_str(),
                                                row.module.as_deref().unwrap_or("unknown binary"),
                                                row.self_samples,
                                                row.total_samples,
                                            );
                                            view! {
                                                <tr
                                                    class="top-row"
                                                    title=title
                                                    on:click=move |_| on_pick.run(name.clone())
                                                >
                                                    <td class="fn-name">{row.name.clone()}</td>
                                                    <td class="num">{figures::cores(row.self_cores)}</td>
                                                    <td class="num">{figures::cores(row.total_cores)}</td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()
                                }}
                            </tbody>
                        </table>
                    }
                        .into_any()
                }
            }}
        </div>
    }
}

/// A chart area over the query's time range that picks a range by
/// dragging (calling `on_brush` with it in unix seconds) and shows a line
/// at the pointer's time, shared with every other such area through
/// `hover`, so that CPU over time and the metric charts read together.
#[component]
pub fn BrushArea(
    /// The range across the area's width, `(from_ns, to_ns)`; `None`
    /// while it is not known (dragging then picks nothing).
    range: Signal<Option<(i64, i64)>>,
    /// Called with the picked range, unix seconds.
    on_brush: Callback<(f64, f64)>,
    /// The pointer's place as a fraction (0 to 1) of the width, shared by
    /// the areas that draw the same range.
    hover: RwSignal<Option<f64>>,
    /// CSS class of the area (it sizes it).
    class: &'static str,
    /// What is drawn in the area.
    children: Children,
) -> impl IntoView {
    let box_ref = NodeRef::<html::Div>::new();
    let brush = RwSignal::new(None::<(f64, f64)>);
    let fraction = move |e: &web_sys::MouseEvent| {
        box_ref.get_untracked().map_or(0.0, |b| {
            let r = b.get_bounding_client_rect();
            ((e.client_x() as f64 - r.left()) / r.width().max(1.0)).clamp(0.0, 1.0)
        })
    };
    let on_down = move |e: web_sys::MouseEvent| {
        let at = fraction(&e);
        brush.set(Some((at, at)));
    };
    let on_move = move |e: web_sys::MouseEvent| {
        let at = fraction(&e);
        hover.set(Some(at));
        if let Some((start, _)) = brush.get_untracked() {
            brush.set(Some((start, at)));
        }
    };
    let on_up = move |_| {
        let Some((a, b)) = brush.get_untracked() else {
            return;
        };
        brush.set(None);
        let Some((from_ns, to_ns)) = range.get_untracked() else {
            return;
        };
        let (lo, hi) = (a.min(b), a.max(b));
        if hi - lo < 0.005 {
            return;
        }
        let span = (to_ns - from_ns) as f64;
        let at = |f: f64| (from_ns as f64 + f * span) / 1e9;
        on_brush.run((at(lo), at(hi)));
    };
    view! {
        <div
            class=class
            node_ref=box_ref
            on:mousedown=on_down
            on:mousemove=on_move
            on:mouseup=on_up
            on:mouseleave=move |_| hover.set(None)
        >
            {children()}
            {move || {
                brush
                    .get()
                    .map(|(a, b)| {
                        view! {
                            <div
                                class="brush"
                                style:left=format!("{}%", a.min(b) * 100.0)
                                style:width=format!("{}%", (a - b).abs() * 100.0)
                            ></div>
                        }
                    })
            }}
            {move || {
                hover
                    .get()
                    .map(|at| {
                        view! { <div class="hover-line" style:left=format!("{}%", at * 100.0)></div> }
                    })
            }}
        </div>
    }
}

/// CPU over time: busy cores as the area, idle cores (where agents count
/// them) as a band above it, so an idle machine draws as idle; dragging
/// across it calls `on_brush` with the picked range in unix seconds.
#[component]
pub fn TimelineChart(
    data: Signal<Load<Timeline>>,
    on_brush: Callback<(f64, f64)>,
    /// The pointer's time, shared with the metric charts.
    hover: RwSignal<Option<f64>>,
) -> impl IntoView {
    let range = Signal::derive(move || data.with(|d| d.ready().map(|t| (t.from_ns, t.to_ns))));
    let shape = move || {
        let Some(t) = data.get().ready().cloned() else {
            return TimelineShape::default();
        };
        crate::chart::timeline_shape(&t)
    };
    view! {
        <div class="panel timeline-panel">
            <div class="timeline-head">
                <h2>"CPU over time"</h2>
                <span class="muted">
                    {move || {
                        let s = shape();
                        let idle = if s.has_idle { " (idle above, faint)" } else { "" };
                        format!("peak {} cores busy{idle} · drag to pick a range", figures::cores(s.peak_busy))
                    }}
                </span>
            </div>
            <BrushArea range=range on_brush=on_brush hover=hover class="timeline-box">
                <svg class="timeline" viewBox="0 0 1000 100" preserveAspectRatio="none">
                    <path class="timeline-idle" d=move || shape().idle></path>
                    <path class="timeline-area" d=move || shape().busy></path>
                </svg>
            </BrushArea>
        </div>
    }
}

/// A picker per label name (host, process, thread, container, …).
#[component]
pub fn LabelFilters(
    labels: Signal<Load<LabelValues>>,
    chosen: Signal<BTreeMap<String, String>>,
    on_change: Callback<(String, String)>,
) -> impl IntoView {
    move || {
        let labels = labels.get().ready().cloned().unwrap_or_default();
        let chosen = chosen.get();
        labels
            .into_iter()
            .map(|(name, values)| {
                let current = chosen.get(&name).cloned().unwrap_or_default();
                let label_name = name.clone();
                // Samples of another weight (off-CPU time, allocations,
                // heap) are read only when their label is chosen: without
                // a choice these pickers show CPU time, not "any".
                let unchosen = match name.as_str() {
                    "sample_type" | "device_kind" => "CPU time",
                    _ => "any",
                };
                let options = values
                    .into_iter()
                    .map(|(value, samples)| {
                        let selected = value == current;
                        view! {
                            <option value=value.clone() selected=selected>
                                {format!("{value} ({samples})")}
                            </option>
                        }
                    })
                    .collect_view();
                view! {
                    <label class="filter">
                        <span>{name.clone()}</span>
                        <select
                            data-label=name.clone()
                            on:change=move |e| on_change.run((label_name.clone(), event_target_value(&e)))
                        >
                            <option value="" selected=current.is_empty()>
                                {unchosen}
                            </option>
                            {options}
                        </select>
                    </label>
                }
            })
            .collect_view()
    }
}
