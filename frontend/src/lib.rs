//! Kiln's web UI: a Leptos client-side app compiled to WebAssembly that
//! draws `Flamewire` flamegraphs on canvas.
//!
//! Not built yet: this crate is a placeholder in the workspace. Until it
//! lands, `kiln up` serves a small HTML page listing the HTTP API.
