//! How much one import takes: the bounds the importers enforce and the
//! errors name, kept below both so that neither reaches into the other.

/// Most frame references, summed over the distinct stacks, that one import
/// keeps: 128 MiB of 16-byte frame ids, so that the batch stays within
/// what a worker decodes ([`kiln_model::MAX_BATCH_BYTES`]). Text inputs
/// reach it only when huge; a pprof profile, whose samples refer to shared
/// locations, could otherwise blow a small input up into more stacks than
/// memory holds.
pub(crate) const MAX_STACK_FRAMES: usize = 1 << 23;

/// Largest decompressed pprof profile accepted, against decompression
/// bombs: 256 MiB, many times the largest real profiles (tens of MB). What
/// it holds is bounded too, before decoding (`pprof/limits.rs`).
pub const MAX_DECOMPRESSED_BYTES: u64 = 1 << 28;
