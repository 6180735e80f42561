//! JVM (HotSpot) processes.
//!
//! A JVM's Java methods run as interpreted frames of its template
//! interpreter and as JIT-compiled code in its code cache: anonymous
//! memory with no unwind table, which a native unwinder can neither name
//! nor walk through. What the walk needs is in the JVM itself: HotSpot
//! describes its own structs in tables `libjvm.so` exports for its
//! serviceability agent ([`vmstructs`]), from which [`layout`] takes the
//! offsets of this build, and [`process`] the running JVM's code cache,
//! interpreter and main class.
//!
//! Today the agent finds every JVM on the host, labels its samples with
//! what it runs (`script`: the main class or jar, as Python's script), and
//! marks the stacks of a JVM whose frames it does not read (OpenJ9) with a
//! root frame saying so. The walk through Java frames builds on what is
//! read here (`docs/design/jvm-unwinder.md`).

pub mod detect;
pub(crate) mod finder;
pub mod layout;
pub mod names;
pub mod process;
pub mod scopes;
pub mod vmstructs;

use std::sync::Arc;

use kiln_model::{Frame, FrameKind};

use crate::abi::{self, JvmHeap, JvmProc};

pub use detect::{JvmLibrary, inspect, may_be_jvm};
pub use finder::probe;
pub use layout::{HotSpotLayout, JdkVersion};
pub use names::{JvmNamer, MethodInfo};
pub use process::{JvmProcess, main_of};

/// Why a JVM's structures could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JvmError {
    /// The tables lack something the unwinder needs.
    #[error("this HotSpot build does not describe {0}")]
    Missing(String),
    /// The tables or the VM's structures hold what no HotSpot would.
    #[error("unexpected JVM structures: {0}")]
    Malformed(String),
    /// A JVM the agent does not read.
    #[error("{0}")]
    Unsupported(String),
    /// The VM has not set up its code cache yet: read it again later.
    #[error("the JVM has not started yet")]
    NotStarted,
    /// Its memory could not be read.
    #[error("reading {what} at {at:#x}: {source}")]
    Read {
        what: String,
        at: u64,
        #[source]
        source: std::io::Error,
    },
}

impl JvmError {
    pub(crate) fn read(what: &str, at: u64, source: std::io::Error) -> JvmError {
        JvmError::Read {
            what: what.to_owned(),
            at,
            source,
        }
    }
}

/// A JVM found in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jvm {
    /// HotSpot, read: its build's layout and the process's code cache.
    HotSpot {
        layout: Arc<HotSpotLayout>,
        process: Arc<JvmProcess>,
    },
    /// A JVM whose frames are not read, and why.
    Unsupported {
        /// What it is and why, for the marker frame.
        reason: String,
        /// What it runs, when known.
        main: Option<String>,
    },
}

impl Jvm {
    /// The main class or jar, for the `script` label.
    pub fn main(&self) -> Option<&str> {
        match self {
            Jvm::HotSpot { process, .. } => process.main.as_deref(),
            Jvm::Unsupported { main, .. } => main.as_deref(),
        }
    }

    /// The root frame of this JVM's stacks when its Java frames are not
    /// read: says why, instead of leaving unnamed JIT addresses unexplained.
    pub fn marker(&self) -> Option<Frame> {
        match self {
            Jvm::HotSpot { .. } => None,
            Jvm::Unsupported { reason, .. } => Some(Frame::named(
                FrameKind::Jvm,
                format!("[jvm: {reason}: Java frames not read]"),
            )),
        }
    }
}

/// What the eBPF walk needs to read the frames of `process`, a JVM of
/// build `layout`: its code cache and the offsets it reads. Unsupported
/// (each code-cache pc a marker) when a value does not fit the map's
/// fields or the interpreter's frames are not the ones the walk reads.
pub fn bpf_entry(layout: &HotSpotLayout, process: &JvmProcess) -> JvmProc {
    let mut entry = JvmProc {
        code_start: process.code.start,
        code_end: process.code.end,
        interp_start: process.interpreter.start,
        interp_end: process.interpreter.end,
        ..JvmProc::default()
    };
    for (slot, heap) in entry.heaps.iter_mut().zip(&process.heaps) {
        *slot = JvmHeap {
            start: heap.memory.start,
            end: heap.memory.end,
            segmap: heap.segmap,
        };
    }
    let narrow = |v: u64| u16::try_from(v).ok();
    let fields = (|| {
        Some((
            narrow(layout.blob.frame_size)?,
            narrow(layout.blob.code_begin)?,
            narrow(layout.blob.code_end)?,
            narrow(layout.method.const_method)?,
            narrow(layout.method.const_method_size)?,
            narrow(layout.method.code_size)?,
            u8::try_from(layout.heap_block_size).ok()?,
        ))
    })();
    let same_segments = process
        .heaps
        .iter()
        .all(|h| h.log2_segment_size == process.log2_segment_size());
    let Some((frame_size, begin, end, const_method, cm_size, code_size, block)) = fields else {
        return entry;
    };
    entry.blob_frame_size = frame_size;
    entry.blob_code_begin = begin;
    entry.blob_code_end = end;
    entry.method_const_method = const_method;
    entry.const_method_size = cm_size;
    entry.const_method_code_size = code_size;
    entry.heap_count = process.heaps.len().min(abi::JVM_MAX_HEAPS) as u8;
    entry.log2_segment = process.log2_segment_size() as u8;
    entry.heapblock_size = block;
    entry.flags = if layout.blob.code_offsets {
        abi::JVM_CODE_OFFSETS
    } else {
        0
    };
    entry.supported = u32::from(layout.interpreter_frames_known && same_segments);
    entry
}

/// What a process's command line says it runs as a JVM, for a JVM whose
/// memory is not read: the word after the JVM's options.
pub fn main_from_cmdline(args: &[String]) -> Option<String> {
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        match word.as_str() {
            "-jar" => return words.next().and_then(|jar| main_of(jar)),
            "-cp" | "-classpath" | "--class-path" | "-p" | "--module-path" | "--add-opens"
            | "--add-exports" | "--add-modules" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return main_of(w),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_names_its_main() {
        let args = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            main_from_cmdline(&args("java -Xmx1g -cp a.jar:b.jar com.example.Main x")).as_deref(),
            Some("com.example.Main")
        );
        assert_eq!(
            main_from_cmdline(&args("java -jar /srv/app.jar --port 80")).as_deref(),
            Some("app.jar")
        );
        assert_eq!(main_from_cmdline(&args("java -version")), None);
    }
}
