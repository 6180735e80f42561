//! Kiln's benchmarks and the synthetic fleet they feed on.
//!
//! - [`synth`]: a synthetic call graph whose stacks are drawn with a Zipf
//!   distribution (a few hot stacks, a long tail), and a fleet of hosts
//!   producing agent batches from it.
//! - `src/bin/ingest_bench.rs`: embedded ingest throughput, against writing
//!   the same rows straight into the store.
//! - `src/bin/flamewire_bench.rs`: building a 1M-node flamegraph, its size
//!   as Flamewire against JSON.

pub mod report;
pub mod synth;
