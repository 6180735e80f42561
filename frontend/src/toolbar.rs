//! The toolbar: time range, search, colours, flame or icicle, zoom reset,
//! diff and theme.

use leptos::ev;
use leptos::html;
use leptos::prelude::*;

use crate::state::{ColorBy, ViewState, previous_range};

/// The toolbar over the page; every control writes `state`.
#[component]
pub fn Toolbar(
    state: RwSignal<ViewState>,
    /// The search box, which `/` focuses.
    search_ref: NodeRef<html::Input>,
    /// Bumped to reset the flamegraph's zoom.
    reset: RwSignal<u32>,
) -> impl IntoView {
    let set = move |f: fn(&mut ViewState, String)| {
        move |e: ev::Event| {
            let value = event_target_value(&e);
            state.update(|s| f(s, value));
        }
    };
    let value_of = move |f: fn(&ViewState) -> String| move || state.with(f);
    let toggle_diff = move |_| {
        state.update(|s| {
            if s.diffing() {
                s.base_from.clear();
                s.base_to.clear();
            } else {
                let (from, to) = previous_range(&s.from, &s.to);
                s.base_from = from;
                s.base_to = to;
            }
        })
    };
    view! {
    <header class="toolbar">
        <div class="brand">"kiln"</div>
        <label class="field">
            <span>"range"</span>
            <select
                class="range-select"
                on:change=set(|s, v| {
                    s.from = v;
                    s.to.clear();
                    s.focus.clear();
                    s.span = None;
                })
            >
                {["now-15m", "now-1h", "now-6h", "now-24h", "now-7d"]
                    .into_iter()
                    .map(|v| {
                        let selected = move || state.with(|s| s.from == v || (s.from.is_empty() && v == "now-1h"));
                        view! { <option value=v selected=selected>{v.trim_start_matches("now-")}</option> }
                    })
                    .collect_view()}
                <option value="" selected=move || state.with(|s| s.from.parse::<f64>().is_ok())>"custom"</option>
            </select>
        </label>
        <label class="field grow">
            <span>"search"</span>
            <input
                class="search"
                node_ref=search_ref
                placeholder="regex or text  ( / )"
                prop:value=value_of(|s| s.search.clone())
                on:input=set(|s, v| s.search = v)
            />
        </label>
        <label class="field">
            <span>"colour"</span>
            <select class="color-select" on:change=set(|s, v| s.color = if v == "binary" { ColorBy::Binary } else { ColorBy::Kind })>
                <option value="kind" selected=move || state.with(|s| s.color == ColorBy::Kind)>"by kind"</option>
                <option value="binary" selected=move || state.with(|s| s.color == ColorBy::Binary)>"by binary"</option>
            </select>
        </label>
        <button class="flip" title="flame / icicle (f)" on:click=move |_| state.update(|s| s.icicle = !s.icicle)>
            {move || if state.with(|s| s.icicle) { "icicle" } else { "flame" }}
        </button>
        <button class="reset" title="reset zoom (r)" on:click=move |_| { state.update(|s| { s.focus.clear(); s.span = None; }); reset.update(|n| *n += 1); }>"reset"</button>
        <button class="diff-toggle" class:active=move || state.with(ViewState::diffing) on:click=toggle_diff>"diff"</button>
        <button class="theme" title="theme (t)" on:click=move |_| state.update(|s| s.light = !s.light)>
            {move || if state.with(|s| s.light) { "dark" } else { "light" }}
        </button>
    </header>
    }
}
