//! Activity buffer parsing: CUPTI's record buffers into [`KernelRecord`]s.
//!
//! A buffer is a run of packed records, each starting at an 8-byte boundary
//! with a `u32` kind. The real CUPTI hands Kiln each record's extent
//! (through `cuptiActivityGetNextRecord`, see [`crate::Cupti::for_each_record`]),
//! so records of kinds Kiln does not know are skipped whole. Buffers Kiln
//! walks itself ([`walk`]: tests, benchmarks, fuzzing) know only the kernel
//! record's size; at an unknown kind the walk stops and the rest of the
//! buffer is counted as skipped.
//!
//! Nothing here dereferences a pointer or indexes past a slice: a kernel's
//! name stays a raw address ([`KernelRecord::name_ptr`]) until
//! [`crate::Cupti::kernel_name`] resolves it.

use crate::cupti_abi::{ACTIVITY_RECORD_ALIGNMENT, activity_kind, kernel_record};

/// One kernel execution, from a `CUpti_ActivityKernel*` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRecord {
    /// Start on the GPU, ns (CUPTI's clock).
    pub start_ns: u64,
    /// End on the GPU, ns.
    pub end_ns: u64,
    /// The device.
    pub device_id: u32,
    /// The context.
    pub context_id: u32,
    /// The stream.
    pub stream_id: u32,
    /// Grid size (x, y, z).
    pub grid: [i32; 3],
    /// Block size (x, y, z).
    pub block: [i32; 3],
    /// Joins the record to its launch.
    pub correlation_id: u32,
    /// Address of the kernel's name, owned by CUPTI.
    pub name_ptr: u64,
    /// Graph id, 0 unless a graph launched it.
    pub graph_id: u32,
}

impl KernelRecord {
    /// GPU time, ns (0 when CUPTI could not time it).
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// What one record turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A kernel.
    Kernel(KernelRecord),
    /// A kind Kiln does not read (skipped).
    Unknown(u32),
    /// A kernel record too short to hold the fields Kiln reads.
    Truncated,
}

/// Counts of what a buffer held, for the library's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseStats {
    /// Kernel records read.
    pub kernels: u64,
    /// Records of other kinds, skipped.
    pub unknown: u64,
    /// Records too short for their kind, or bytes that could not be
    /// walked (after an unknown kind in a self-walked buffer).
    pub malformed: u64,
}

impl ParseStats {
    /// Counts one parsed record.
    pub fn count(&mut self, record: &Record) {
        match record {
            Record::Kernel(_) => self.kernels += 1,
            Record::Unknown(_) => self.unknown += 1,
            Record::Truncated => self.malformed += 1,
        }
    }

    /// Adds another buffer's counts.
    pub fn add(&mut self, other: ParseStats) {
        self.kernels += other.kernels;
        self.unknown += other.unknown;
        self.malformed += other.malformed;
    }
}

/// Reads one record whose extent is `bytes`.
pub fn parse_record(bytes: &[u8]) -> Record {
    let Some(kind) = u32_at(bytes, kernel_record::KIND) else {
        return Record::Truncated;
    };
    if kind != activity_kind::CONCURRENT_KERNEL && kind != activity_kind::KERNEL {
        return Record::Unknown(kind);
    }
    if bytes.len() < kernel_record::MIN_LEN {
        return Record::Truncated;
    }
    // Every read below is in bounds: MIN_LEN covers the last field.
    let u32_field = |at| u32_at(bytes, at).unwrap_or(0);
    let i32_triple = |at: usize| [0, 1, 2].map(|i| u32_at(bytes, at + 4 * i).unwrap_or(0) as i32);
    Record::Kernel(KernelRecord {
        start_ns: u64_at(bytes, kernel_record::START).unwrap_or(0),
        end_ns: u64_at(bytes, kernel_record::END).unwrap_or(0),
        device_id: u32_field(kernel_record::DEVICE_ID),
        context_id: u32_field(kernel_record::CONTEXT_ID),
        stream_id: u32_field(kernel_record::STREAM_ID),
        grid: i32_triple(kernel_record::GRID),
        block: i32_triple(kernel_record::BLOCK),
        correlation_id: u32_field(kernel_record::CORRELATION_ID),
        name_ptr: u64_at(bytes, kernel_record::NAME).unwrap_or(0),
        graph_id: u32_field(kernel_record::GRAPH_ID),
    })
}

/// Walks a buffer of records laid out as CUPTI lays them, knowing only the
/// kernel record's size ([`kernel_record::KERNEL9_LEN`]), and calls `each`
/// with every record's bytes. Stops at a kind whose size it does not know
/// and returns how many bytes were left unwalked.
pub fn walk(buffer: &[u8], mut each: impl FnMut(&[u8])) -> usize {
    let mut at = 0;
    while at < buffer.len() {
        let rest = &buffer[at..];
        let len = match u32_at(rest, kernel_record::KIND) {
            Some(activity_kind::CONCURRENT_KERNEL | activity_kind::KERNEL) => {
                kernel_record::KERNEL9_LEN.min(rest.len())
            }
            _ => return rest.len(),
        };
        each(&rest[..len]);
        at += len.next_multiple_of(ACTIVITY_RECORD_ALIGNMENT);
    }
    0
}

/// Walks and parses a self-walked buffer (see [`walk`]), the path the fuzz
/// target drives.
pub fn parse_buffer(buffer: &[u8], mut each: impl FnMut(KernelRecord)) -> ParseStats {
    let mut stats = ParseStats::default();
    let left = walk(buffer, |bytes| {
        let record = parse_record(bytes);
        stats.count(&record);
        if let Record::Kernel(kernel) = record {
            each(kernel);
        }
    });
    if left > 0 {
        stats.malformed += 1;
    }
    stats
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(field.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let field = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(field.try_into().ok()?))
}

/// Writes kernel records the way CUPTI does (`CUpti_ActivityKernel9`
/// layout): for tests, the benchmark and the fuzz seeds.
pub mod synth {
    use super::KernelRecord;
    use crate::cupti_abi::{activity_kind, kernel_record};

    /// Appends one `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL` record.
    pub fn push_kernel(buffer: &mut Vec<u8>, k: &KernelRecord) {
        let mut record = [0u8; kernel_record::KERNEL9_LEN];
        let mut put = |at: usize, bytes: &[u8]| record[at..at + bytes.len()].copy_from_slice(bytes);
        put(
            kernel_record::KIND,
            &activity_kind::CONCURRENT_KERNEL.to_le_bytes(),
        );
        put(kernel_record::START, &k.start_ns.to_le_bytes());
        put(kernel_record::END, &k.end_ns.to_le_bytes());
        put(kernel_record::DEVICE_ID, &k.device_id.to_le_bytes());
        put(kernel_record::CONTEXT_ID, &k.context_id.to_le_bytes());
        put(kernel_record::STREAM_ID, &k.stream_id.to_le_bytes());
        for i in 0..3 {
            put(kernel_record::GRID + 4 * i, &k.grid[i].to_le_bytes());
            put(kernel_record::BLOCK + 4 * i, &k.block[i].to_le_bytes());
        }
        put(
            kernel_record::CORRELATION_ID,
            &k.correlation_id.to_le_bytes(),
        );
        put(kernel_record::NAME, &k.name_ptr.to_le_bytes());
        put(kernel_record::GRAPH_ID, &k.graph_id.to_le_bytes());
        buffer.extend_from_slice(&record);
    }

    /// Appends a record of another kind, `len` bytes (a multiple of 8).
    pub fn push_other(buffer: &mut Vec<u8>, kind: u32, len: usize) {
        let start = buffer.len();
        buffer.resize(start + len, 0);
        buffer[start..start + 4].copy_from_slice(&kind.to_le_bytes());
    }

    /// A kernel record with the given correlation id, name address and
    /// times, everything else plausible.
    pub fn kernel(correlation_id: u32, name_ptr: u64, start_ns: u64, end_ns: u64) -> KernelRecord {
        KernelRecord {
            start_ns,
            end_ns,
            device_id: 0,
            context_id: 1,
            stream_id: 7,
            grid: [128, 1, 1],
            block: [256, 1, 1],
            correlation_id,
            name_ptr,
            graph_id: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_written() {
        let mut buffer = Vec::new();
        let mut a = synth::kernel(7, 0x1000, 100, 250);
        a.grid = [4, 5, 6];
        a.block = [32, 2, 1];
        a.device_id = 3;
        let b = synth::kernel(u32::MAX, 0x2000, 300, 310);
        synth::push_kernel(&mut buffer, &a);
        synth::push_kernel(&mut buffer, &b);
        let mut got = Vec::new();
        let stats = parse_buffer(&buffer, |k| got.push(k));
        assert_eq!(got, vec![a, b]);
        assert_eq!(stats.kernels, 2);
        assert_eq!(got[0].duration_ns(), 150);
    }

    /// A record of an unknown kind is skipped whole when CUPTI gives its
    /// extent, and stops a self-walk without reading past it.
    #[test]
    fn unknown_kinds_are_skipped() {
        let mut other = Vec::new();
        synth::push_other(&mut other, 1, 48);
        assert_eq!(parse_record(&other), Record::Unknown(1));

        let mut buffer = Vec::new();
        synth::push_kernel(&mut buffer, &synth::kernel(1, 1, 0, 1));
        synth::push_other(&mut buffer, 1, 48);
        synth::push_kernel(&mut buffer, &synth::kernel(2, 1, 0, 1));
        let mut got = Vec::new();
        let stats = parse_buffer(&buffer, |k| got.push(k.correlation_id));
        assert_eq!(got, vec![1]);
        assert_eq!(stats.malformed, 1);
    }

    /// Short kernel records and cut buffers are counted, never read past.
    #[test]
    fn truncated_records_are_counted() {
        let mut buffer = Vec::new();
        synth::push_kernel(&mut buffer, &synth::kernel(1, 1, 0, 1));
        for cut in [0, 3, 4, 100, kernel_record::MIN_LEN - 1] {
            let record = parse_record(&buffer[..cut]);
            assert_eq!(record, Record::Truncated, "cut at {cut}");
        }
        assert!(matches!(
            parse_record(&buffer[..kernel_record::MIN_LEN]),
            Record::Kernel(_)
        ));
        let stats = parse_buffer(&buffer[..150], |_| panic!("no kernel expected"));
        assert_eq!(stats.malformed, 1);
    }

    /// Every prefix and every single-byte corruption of a buffer parses
    /// without panicking.
    #[test]
    fn damaged_buffers_do_not_panic() {
        let mut buffer = Vec::new();
        for i in 0..3 {
            synth::push_kernel(&mut buffer, &synth::kernel(i, 0x10, 0, 5));
        }
        for cut in 0..buffer.len() {
            parse_buffer(&buffer[..cut], |_| {});
        }
        for at in 0..buffer.len() {
            let mut damaged = buffer.clone();
            damaged[at] ^= 0xa5;
            parse_buffer(&damaged, |_| {});
        }
    }
}
