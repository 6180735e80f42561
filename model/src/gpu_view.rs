//! The GPU view's answers (`GET /api/v1/gpu/kernels` and
//! `/api/v1/gpu/instructions`), as the query node writes them and the UI
//! reads them.
//!
//! They are read from the GPU samples the agent stores, one kind per value
//! of the `gpu_weight` label ([`GpuWeight`]): kernel time and launches under
//! `… → gpu_kernel`, PC samples under `… → gpu_kernel → gpu_instruction →
//! gpu_stall`.

use serde::{Deserialize, Serialize};

/// What a GPU sample's count is: the value of its `gpu_weight` label.
/// Counts of different units never add up, so every GPU query reads one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuWeight {
    /// GPU time of kernels, ns.
    Nanoseconds,
    /// Kernel launches (executions).
    Launches,
    /// PC samples.
    Samples,
    /// Device memory bytes allocated during an interval.
    AllocatedBytes,
    /// Device memory bytes live at an interval's end.
    LiveBytes,
}

impl GpuWeight {
    /// The label's name.
    pub const LABEL: &'static str = "gpu_weight";

    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuWeight::Nanoseconds => "nanoseconds",
            GpuWeight::Launches => "launches",
            GpuWeight::Samples => "samples",
            GpuWeight::AllocatedBytes => "allocated_bytes",
            GpuWeight::LiveBytes => "live_bytes",
        }
    }
}

/// `GET /api/v1/gpu/kernels`: every kernel of the range, most GPU time
/// first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuKernels {
    /// GPU time of all kernels, ns.
    pub total_ns: u64,
    /// PC samples of all kernels.
    pub total_pc_samples: u64,
    /// One row per kernel.
    pub kernels: Vec<GpuKernelRow>,
}

/// One kernel of [`GpuKernels`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuKernelRow {
    /// The kernel's name as CUDA reports it (mangled for C++ kernels): the
    /// key for `/api/v1/gpu/instructions?kernel=`.
    pub name: String,
    /// The name demangled, when it is a mangled C++ name.
    pub demangled: Option<String>,
    /// Executions; 0 when the agent sent no launch counts (before they
    /// existed).
    pub launches: u64,
    /// GPU time, ns.
    pub total_ns: u64,
    /// Mean time per launch, ns (0 without launch counts).
    pub mean_ns: u64,
    /// Share of the range's GPU time, 0 to 1.
    pub gpu_time_share: f64,
    /// PC samples taken in the kernel.
    pub pc_samples: u64,
}

/// `GET /api/v1/gpu/instructions?kernel=NAME`: a kernel's sampled SASS
/// instructions, each with its stall reasons.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInstructions {
    /// The kernel asked for.
    pub kernel: String,
    /// Its PC samples.
    pub total_samples: u64,
    /// Samples per stall reason over the whole kernel, most first.
    pub stalls: Vec<GpuStallCount>,
    /// One row per instruction, in address order.
    pub instructions: Vec<GpuInstructionRow>,
}

/// One SASS instruction of [`GpuInstructions`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInstructionRow {
    /// Offset from the kernel's start, bytes.
    pub offset: u64,
    /// The instruction's text (`LDG.E R2, desc[UR4][R2.64]`), when the
    /// agent had the cubin's disassembly.
    pub text: Option<String>,
    /// The cubin (`cubin:<crc>`), so equal offsets of two builds stay apart.
    pub cubin: Option<String>,
    /// Samples at this instruction.
    pub samples: u64,
    /// Its samples per stall reason, most first.
    pub stalls: Vec<GpuStallCount>,
}

/// Samples of one stall reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuStallCount {
    /// CUPTI's reason, shortened (`long_scoreboard`).
    pub reason: String,
    /// Samples.
    pub samples: u64,
}

/// Splits an instruction frame's name, `+0x90 LDG.E R2, [R2]` or `+0x90`,
/// into its offset and text; `None` for any other name.
pub fn parse_instruction_frame(name: &str) -> Option<(u64, Option<String>)> {
    let rest = name.strip_prefix("+0x")?;
    let (hex, text) = match rest.split_once(' ') {
        Some((hex, text)) => (hex, Some(text.trim().to_owned()).filter(|t| !t.is_empty())),
        None => (rest, None),
    };
    Some((u64::from_str_radix(hex, 16).ok()?, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruction_frames_split_into_offset_and_text() {
        assert_eq!(
            parse_instruction_frame("+0x90 LDG.E R2, desc[UR4][R2.64]"),
            Some((0x90, Some("LDG.E R2, desc[UR4][R2.64]".to_owned())))
        );
        assert_eq!(parse_instruction_frame("+0x1a0"), Some((0x1a0, None)));
        assert_eq!(parse_instruction_frame("main"), None);
        assert_eq!(parse_instruction_frame("+0xzz FADD"), None);
    }
}
