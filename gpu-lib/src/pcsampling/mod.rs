//! PC sampling: what CUPTI's PC Sampling API returns, read into owned
//! [`PcSample`]s, and the stall reason names; [`control`] says when and on
//! which thread Kiln calls the API.
//!
//! PC sampling is opt-in (`KILN_CUDA_PC_SAMPLING=1`): it costs the
//! workload more than kernel tracing. It runs for each context's whole
//! life, and its cost is set by the sampling period (2^n cycles per
//! sample per SM), not by switching it on and off: CUPTI's start/stop
//! calls deadlock against a launching program (see [`control`]).

use std::ffi::CStr;

use crate::cupti_abi::{PcSamplingData, PcSamplingPcData, PcSamplingStallReason};

/// One sampled PC with its samples per stall reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcSample {
    /// The function, mangled.
    pub function_name: String,
    /// CRC of its cubin.
    pub cubin_crc: u64,
    /// Its symbol index in the cubin.
    pub function_index: u32,
    /// Offset of the PC from the function's start.
    pub pc_offset: u64,
    /// The launch's correlation id (CUDA 12.4+), else 0.
    pub correlation_id: u32,
    /// (stall reason index, samples).
    pub stalls: Vec<(u32, u32)>,
}

/// Copies the PCs of a filled `CUpti_PCSamplingData` out. Entries past
/// the buffer's capacity and stall reasons past `max_stall_reasons` (what
/// was allocated per PC) are ignored, whatever the counts say.
///
/// # Safety
///
/// `data.pc_data` must point to `data.collect_num_pcs` entries, each with
/// a `stall_reason` array of `max_stall_reasons` entries (or null), and a
/// `function_name` that is null or a NUL-terminated string.
///
/// The names are copied, never freed: CUPTI may share one name between
/// records, and between this call's records and a later call's, so
/// freeing it is only safe when nothing will read a record again — at
/// exit, where it no longer matters. They are bounded by the program's
/// distinct kernels.
pub unsafe fn read_pc_data(
    data: &PcSamplingData,
    max_stall_reasons: usize,
    out: &mut Vec<PcSample>,
) {
    if data.pc_data.is_null() {
        return;
    }
    let filled = data.total_num_pcs.min(data.collect_num_pcs);
    // SAFETY: the caller guarantees collect_num_pcs entries.
    let pcs: &[PcSamplingPcData] = unsafe { std::slice::from_raw_parts(data.pc_data, filled) };
    for pc in pcs {
        let function_name = if pc.function_name.is_null() {
            String::new()
        } else {
            // SAFETY: the caller guarantees a NUL-terminated string.
            unsafe { CStr::from_ptr(pc.function_name) }
                .to_string_lossy()
                .into_owned()
        };
        let stalls = if pc.stall_reason.is_null() {
            Vec::new()
        } else {
            let n = pc.stall_reason_count.min(max_stall_reasons);
            // SAFETY: the caller guarantees max_stall_reasons entries.
            let reasons: &[PcSamplingStallReason] =
                unsafe { std::slice::from_raw_parts(pc.stall_reason, n) };
            reasons
                .iter()
                .filter(|r| r.samples > 0)
                .map(|r| (r.stall_reason_index, r.samples))
                .collect()
        };
        out.push(PcSample {
            function_name,
            cubin_crc: pc.cubin_crc,
            function_index: pc.function_index,
            pc_offset: pc.pc_offset,
            correlation_id: pc.correlation_id,
            stalls,
        });
    }
}

/// The buffers `cuptiPCSamplingGetData` fills, owned: a `PcSamplingData`
/// header, its PC array and each PC's stall reason array, all allocated
/// once. Boxed so their addresses stay put while CUPTI holds them.
pub struct PcSamplingBuffers {
    data: Box<PcSamplingData>,
    _pcs: Box<[PcSamplingPcData]>,
    _stalls: Box<[PcSamplingStallReason]>,
    stall_reasons: usize,
}

// SAFETY: the raw pointers point into the boxes this struct owns.
unsafe impl Send for PcSamplingBuffers {}

impl PcSamplingBuffers {
    /// Room for `pcs` PCs of `stall_reasons` reasons each.
    pub fn new(pcs: usize, stall_reasons: usize) -> Self {
        let mut stalls =
            vec![PcSamplingStallReason::default(); pcs * stall_reasons].into_boxed_slice();
        let mut pc_data: Box<[PcSamplingPcData]> = (0..pcs)
            .map(|i| PcSamplingPcData {
                size: std::mem::size_of::<PcSamplingPcData>(),
                cubin_crc: 0,
                pc_offset: 0,
                function_index: 0,
                _pad: 0,
                function_name: std::ptr::null_mut(),
                stall_reason_count: 0,
                stall_reason: stalls[i * stall_reasons..].as_mut_ptr(),
                correlation_id: 0,
                _pad2: 0,
            })
            .collect();
        let data = Box::new(PcSamplingData {
            size: std::mem::size_of::<PcSamplingData>(),
            collect_num_pcs: pcs,
            total_samples: 0,
            dropped_samples: 0,
            total_num_pcs: 0,
            remaining_num_pcs: 0,
            range_id: 0,
            pc_data: pc_data.as_mut_ptr(),
            non_user_kernels_total_samples: 0,
            hardware_buffer_full: 0,
            _pad: [0; 7],
        });
        Self {
            data,
            _pcs: pc_data,
            _stalls: stalls,
            stall_reasons,
        }
    }

    /// The header to hand CUPTI.
    pub fn data_mut(&mut self) -> *mut PcSamplingData {
        &mut *self.data
    }

    /// The header as CUPTI left it.
    pub fn data(&self) -> &PcSamplingData {
        &self.data
    }

    /// Copies the filled PCs out.
    pub fn read(&self, out: &mut Vec<PcSample>) {
        // SAFETY: new() allocated exactly what read_pc_data needs.
        unsafe { read_pc_data(&self.data, self.stall_reasons, out) }
    }

    /// Each PC slot, mutable: for tests that fill the buffers as CUPTI
    /// would.
    pub fn pcs_mut(&mut self) -> &mut [PcSamplingPcData] {
        &mut self._pcs
    }

    /// Stall reason slots per PC.
    pub fn stall_reasons_per_pc(&self) -> usize {
        self.stall_reasons
    }

    /// Sets how many PCs are filled (as CUPTI does).
    pub fn set_filled(&mut self, pcs: usize) {
        self.data.total_num_pcs = pcs;
    }

    /// Sets how many PCs CUPTI still holds (as CUPTI does).
    pub fn set_remaining(&mut self, pcs: usize) {
        self.data.remaining_num_pcs = pcs;
    }

    /// Empties the buffers before CUPTI fills them again, so that a call
    /// that fails leaves nothing to be read twice.
    pub fn clear(&mut self) {
        self.data.total_num_pcs = 0;
        self.data.remaining_num_pcs = 0;
        self.data.dropped_samples = 0;
        self.data.hardware_buffer_full = 0;
    }

    /// Where the header lives, for [`PendingHint`].
    pub fn header(&self) -> PendingHint {
        PendingHint(&raw const *self.data)
    }
}

/// Reads `remainingNumPcs` of a header CUPTI may be writing at any time
/// (the one given at configuration): a hint of how many PCs wait to be
/// read, never more than that.
#[derive(Debug, Clone, Copy)]
pub struct PendingHint(*const PcSamplingData);

// SAFETY: only a volatile read of one integer field goes through the
// pointer; the buffers it points into live as long as their context's
// state, which outlives every reader.
unsafe impl Send for PendingHint {}
// SAFETY: as above.
unsafe impl Sync for PendingHint {}

impl PendingHint {
    /// PCs CUPTI says it holds.
    pub fn pending(self) -> usize {
        // SAFETY: the header is alive (see the Send impl); a torn or stale
        // value only makes a drain come earlier or later.
        unsafe { std::ptr::read_volatile(&raw const (*self.0).remaining_num_pcs) }
    }
}

/// The stall reason part of a CUPTI metric name:
/// `smsp__pcsamp_warps_issue_stalled_long_scoreboard` → `long_scoreboard`,
/// `…_stalled_barrier_not_issued` → `barrier_not_issued`.
pub fn short_stall_name(cupti_name: &str) -> &str {
    let name = cupti_name.trim_end_matches('\0');
    name.strip_prefix("smsp__pcsamp_warps_issue_stalled_")
        .or_else(|| name.strip_prefix("smsp__pcsamp_"))
        .unwrap_or(name)
}

/// What a stall reason means, for the flamegraph's `gpu_stall` frames
/// (after Nsight Compute's "Warp State" descriptions). `None` for names
/// this table does not know; the frame then shows the short name alone.
pub fn stall_description(short_name: &str) -> Option<&'static str> {
    let base = short_name.strip_suffix("_not_issued").unwrap_or(short_name);
    Some(match base {
        "barrier" => "waiting for sibling warps at a CTA barrier",
        "branch_resolving" => "waiting for a branch target to be computed",
        "dispatch_stall" => "the dispatcher could not issue",
        "drain" => "waiting for memory stores to drain after EXIT",
        "imc_miss" => "waiting for an immediate constant cache miss",
        "lg_throttle" => "local/global memory instruction queue full",
        "long_scoreboard" => "waiting on L1TEX data (global, local, surface, texture memory)",
        "math_pipe_throttle" => "waiting for a math pipe (oversubscribed)",
        "membar" => "waiting on a memory barrier",
        "mio_throttle" => "MIO queue full (shared memory, special math)",
        "misc" => "miscellaneous",
        "no_instructions" => "no instruction fetched (instruction cache miss)",
        "not_selected" => "eligible, another warp was selected",
        "selected" => "issued an instruction (not a stall)",
        "short_scoreboard" => "waiting on MIO data (shared memory, special functions)",
        "sleeping" => "all threads of the warp sleeping",
        "tex_throttle" => "texture unit queue full",
        "wait" => "fixed-latency dependency",
        "gmma" | "warpgroup_arrive" => "waiting on warpgroup MMA (wgmma) results",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    /// Fills the buffers as CUPTI does and reads them back; counts beyond
    /// what was allocated are clamped.
    #[test]
    fn reads_filled_buffers() {
        let mut buffers = PcSamplingBuffers::new(4, 2);
        let name = CString::new("_Z4saxpyifPfS_").unwrap();
        {
            let pcs = buffers.pcs_mut();
            pcs[0].function_name = name.as_ptr().cast_mut();
            pcs[0].cubin_crc = 0xabc;
            pcs[0].pc_offset = 0x40;
            pcs[0].function_index = 3;
            pcs[0].stall_reason_count = 2;
            // SAFETY: two slots per PC were allocated.
            unsafe {
                *pcs[0].stall_reason = PcSamplingStallReason {
                    stall_reason_index: 7,
                    samples: 5,
                };
                *pcs[0].stall_reason.add(1) = PcSamplingStallReason {
                    stall_reason_index: 9,
                    samples: 0,
                };
            }
            pcs[1].pc_offset = 0x50;
            pcs[1].stall_reason_count = 1000;
        }
        buffers.set_filled(2);
        let mut out = Vec::new();
        buffers.read(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].function_name, "_Z4saxpyifPfS_");
        assert_eq!(out[0].stalls, vec![(7, 5)]);
        assert_eq!(
            (out[0].cubin_crc, out[0].pc_offset, out[0].function_index),
            (0xabc, 0x40, 3)
        );
        assert_eq!(out[1].function_name, "");
        assert!(out[1].stalls.is_empty());

        // A filled count over the capacity is clamped.
        buffers.set_filled(99);
        out.clear();
        buffers.read(&mut out);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn stall_names() {
        assert_eq!(
            short_stall_name("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
            "long_scoreboard"
        );
        assert_eq!(
            short_stall_name("smsp__pcsamp_warps_issue_stalled_barrier_not_issued"),
            "barrier_not_issued"
        );
        assert_eq!(
            short_stall_name("smsp__pcsamp_sample_count"),
            "sample_count"
        );
        assert!(
            stall_description("long_scoreboard")
                .unwrap()
                .contains("L1TEX")
        );
        assert!(stall_description("barrier_not_issued").is_some());
        assert_eq!(stall_description("something_new"), None);
    }
}
