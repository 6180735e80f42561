//! The page's keyboard shortcuts (listed in its footer): `/` search, Esc
//! clear, `r` reset zoom, `f` flame/icicle, `c` colours, `t` theme.

use leptos::ev;
use leptos::html;
use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::state::{ColorBy, ViewState};

/// Listens for the shortcuts while the page lives: they change `state`,
/// bump `reset` to reset the zoom, and focus or blur `search`.
pub fn install(state: RwSignal<ViewState>, reset: RwSignal<u32>, search_ref: NodeRef<html::Input>) {
    let keys = window_event_listener(ev::keydown, move |e| {
        let typing = e
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlElement>().ok())
            .is_some_and(|t| matches!(t.tag_name().as_str(), "INPUT" | "SELECT" | "TEXTAREA"));
        if e.key() == "Escape" {
            state.update(|s| {
                s.search.clear();
                s.focus.clear();
                s.span = None;
                s.sandwich.clear();
            });
            reset.update(|n| *n += 1);
            if let Some(input) = search_ref.get_untracked() {
                let _ = input.blur();
            }
            return;
        }
        if typing || e.ctrl_key() || e.meta_key() || e.alt_key() {
            return;
        }
        match e.key().as_str() {
            "/" => {
                e.prevent_default();
                if let Some(input) = search_ref.get_untracked() {
                    let _ = input.focus();
                }
            }
            "r" => {
                state.update(|s| {
                    s.focus.clear();
                    s.span = None;
                });
                reset.update(|n| *n += 1);
            }
            "f" => state.update(|s| s.icicle = !s.icicle),
            "t" => state.update(|s| s.light = !s.light),
            "c" => state.update(|s| {
                s.color = match s.color {
                    ColorBy::Kind => ColorBy::Binary,
                    ColorBy::Binary => ColorBy::Kind,
                }
            }),
            _ => {}
        }
    });
    on_cleanup(move || keys.remove());
}
