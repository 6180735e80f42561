//! Kiln's shared data model: the types every other crate speaks.
//!
//! - [`FileId`], [`FrameId`], [`StackId`], [`LabelSetId`]: 128-bit ids; all
//!   but `FileId` are content hashes, so writes are idempotent.
//! - [`Frame`] and [`FrameKind`]: one entry of a stack, native (file id and
//!   address) or named.
//! - [`LabelSet`]: where a sample came from (host, process, thread, …).
//! - [`Batch`]: what agents and imports send, in a versioned rkyv + zstd
//!   envelope ([`Batch::encode`], [`Batch::decode`]): samples, and
//!   [`MetricPoint`]s (GPU utilization, clocks, …) added with
//!   [`BatchBuilder::metric`].
//! - [`flamewire`]: the flamegraph wire format the UI reads zero-copy.
//! - [`Envelope`]: a batch as it travels on the ingest bus, with its
//!   tenant and project under a MAC that workers verify, and the rule
//!   their names follow ([`check_scope_name`]).
//!
//! This crate has no heavy dependencies and builds for `wasm32` with
//! `default-features = false` (which leaves out the zstd codec).
//!
//! ```
//! use kiln_model::{BatchBuilder, Frame, FrameKind, LabelSet};
//!
//! let mut b = BatchBuilder::new("host-a", 0, 10_000_000);
//! let stack = [Frame::named(FrameKind::Native, "main"), Frame::named(FrameKind::Native, "work")];
//! b.add(1_700_000_000_000_000_000, &stack, &LabelSet::new().with("process", "app"), 3);
//! let batch = b.finish();
//! # #[cfg(feature = "codec")]
//! assert_eq!(kiln_model::Batch::decode(&batch.encode()).unwrap(), batch);
//! ```

mod answers;
mod batch;
mod clock;
mod envelope;
pub mod flamewire;
mod frame;
mod gpu_view;
mod ids;
mod labels;
mod metric;
mod sample_type;
mod stack;
#[cfg(test)]
mod test_strategies;

pub use answers::{LabelValues, Timeline, TimelinePoint, TopFunction};
pub use batch::{
    BATCH_HEADER_LEN, BATCH_MAGIC, BATCH_VERSION, Batch, BatchBuilder, BatchError, BatchPeek,
    Executable, FrameEntry, KnownEntries, LabelSetEntry, MAX_BATCH_BYTES, MAX_BATCH_ENTRIES,
    MAX_BUILD_ID_LEN, MAX_LABEL_NAME_LEN, MAX_LABEL_VALUE_LEN, MAX_LABELS, MAX_NAME_LEN,
    MAX_STACK_DEPTH, NothingKnown, OLDEST_BATCH_VERSION, StackEntry, TRUNCATED_FRAME,
    batch_version,
};
pub use clock::now_ns;
pub use envelope::{
    ENVELOPE_MAC_LEN, ENVELOPE_MAGIC, ENVELOPE_VERSION, Envelope, EnvelopeError,
    MAX_SCOPE_NAME_LEN, ScopeNameError, check_scope_name,
};
pub use frame::{Frame, FrameKind, Symbol};
pub use gpu_view::{
    GpuInstructionRow, GpuInstructions, GpuKernelRow, GpuKernels, GpuStallCount, GpuWeight,
    parse_instruction_frame,
};
pub use ids::{FileId, FrameId, LabelSetId, ParseIdError, StackId};
pub use labels::{LabelSet, names as label_names};
pub use metric::{
    MAX_METRIC_NAME_LEN, MAX_METRIC_POINTS, MetricError, MetricNames, MetricPoint, MetricSeries,
    MetricSeriesSet, MetricValue, StackWalkShares, check_metric_name, names as metric_names,
};
pub use sample_type::{
    MAX_SAMPLE_TYPE_LEN, filters_read_a_gauge, is_gauge_sample_type, sample_type_value,
};
pub use stack::{IDLE_FRAME, NANOS_PER_HOUR, Sample, idle_frame, idle_stack_id, stack_id};
