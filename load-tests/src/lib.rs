//! Kiln's benchmarks and the synthetic fleet they feed on.
//!
//! - [`synth`]: a synthetic call graph whose stacks are drawn with a Zipf
//!   distribution (a few hot stacks, a long tail), and a fleet of hosts
//!   producing agent batches from it.
//! - [`protocols`]: the fleet's batches as OTLP (protobuf and JSON) and
//!   Pyroscope (`/ingest`, Push) bodies, and the check that a conversion
//!   kept every sample.
//! - [`sealing`]: a query node's sealing pass over what a bench stored,
//!   and a count of the samples back from the segments.
//! - [`systems`]: Kiln's roles in this process, each on an actix system
//!   of its own, for the distributed benches.
//! - `src/bin/ingest_bench.rs`: embedded ingest throughput, against writing
//!   the same rows straight into the store.
//! - `src/bin/flamewire_bench.rs`: building a 1M-node flamegraph, its size
//!   as Flamewire against JSON.
//! - `src/bin/graph_bench.rs`: the query API's flamegraph build at about a
//!   million nodes, against the previous algorithm.
//! - `src/bin/distributed_bench.rs`: gateway → Kafka → workers throughput
//!   and publish-to-queryable latency, against the embedded bus.
//! - `src/bin/query_bench.rs`: flamegraph query latency with 1 query node
//!   against 2 and 3 that share partition scans (`--peers`), cold and warm.
//! - `src/bin/fleet_query_bench.rs`: a week's flamegraph of a 1,000-host
//!   fleet, from samples against from rollups.
//! - `src/bin/fleet_bench.rs`: a simulated fleet through `kiln gateway` →
//!   Kafka → `kiln worker` processes under CPU quotas ([`cgroup`]) →
//!   PostgreSQL: samples per worker CPU-second, publish-to-queryable lag,
//!   bytes per core-day, one worker against two, a worker SIGKILLed.
//! - `src/bin/protocol_bench.rs`: the gateway's CPU per sample for Kiln's
//!   own batches against OTLP and Pyroscope bodies of the same samples.

pub mod cgroup;
pub mod protocols;
pub mod report;
pub mod sealing;
pub mod store;
pub mod synth;
pub mod systems;
