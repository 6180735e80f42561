//! What one JVM process holds, read once it has started: its code cache
//! (the range whose pcs are Java's), the code heaps within it, the
//! interpreter's code, the call stub's return address, and what it runs.

use std::ops::Range;

use crate::memory::Memory;

use super::JvmError;
use super::layout::HotSpotLayout;
use super::vmstructs::cstring;

/// Code heaps in a code cache: three with the segmented cache (non-method,
/// profiled, non-profiled), one without.
pub const MAX_HEAPS: usize = 4;

/// The largest code cache believed: HotSpot caps `ReservedCodeCacheSize`
/// at 2 GiB.
const MAX_CODE_CACHE: u64 = 2 << 30;

/// One code heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeHeap {
    /// The code it may hold (reserved).
    pub memory: Range<u64>,
    /// Its segment map: a byte per segment, leading back to a blob's start.
    pub segmap: u64,
    /// The log2 of its segment size.
    pub log2_segment_size: u32,
}

/// A started JVM's code cache and what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmProcess {
    /// The reserved code cache: every JIT-compiled method, stub and the
    /// interpreter lie within.
    pub code: Range<u64>,
    /// Its heaps.
    pub heaps: Vec<CodeHeap>,
    /// The template interpreter's code.
    pub interpreter: Range<u64>,
    /// Where the call stub returns to: the frame under the first Java
    /// frame of every thread's Java stack.
    pub call_stub_return: u64,
    /// The main class or jar it runs, from its command line.
    pub main: Option<String>,
}

impl JvmProcess {
    /// The log2 of the code cache's segment size (every heap has the
    /// same: `CodeCacheSegmentSize`).
    pub fn log2_segment_size(&self) -> u32 {
        self.heaps.first().map_or(6, |h| h.log2_segment_size)
    }

    /// Reads the process's values through `mem`, its libjvm loaded `bias`
    /// above its file addresses. [`JvmError::NotStarted`] while the VM has
    /// not yet set up its code cache and interpreter (read again later).
    pub fn read(
        mem: &dyn Memory,
        layout: &HotSpotLayout,
        bias: u64,
    ) -> Result<JvmProcess, JvmError> {
        let u64_at = |what: &str, at: u64| mem.u64_at(at).map_err(|e| JvmError::read(what, at, e));
        let u32_at = |what: &str, at: u64| mem.u32_at(at).map_err(|e| JvmError::read(what, at, e));
        let global = |what: &str, at: u64| u64_at(what, at.wrapping_add(bias));

        let code = global("CodeCache::_low_bound", layout.code_low_bound)?
            ..global("CodeCache::_high_bound", layout.code_high_bound)?;
        let heaps_array = global("CodeCache::_heaps", layout.code_heaps)?;
        let queue = global("AbstractInterpreter::_code", layout.interpreter_code)?;
        if code.start == 0 || heaps_array == 0 || queue == 0 {
            return Err(JvmError::NotStarted);
        }
        if code.end <= code.start || code.end - code.start > MAX_CODE_CACHE {
            return Err(JvmError::Malformed(format!(
                "a code cache of {:#x}..{:#x}",
                code.start, code.end
            )));
        }

        let count = u32_at("the code heap count", heaps_array + layout.array_len)? as usize;
        if count == 0 || count > MAX_HEAPS {
            return Err(JvmError::Malformed(format!("{count} code heaps")));
        }
        let data = u64_at("the code heap array", heaps_array + layout.array_data)?;
        let mut heaps = Vec::with_capacity(count);
        for i in 0..count as u64 {
            let heap = u64_at("a code heap", data + 8 * i)?;
            let memory = u64_at(
                "a code heap's start",
                heap + layout.heap_memory + layout.space_low,
            )?
                ..u64_at(
                    "a code heap's end",
                    heap + layout.heap_memory + layout.space_high,
                )?;
            let segmap = u64_at(
                "a segment map",
                heap + layout.heap_segmap + layout.space_low,
            )?;
            let log2_segment_size = u32_at("a segment size", heap + layout.heap_log2_segment_size)?;
            if memory.start < code.start
                || memory.end > code.end
                || memory.start >= memory.end
                || !(4..=16).contains(&log2_segment_size)
            {
                return Err(JvmError::Malformed(format!(
                    "a code heap of {:#x}..{:#x} with segments of 2^{log2_segment_size} in a \
                     code cache of {:#x}..{:#x}",
                    memory.start, memory.end, code.start, code.end
                )));
            }
            heaps.push(CodeHeap {
                memory,
                segmap,
                log2_segment_size,
            });
        }
        heaps.sort_by_key(|h| h.memory.start);

        let buffer = u64_at("the interpreter's code", queue + layout.queue_buffer)?;
        let limit = u32_at("the interpreter's size", queue + layout.queue_limit)?;
        let interpreter = buffer..buffer + u64::from(limit);
        if buffer == 0 || !code.contains(&buffer) {
            return Err(JvmError::NotStarted);
        }
        let call_stub_return = global(
            "StubRoutines::_call_stub_return_address",
            layout.call_stub_return,
        )?;
        let command_ptr = global("Arguments::_java_command", layout.java_command)?;
        let command = cstring(mem, command_ptr)
            .map_err(|e| JvmError::read("the Java command", command_ptr, e))?;
        Ok(JvmProcess {
            code,
            heaps,
            interpreter,
            call_stub_return,
            main: main_of(&command),
        })
    }
}

/// What a JVM runs, from its `java_command` ("MAIN ARGS…" or "APP.jar
/// ARGS…"): the first word, never the arguments (they may hold secrets).
/// The source launcher (`java Foo.java`) names the source file.
pub fn main_of(java_command: &str) -> Option<String> {
    const SOURCE_LAUNCHERS: [&str; 2] = [
        "jdk.compiler/com.sun.tools.javac.launcher.Main",
        "jdk.compiler/com.sun.tools.javac.launcher.SourceLauncher",
    ];
    let mut words = java_command.split_whitespace();
    let first = words.next()?;
    let main = match SOURCE_LAUNCHERS.contains(&first) {
        true => words.next().unwrap_or(first),
        false => first,
    };
    Some(main.rsplit('/').next().unwrap_or(main).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_the_main_class_or_jar_never_arguments() {
        assert_eq!(
            main_of("com.example.Server --password hunter2").as_deref(),
            Some("com.example.Server")
        );
        assert_eq!(
            main_of("/opt/app/service.jar -Dx=y").as_deref(),
            Some("service.jar")
        );
        assert_eq!(
            main_of("jdk.compiler/com.sun.tools.javac.launcher.Main JavaShares.java 5").as_deref(),
            Some("JavaShares.java")
        );
        assert_eq!(main_of("   "), None);
    }
}
