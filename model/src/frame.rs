//! Frames: one entry of a call stack.

use crate::ids::{ContentHasher, Domain, FileId, FrameId};

/// What kind of code a frame stands for. The number is part of the wire
/// format and of frame ids: never renumber, only add.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq, Clone, Copy))]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum FrameKind {
    /// Machine code of a user-space executable or library.
    Native = 0,
    /// Kernel code.
    Kernel = 1,
    /// A Python function (interpreter unwinding).
    Python = 2,
    /// A JVM method (interpreted or JIT-compiled).
    Jvm = 3,
    /// A JavaScript function (V8).
    V8 = 4,
    /// A Ruby method.
    Ruby = 5,
    /// A PHP function.
    Php = 6,
    /// A .NET method.
    Dotnet = 7,
    /// A CUDA kernel; its weight is GPU time.
    GpuKernel = 8,
    /// A SASS instruction inside a GPU kernel; its weight is PC samples.
    GpuInstruction = 9,
    /// The reason a GPU warp was stalled at an instruction.
    GpuStall = 10,
    /// The CPU was idle: kept so that absolute CPU % is right.
    Idle = 11,
    /// Marks a stack cut at the agent's maximum depth.
    Truncated = 12,
    /// A synthetic frame naming a label value (a query that groups by a
    /// label puts these at the root). Agents never send them.
    Label = 13,
    /// GPU device memory allocated at the call below it; its weight is
    /// bytes.
    GpuMemory = 14,
    /// A Go function named by its producer (from `.gopclntab`, as the
    /// OpenTelemetry profiler sends them); Go code Kiln names itself is
    /// [`Native`](FrameKind::Native).
    Go = 15,
    /// A Perl subroutine.
    Perl = 16,
    /// An Erlang or Elixir function (the BEAM virtual machine).
    Beam = 17,
    /// Code a JIT compiler generated, named from the process's perf map
    /// (`/tmp/perf-PID.map`: Node with `--perf-basic-prof`, .NET with
    /// `DOTNET_PerfMapEnabled=1`, the JVM's `jcmd Compiler.perfmap`,
    /// LuaJIT, Julia, Wasmtime): the runtime is not known, only the name
    /// it wrote.
    Jit = 18,
}

impl FrameKind {
    /// Every kind, in wire order.
    pub const ALL: [FrameKind; 19] = [
        FrameKind::Native,
        FrameKind::Kernel,
        FrameKind::Python,
        FrameKind::Jvm,
        FrameKind::V8,
        FrameKind::Ruby,
        FrameKind::Php,
        FrameKind::Dotnet,
        FrameKind::GpuKernel,
        FrameKind::GpuInstruction,
        FrameKind::GpuStall,
        FrameKind::Idle,
        FrameKind::Truncated,
        FrameKind::Label,
        FrameKind::GpuMemory,
        FrameKind::Go,
        FrameKind::Perl,
        FrameKind::Beam,
        FrameKind::Jit,
    ];

    /// The kind with wire number `n`, if there is one.
    pub fn from_u8(n: u8) -> Option<Self> {
        Self::ALL.get(n as usize).copied()
    }

    /// The kind's snake_case name, as used in JSON and the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::Native => "native",
            FrameKind::Kernel => "kernel",
            FrameKind::Python => "python",
            FrameKind::Jvm => "jvm",
            FrameKind::V8 => "v8",
            FrameKind::Ruby => "ruby",
            FrameKind::Php => "php",
            FrameKind::Dotnet => "dotnet",
            FrameKind::GpuKernel => "gpu_kernel",
            FrameKind::GpuInstruction => "gpu_instruction",
            FrameKind::GpuStall => "gpu_stall",
            FrameKind::Idle => "idle",
            FrameKind::Truncated => "truncated",
            FrameKind::Label => "label",
            FrameKind::GpuMemory => "gpu_memory",
            FrameKind::Go => "go",
            FrameKind::Perl => "perl",
            FrameKind::Beam => "beam",
            FrameKind::Jit => "jit",
        }
    }
}

impl From<&ArchivedFrameKind> for FrameKind {
    fn from(kind: &ArchivedFrameKind) -> Self {
        // The archived enum has the same variants in the same order.
        match kind {
            ArchivedFrameKind::Native => FrameKind::Native,
            ArchivedFrameKind::Kernel => FrameKind::Kernel,
            ArchivedFrameKind::Python => FrameKind::Python,
            ArchivedFrameKind::Jvm => FrameKind::Jvm,
            ArchivedFrameKind::V8 => FrameKind::V8,
            ArchivedFrameKind::Ruby => FrameKind::Ruby,
            ArchivedFrameKind::Php => FrameKind::Php,
            ArchivedFrameKind::Dotnet => FrameKind::Dotnet,
            ArchivedFrameKind::GpuKernel => FrameKind::GpuKernel,
            ArchivedFrameKind::GpuInstruction => FrameKind::GpuInstruction,
            ArchivedFrameKind::GpuStall => FrameKind::GpuStall,
            ArchivedFrameKind::Idle => FrameKind::Idle,
            ArchivedFrameKind::Truncated => FrameKind::Truncated,
            ArchivedFrameKind::Label => FrameKind::Label,
            ArchivedFrameKind::GpuMemory => FrameKind::GpuMemory,
            ArchivedFrameKind::Go => FrameKind::Go,
            ArchivedFrameKind::Perl => FrameKind::Perl,
            ArchivedFrameKind::Beam => FrameKind::Beam,
            ArchivedFrameKind::Jit => FrameKind::Jit,
        }
    }
}

/// One frame of a stack.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// A code address not yet symbolized: the symbolizer turns it into a
    /// list of [`Symbol`]s (inlining puts several functions at one address).
    Address {
        /// Native for user space; kernel for kernel modules without names.
        kind: FrameKind,
        /// The executable or library the address belongs to.
        file_id: FileId,
        /// Address relative to the ELF's load base (a file-relative virtual
        /// address, as in the ELF's program headers).
        addr: u64,
    },
    /// A frame its producer named itself: kernel symbols the agent resolved,
    /// interpreter frames, GPU frames, imported profiles.
    Named {
        /// What kind of code this is.
        kind: FrameKind,
        /// The function (or kernel, instruction, stall reason) name.
        function: String,
        /// The binary or module the code lives in, when known
        /// (`libc.so.6`, `[kernel.kallsyms]`).
        module: Option<String>,
        /// Source file, when known.
        file: Option<String>,
        /// Source line; 0 when unknown.
        line: u32,
    },
}

impl Frame {
    /// A named frame with only a function name.
    pub fn named(kind: FrameKind, function: impl Into<String>) -> Self {
        Frame::Named {
            kind,
            function: function.into(),
            module: None,
            file: None,
            line: 0,
        }
    }

    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Address { kind, .. } | Frame::Named { kind, .. } => *kind,
        }
    }

    /// The content id of this frame.
    pub fn id(&self) -> FrameId {
        let mut h = ContentHasher::new(Domain::Frame);
        match self {
            Frame::Address {
                kind,
                file_id,
                addr,
            } => {
                h.u8(0).u8(*kind as u8).u128(file_id.0).u64(*addr);
            }
            Frame::Named {
                kind,
                function,
                module,
                file,
                line,
            } => {
                h.u8(1)
                    .u8(*kind as u8)
                    .bytes(function.as_bytes())
                    .opt_str(module.as_deref())
                    .opt_str(file.as_deref())
                    .u32(*line);
            }
        }
        FrameId(h.finish())
    }
}

/// One level of a symbolized native frame: a function, and where in its
/// source the address is.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct Symbol {
    /// Demangled function name.
    pub function: String,
    /// Source file, when the debug info has it.
    pub file: Option<String>,
    /// Source line; 0 when unknown.
    pub line: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_numbers_are_stable() {
        assert_eq!(FrameKind::GpuMemory as u8, 14);
        assert_eq!(FrameKind::Go as u8, 15);
        assert_eq!(FrameKind::Perl as u8, 16);
        assert_eq!(FrameKind::Beam as u8, 17);
        assert_eq!(FrameKind::Jit as u8, 18);
        for (n, kind) in FrameKind::ALL.iter().enumerate() {
            assert_eq!(*kind as u8 as usize, n);
            assert_eq!(FrameKind::from_u8(n as u8), Some(*kind));
        }
        assert_eq!(FrameKind::from_u8(FrameKind::ALL.len() as u8), None);
    }

    #[test]
    fn ids_separate_fields() {
        // "ab" + None must not collide with "a" + Some("b").
        let a = Frame::Named {
            kind: FrameKind::Native,
            function: "ab".into(),
            module: None,
            file: None,
            line: 0,
        };
        let b = Frame::Named {
            kind: FrameKind::Native,
            function: "a".into(),
            module: Some("b".into()),
            file: None,
            line: 0,
        };
        assert_ne!(a.id(), b.id());
        let k = Frame::named(FrameKind::Kernel, "ab");
        assert_ne!(a.id(), k.id());
    }
}
