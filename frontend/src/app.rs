//! The page: toolbar, CPU over time and the metric charts, flamegraph,
//! side panels; all settings in the URL, all data from the API.

use std::sync::Arc;

use leptos::ev;
use leptos::html;
use leptos::prelude::*;
use regex::Regex;

use crate::api::{self, LabelValues, MetricSeriesSet, Timeline, TopFunction, parse_json};
use crate::browser::{blob_url, current_query, download, replace_query};
use crate::canvas::Paint;
use crate::diff::{Diff, Significant};
use crate::fetch::{fetch_into, load_into};
use crate::figures;
use crate::flame_view::{CanvasHandle, Flame};
use crate::gpu_view::GpuView;
use crate::graph::Graph;
use crate::keys;
use crate::load::Load;
use crate::metrics_panel::MetricCharts;
use crate::overlay::overlay;
use crate::panels::{LabelFilters, TimelineChart, TopTable};
use crate::sandwich::sandwich;
use crate::search::{Search, matched_share};
use crate::state::{Span, ViewState};
use crate::toolbar::Toolbar;
use crate::transform::Rewrites;

/// A sandwich ready to draw.
#[derive(Debug, Clone)]
struct SandwichGraphs {
    name: String,
    callers: Arc<Graph>,
    callees: Arc<Graph>,
    total: u64,
    self_count: u64,
}

fn parse_graph(bytes: Vec<u8>) -> Result<Arc<Graph>, String> {
    let started = crate::canvas::now_ms();
    Graph::from_bytes(&bytes)
        .map(|graph| Arc::new(graph.with_load_ms(crate::canvas::now_ms() - started)))
        .map_err(|e| format!("the server sent a flamegraph this page cannot read: {e}"))
}

/// Compiles a hide/merge pattern; an empty one is off.
fn pattern(text: &str, what: &str) -> Result<Option<Regex>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    Regex::new(text)
        .map(Some)
        .map_err(|e| format!("{what}: {text:?} is not a regular expression: {e}"))
}

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let state = RwSignal::new(ViewState::from_query(&current_query()));
    Effect::new(move |_| replace_query(&state.with(ViewState::to_query)));
    Effect::new(move |_| {
        let light = state.with(|s| s.light);
        if let Some(root) = document().document_element() {
            let _ = root.set_attribute("data-theme", if light { "light" } else { "dark" });
        }
    });

    // Data.
    let api_query = Memo::new(move |_| Some(state.with(ViewState::api_query)));
    let base_query = Memo::new(move |_| state.with(|s| s.diffing().then(|| s.base_api_query())));
    let range_query = Memo::new(move |_| {
        Some(state.with(|s| {
            ViewState {
                labels: Default::default(),
                ..s.clone()
            }
            .api_query()
        }))
    });
    let raw = RwSignal::new(Load::<Arc<Graph>>::Loading);
    let base_raw = RwSignal::new(Load::<Arc<Graph>>::Loading);
    // Which functions moved beyond sampling noise, for the diff to mark.
    let compare_query =
        Memo::new(move |_| state.with(|s| s.diffing().then(|| s.compare_api_query())));
    let compared = RwSignal::new(Load::<api::CompareAnswer>::Loading);
    let top = RwSignal::new(Load::<Vec<TopFunction>>::Loading);
    let timeline = RwSignal::new(Load::<Timeline>::Loading);
    let labels = RwSignal::new(Load::<LabelValues>::Loading);
    let flamewire = |q: &String| format!("/api/v1/flamegraph?format=flamewire&{q}");
    fetch_into(api_query, raw, flamewire, parse_graph);
    fetch_into(base_query, base_raw, flamewire, parse_graph);
    fetch_into(
        compare_query,
        compared,
        |q| format!("/api/v1/compare?{q}"),
        parse_json,
    );
    fetch_into(
        api_query,
        top,
        |q| format!("/api/v1/top?limit=200&{q}"),
        parse_json,
    );
    fetch_into(
        api_query,
        timeline,
        |q| format!("/api/v1/timeline?{q}"),
        parse_json,
    );
    fetch_into(
        range_query,
        labels,
        |q| format!("/api/v1/labels?{q}"),
        parse_json,
    );
    let gpu_kernels = RwSignal::new(Load::<kiln_model::GpuKernels>::Loading);
    fetch_into(
        api_query,
        gpu_kernels,
        |q| format!("/api/v1/gpu/kernels?{q}"),
        parse_json,
    );
    let kernel_query = Memo::new(move |_| state.with(ViewState::kernel_api_query));
    let gpu_instructions = RwSignal::new(Load::<kiln_model::GpuInstructions>::Loading);
    fetch_into(
        kernel_query,
        gpu_instructions,
        |q| format!("/api/v1/gpu/instructions?{q}"),
        parse_json,
    );
    let on_kernel = Callback::new(move |kernel: String| state.update(|s| s.kernel = kernel));
    let metrics = RwSignal::new(Load::<Vec<MetricSeriesSet>>::Loading);
    load_into(api_query, metrics, |q| {
        let q = q.clone();
        async move { api::metric_series(&q).await }
    });
    // What share of the range's user stacks reached their root, from the
    // agents' own metric: shown beside the summary, so a user knows how far
    // to trust the callers.
    let stack_shares = move || {
        metrics.with(|m| {
            m.ready()
                .and_then(|sets| sets.iter().find_map(kiln_model::StackWalkShares::of))
        })
    };
    // The pointer's place over the time charts, shared by all of them.
    let hover = RwSignal::new(None::<f64>);

    // Rewrites, search, diff, sandwich.
    let rewrite_settings =
        Memo::new(move |_| state.with(|s| (s.collapse_recursion, s.hide.clone(), s.merge.clone())));
    let rewrite_error = RwSignal::new(None::<String>);
    let shown = RwSignal::new(None::<Arc<Graph>>);
    let base_shown = RwSignal::new(None::<Arc<Graph>>);
    Effect::new(move |_| {
        let (collapse_recursion, hide, merge) = rewrite_settings.get();
        let rewrites = pattern(&hide, "hide").and_then(|hide| {
            Ok(Rewrites {
                hide,
                merge: pattern(&merge, "merge")?,
                collapse_recursion,
            })
        });
        let rewrites = match rewrites {
            Ok(r) => {
                rewrite_error.set(None);
                r
            }
            Err(message) => {
                rewrite_error.set(Some(message));
                Rewrites::default()
            }
        };
        let apply = |g: &Arc<Graph>| {
            if rewrites.is_empty() {
                g.clone()
            } else {
                Arc::new(rewrites.apply(g))
            }
        };
        shown.set(raw.with(|r| r.ready().map(apply)));
        base_shown.set(base_raw.with(|r| r.ready().map(apply)));
    });
    let search_text = Memo::new(move |_| state.with(|s| s.search.clone()));
    let diffing = Memo::new(move |_| state.with(ViewState::diffing));
    // The diff's merged graph is built only when a graph changes, never on
    // a repaint (search, colours, the view going to the URL).
    let diff = RwSignal::new(None::<Arc<Diff>>);
    Effect::new(move |_| {
        diff.set(match (diffing.get(), shown.get(), base_shown.get()) {
            (true, Some(now), Some(base)) => Some(Arc::new(Diff::new(&now, &base))),
            _ => None,
        });
    });
    // The diff with the comparison's flagged functions marked, once it is
    // in (a failed comparison leaves every node coloured by its change).
    let marked = RwSignal::new(None::<Arc<Diff>>);
    Effect::new(move |_| {
        let significant = compared.with(|c| {
            c.ready().map(|answer| {
                Significant::new(
                    answer
                        .functions
                        .iter()
                        .filter(|f| f.significant)
                        .map(|f| (f.name.clone(), f.module.clone())),
                )
            })
        });
        marked.set(diff.get().map(|d| match &significant {
            Some(significant) => Arc::new(d.marked(significant)),
            None => d,
        }));
    });
    // What the main canvas draws: the diff's merged graph while diffing.
    let drawn = Signal::derive(move || {
        diff.with(|d| d.as_ref().map(|d| d.graph.clone()))
            .or_else(|| shown.get())
    });
    let colors = Memo::new(move |_| state.with(|s| (s.color, s.light)));
    let matched = RwSignal::new(None::<f64>);
    let paint = RwSignal::new(Arc::new(Paint::default()));
    // The sandwich's graphs have their own nodes: no diff there.
    let side_paint = RwSignal::new(Arc::new(Paint::default()));
    Effect::new(move |_| {
        let graph = shown.get();
        let search = Search::new(&search_text.get());
        let (color, light) = colors.get();
        matched.set(
            graph
                .as_ref()
                .zip(search.as_ref())
                .map(|(g, s)| matched_share(g, &s.frame_mask(g))),
        );
        let diff = marked.get();
        side_paint.set(Arc::new(Paint {
            color,
            search: search.clone(),
            diff: None,
            light,
        }));
        paint.set(Arc::new(Paint {
            color,
            search,
            diff,
            light,
        }));
    });
    let sandwich_name = Memo::new(move |_| state.with(|s| s.sandwich.clone()));
    let sandwich_graphs = RwSignal::new(None::<SandwichGraphs>);
    Effect::new(move |_| {
        let name = sandwich_name.get();
        let found = shown.with(|g| {
            g.as_ref()
                .filter(|_| !name.is_empty())
                .and_then(|g| sandwich(g, &name))
        });
        sandwich_graphs.set(found.map(|s| SandwichGraphs {
            name,
            callers: Arc::new(s.callers),
            callees: Arc::new(s.callees),
            total: s.total,
            self_count: s.self_count,
        }));
    });

    // Keyboard shortcuts.
    let reset = RwSignal::new(0u32);
    let search_ref = NodeRef::<html::Input>::new();
    keys::install(state, reset, search_ref);

    let main_canvas: CanvasHandle = StoredValue::new_local(None);
    let callers_canvas: CanvasHandle = StoredValue::new_local(None);
    let callees_canvas: CanvasHandle = StoredValue::new_local(None);

    let set = move |f: fn(&mut ViewState, String)| {
        move |e: ev::Event| {
            let value = event_target_value(&e);
            state.update(|s| f(s, value));
        }
    };
    let on_focus = Callback::new(move |path: Vec<String>| {
        state.update(|s| {
            s.focus = path;
            s.span = None;
        })
    });
    let on_span = Callback::new(move |span: Span| state.update(|s| s.span = Some(span)));
    let on_pick = Callback::new(move |name: String| {
        state.update(|s| {
            s.search = format!("^{}$", regex::escape(&name));
            s.sandwich = name;
        })
    });
    let on_brush = Callback::new(move |(from, to): (f64, f64)| {
        state.update(|s| {
            s.from = format!("{from:.3}");
            s.to = format!("{to:.3}");
            s.focus.clear();
            s.span = None;
        })
    });
    let on_label = Callback::new(move |(name, value): (String, String)| {
        state.update(|s| {
            if value.is_empty() {
                s.labels.remove(&name);
            } else {
                s.labels.insert(name, value);
            }
        })
    });
    let export_png = move |_| {
        if let Some(url) = main_canvas.with_value(|c| c.as_ref().and_then(|c| c.to_png_url())) {
            download(&url, "kiln-flamegraph.png");
        }
    };
    let export_svg = move |_| {
        let svg = main_canvas.with_value(|c| c.as_ref().map(|c| c.to_svg()));
        if let Some(url) = svg.and_then(|svg| blob_url(&svg, "image/svg+xml")) {
            // The object URL lives as long as the page: revoking it right
            // after the click can cancel the download.
            download(&url, "kiln-flamegraph.svg");
        }
    };
    let export_href = move |format: &'static str| {
        move || {
            format!(
                "/api/v1/flamegraph?format={format}&{}",
                api_query.get().unwrap_or_default()
            )
        }
    };

    let summary = move || {
        let Some(g) = shown.get() else {
            return String::new();
        };
        let mut text = format!(
            "{} samples · {} cores average · {} nodes · {} KiB flamewire",
            g.root_total(),
            figures::cores(g.cores(g.root_total())),
            g.node_count(),
            g.byte_len() / 1024
        );
        if let Some(share) = matched.get() {
            text.push_str(&format!(" · search matches {:.2}%", share * 100.0));
        }
        text
    };
    let focus_text = move || state.with(|s| s.focus.join(" › "));
    // Memos, so that the canvas follows these and not every change of the
    // state (the view going to the URL among them).
    let icicle = Memo::new(move |_| state.with(|s| s.icicle));
    let focus = Memo::new(move |_| state.with(|s| s.focus.clone()));
    let span = Memo::new(move |_| state.with(|s| s.span));
    let value_of = move |f: fn(&ViewState) -> String| move || state.with(f);

    view! {
        <Toolbar state=state search_ref=search_ref reset=reset />
        <section class="subbar">
            <LabelFilters
                labels=labels.into()
                chosen=Signal::derive(move || state.with(|s| s.labels.clone()))
                on_change=on_label
            />
            <label class="check">
                <input type="checkbox" class="collapse" prop:checked=move || state.with(|s| s.collapse_recursion)
                    on:change=move |_| state.update(|s| s.collapse_recursion = !s.collapse_recursion) />
                "collapse recursion"
            </label>
            <label class="field">
                <span>"hide"</span>
                <input class="hide" placeholder="regex" prop:value=value_of(|s| s.hide.clone()) on:change=set(|s, v| s.hide = v) />
            </label>
            <label class="field">
                <span>"merge"</span>
                <input class="merge" placeholder="regex" prop:value=value_of(|s| s.merge.clone()) on:change=set(|s, v| s.merge = v) />
            </label>
            {move || state.with(ViewState::diffing).then(|| view! {
                <label class="field">
                    <span>"baseline"</span>
                    <input class="base-from" prop:value=value_of(|s| s.base_from.clone()) on:change=set(|s, v| s.base_from = v) />
                    <input class="base-to" prop:value=value_of(|s| s.base_to.clone()) on:change=set(|s, v| s.base_to = v) />
                </label>
            })}
            <span class="exports">
                "export "
                <button class="export-png" on:click=export_png>"png"</button>
                <button class="export-svg" on:click=export_svg>"svg"</button>
                <a class="export-collapsed" href=export_href("collapsed") download="kiln.folded">"collapsed"</a>
                <a class="export-pprof" href=export_href("pprof") download="kiln.pb.gz">"pprof"</a>
                <a class="export-speedscope" href=export_href("speedscope") download="kiln.speedscope.json">"speedscope"</a>
            </span>
        </section>
        <section class="charts">
            <TimelineChart data=timeline.into() on_brush=on_brush hover=hover />
            <MetricCharts data=metrics.into() on_brush=on_brush hover=hover />
            <GpuView
                kernels=gpu_kernels.into()
                instructions=gpu_instructions.into()
                open=Signal::derive(move || state.with(|s| s.kernel.clone()))
                on_open=on_kernel
                query=Signal::derive(move || api_query.get().unwrap_or_default())
            />
        </section>
        <main class="workspace">
            <section class="flame-column">
                <div class="status">
                    <span class="summary">{summary}</span>
                    {move || rewrite_error.get().map(|m| view! { <span class="error">{m}</span> })}
                    {move || stack_shares().map(|shares| {
                        let (text, title, warn) = crate::figures::stack_coverage(&shares);
                        view! { <span class="coverage" class:warn=warn title=title>{text}</span> }
                    })}
                    {move || state.with(ViewState::diffing).then(|| view! {
                        <span class="diff-legend">
                            <span class="grew">"grew"</span>
                            " / "
                            <span class="shrank">"shrank"</span>
                            <span class="noise" title="functions /api/v1/compare did not flag: their share moved within sampling noise">" (muted: noise)"</span>
                            {move || state.with(|s| format!(" vs {} → {}", s.base_from, if s.base_to.is_empty() { "now" } else { &s.base_to }))}
                        </span>
                    })}
                    {move || (!focus_text().is_empty()).then(|| view! { <span class="focus-path">"focus: " {focus_text}</span> })}
                </div>
                <div class="flame-area">
                    <Flame
                        graph=drawn
                        paint=paint.into()
                        icicle=icicle.into()
                        focus=focus.into()
                        on_focus=on_focus
                        reset=reset.into()
                        handle=main_canvas
                        stats_key="__kiln_stats"
                        span=span.into()
                        on_span=on_span
                    />
                    {move || overlay(raw.get(), base_raw.get(), state.with(ViewState::diffing), shown.get())}
                </div>
                {move || sandwich_graphs.get().map(|s| {
                    let callers = s.callers.clone();
                    let callees = s.callees.clone();
                    view! {
                        <section class="sandwich">
                            <div class="sandwich-head">
                                <h2>"sandwich: " <span class="sandwich-name">{s.name.clone()}</span></h2>
                                <span class="muted sandwich-figures">
                                    {format!("total {} samples · self {} samples", s.total, s.self_count)}
                                </span>
                                <button class="close-sandwich" on:click=move |_| state.update(|st| st.sandwich.clear())>"close"</button>
                            </div>
                            <h3>"callers"</h3>
                            <div class="flame-area small">
                                <Flame
                                    graph=Signal::derive(move || Some(callers.clone()))
                                    paint=side_paint.into()
                                    icicle=Signal::derive(|| false)
                                    focus=Signal::derive(Vec::new)
                                    on_focus=Callback::new(|_| {})
                                    reset=reset.into()
                                    handle=callers_canvas
                                    stats_key="__kiln_callers_stats"
                                />
                            </div>
                            <h3>"callees"</h3>
                            <div class="flame-area small">
                                <Flame
                                    graph=Signal::derive(move || Some(callees.clone()))
                                    paint=side_paint.into()
                                    icicle=Signal::derive(|| true)
                                    focus=Signal::derive(Vec::new)
                                    on_focus=Callback::new(|_| {})
                                    reset=reset.into()
                                    handle=callees_canvas
                                    stats_key="__kiln_callees_stats"
                                />
                            </div>
                        </section>
                    }
                })}
            </section>
            <aside class="side">
                <TopTable rows=top.into() on_pick=on_pick />
            </aside>
        </main>
        <footer class="keys">
            "keys: " <kbd>"/"</kbd> " search · " <kbd>"Esc"</kbd> " clear · " <kbd>"r"</kbd> " reset zoom · "
            <kbd>"f"</kbd> " flame/icicle · " <kbd>"c"</kbd> " colours · " <kbd>"t"</kbd> " theme · drag to pan, wheel to zoom, click to focus"
        </footer>
    }
}
