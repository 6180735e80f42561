//! Kiln's web UI: a Leptos client-side app, compiled to WebAssembly, that
//! explores flamegraphs fetched as `Flamewire` and read in place.
//!
//! The pure parts (layout, search, rewrites, sandwich, diff, URL state,
//! colours) are plain Rust, tested on the host; the browser parts (canvas,
//! fetch, components) build on the host too so that the workspace's
//! clippy covers them, and run only in the browser.

pub mod api;
pub mod app;
pub mod browser;
pub mod canvas;
pub mod chart;
pub mod diff;
pub mod fetch;
pub mod figures;
pub mod flame_view;
pub mod gpu_view;
pub mod graph;
pub mod keys;
pub mod layout;
pub mod load;
pub mod metrics_panel;
pub mod overlay;
pub mod palette;
pub mod panels;
pub mod sandwich;
pub mod search;
pub mod state;
pub mod toolbar;
pub mod transform;

/// Entry point of the WebAssembly module: mounts the page.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen(start)]
pub fn start() {
    leptos::mount::mount_to_body(app::App);
}
