//! `kiln-agent`: the eBPF whole-system profiling agent.
//!
//! Not built yet: this crate is a placeholder in the workspace. Until it
//! lands, profiles reach Kiln through `kiln import` (collapsed stacks,
//! `perf script`, pprof) and the ingest endpoint, which take the same
//! [`kiln_model::Batch`] the agent will send.
