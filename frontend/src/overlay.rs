//! What covers the flamegraph while there is nothing to draw.

use std::sync::Arc;

use leptos::prelude::*;

use crate::graph::Graph;
use crate::load::Load;

/// What covers the flamegraph while there is nothing to show: loading,
/// an error, or an empty range.
pub fn overlay(
    raw: Load<Arc<Graph>>,
    base: Load<Arc<Graph>>,
    diffing: bool,
    shown: Option<Arc<Graph>>,
) -> Option<AnyView> {
    if let Load::Failed(message) = &raw {
        return Some(
            view! {
                <div class="overlay error-state">
                    <h2>"Could not load the flamegraph"</h2>
                    <p>{message.clone()}</p>
                    <p>"Check that " <code>"kiln up"</code> " is running, then reload the page."</p>
                </div>
            }
            .into_any(),
        );
    }
    if let (true, Load::Failed(message)) = (diffing, &base) {
        return Some(
            view! {
                <div class="overlay error-state">
                    <h2>"Could not load the baseline"</h2>
                    <p>{message.clone()}</p>
                </div>
            }
            .into_any(),
        );
    }
    if matches!(raw, Load::Loading) {
        return Some(
            view! { <div class="overlay loading">"Loading the flamegraph…"</div> }.into_any(),
        );
    }
    let empty = shown.is_some_and(|g| g.root_total() == 0);
    empty.then(|| {
        view! {
            <div class="overlay empty-state">
                <h2>"No samples in this range"</h2>
                <p>"Run " <code>"kiln import profile.folded"</code>
                   " (collapsed stacks, perf script or pprof), or start the agent: "
                   <code>"kiln up"</code> " profiles this machine when run as root."</p>
                <p>"Or pick a wider range above."</p>
            </div>
        }
        .into_any()
    })
}
