//! Names of JVM frames: what the eBPF walk recorded of each frame (a
//! `Method*` and bytecode index for an interpreted frame; a code blob and
//! an offset in it for compiled code and stubs) turned into the method's
//! class, name, source file and line, read from the JVM's memory.
//!
//! A method is read once per process and remembered, checked at each use
//! against its `ConstMethod*` (a class unloaded and its memory reused gives
//! another), and a blob's method likewise against the blob's `Method*`.
//!
//! Stacks are named when their batch is made, seconds after they were
//! sampled: a JVM that exited in between can no longer be read. Its last
//! batch is then named from what was read of it while it lived (methods,
//! blobs, scope chains), rather than left as unreadable markers (which were
//! 15% of a 30 s workload's samples with 5 s batches).

use std::collections::HashMap;
use std::sync::Arc;

use kiln_model::{Frame, FrameKind};

use crate::abi;
use crate::memory::{Memory, ProcessMemory, process_exited};

use super::layout::{HotSpotLayout, MethodLayout, SourceFileIndex};
use super::vmstructs::cstring;
use super::{Jvm, JvmProcess};

/// Methods remembered (over all processes) before the cache starts over.
const MAX_METHODS: usize = 64 * 1024;
/// The longest line number table read, in bytes.
const MAX_LINE_TABLE: usize = 64 * 1024;
/// The longest symbol read (a class or method name).
const MAX_SYMBOL: usize = 1024;

/// A method, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodInfo {
    /// `com.example.Service.handle`.
    pub function: String,
    /// `Service.java`, when the class says.
    pub file: Option<String>,
    /// (bytecode index, line), by bytecode index.
    pub lines: Vec<(u32, u32)>,
    /// Its `ConstMethod*` when read: what a reuse of its memory changes.
    const_method: u64,
}

impl MethodInfo {
    /// The line of bytecode index `bci`.
    pub fn line_of(&self, bci: u32) -> Option<u32> {
        let at = self.lines.partition_point(|&(b, _)| b <= bci);
        at.checked_sub(1)
            .map(|i| self.lines[i].1)
            .or_else(|| self.lines.first().map(|&(_, l)| l))
    }
}

/// Scope chains remembered (over all processes) before the cache starts
/// over.
const MAX_CHAINS: usize = 64 * 1024;
/// Code blobs remembered (over all processes) before the cache starts
/// over.
const MAX_BLOBS: usize = 64 * 1024;

/// A code blob, as last read: its name (`nmethod`, `native nmethod`, a
/// stub's), and for a compiled method its `Method*`.
#[derive(Debug)]
struct BlobRead {
    name: String,
    method: Option<u64>,
}

/// The scopes at one pc of a compiled method, innermost first: (Method*,
/// bytecode index).
type ScopeChain = Arc<Vec<(u64, i32)>>;

/// Turns JVM entries of recorded stacks into named frames.
#[derive(Debug, Default)]
pub struct JvmNamer {
    methods: HashMap<(u32, u64), Option<Arc<MethodInfo>>>,
    /// (pid, nmethod, pc offset in it) → its compile id and scope chain.
    chains: HashMap<(u32, u64, u64), (u32, Option<ScopeChain>)>,
    /// (pid, blob) → what it was when last read: only used once the
    /// process has exited (a live one's blobs are read each time, since
    /// the code cache reuses their memory).
    blobs: HashMap<(u32, u64), Arc<BlobRead>>,
}

impl JvmNamer {
    /// The frames for the stack entry `entry` (tagged [`abi::JVM_FRAME`])
    /// of process `pid`, which runs `jvm`, pushed leaf first: one, or, for
    /// compiled code with methods inlined into it, one per method.
    pub fn frames(&mut self, pid: u32, jvm: &Jvm, entry: u64, out: &mut Vec<Frame>) {
        let Jvm::HotSpot { layout, process } = jvm else {
            out.push(marker("[jvm: frames not read]"));
            return;
        };
        let mem = ProcessMemory::new(pid);
        self.frames_in(pid, layout, process, entry, &mem, out);
    }

    fn frames_in(
        &mut self,
        pid: u32,
        layout: &HotSpotLayout,
        process: &JvmProcess,
        entry: u64,
        mem: &dyn Memory,
        out: &mut Vec<Frame>,
    ) {
        let frame = match (entry >> abi::JVM_KIND_SHIFT) & 3 {
            abi::JVM_INTERPRETED => {
                let method = (entry & ((1 << 44) - 1)) << 3;
                let bci = (entry >> 44) & 0xffff;
                if method == 0 {
                    marker("[jvm: interpreter]")
                } else {
                    let bci = (bci != abi::JVM_NO_BCI).then_some(bci as u32);
                    self.method_frame(pid, &layout.method, method, bci, mem)
                }
            }
            abi::JVM_CODE => {
                let index = entry & ((1 << abi::JVM_SEGMENT_BITS) - 1);
                let offset = entry >> abi::JVM_SEGMENT_BITS & ((1 << 22) - 1);
                let blob = process.code.start
                    + (index << process.log2_segment_size())
                    + layout.heap_block_size;
                if self.inlined_frames(pid, layout, blob, offset, mem, out) {
                    return;
                }
                self.blob_frame(pid, layout, blob, mem)
            }
            abi::JVM_MARKER => match entry & 0xffff {
                abi::JVM_MARK_UNSUPPORTED => marker("[jvm: unsupported]"),
                abi::JVM_MARK_NO_BLOB => marker("[jvm: code not found]"),
                abi::JVM_MARK_BAD_FRAME => marker("[jvm: frame not unwound]"),
                _ => marker("[jvm]"),
            },
            _ => marker("[jvm]"),
        };
        out.push(frame);
    }

    /// For compiled Java code, the frames of the scopes at `offset` (from
    /// the blob) of the nmethod at `blob`, innermost first, each with its
    /// line; false when the blob is no nmethod or its scopes are not read.
    fn inlined_frames(
        &mut self,
        pid: u32,
        layout: &HotSpotLayout,
        blob: u64,
        offset: u64,
        mem: &dyn Memory,
        out: &mut Vec<Frame>,
    ) -> bool {
        let Some(scopes) = &layout.scopes else {
            return false;
        };
        let Some(read) = self.read_blob(pid, layout, blob, mem) else {
            return false;
        };
        if read.name != "nmethod" {
            return false;
        }
        let key = (pid, blob, offset);
        let compile_id = match scopes.compile_id_of(blob, mem) {
            Some(id) => id,
            None if exited(mem, blob) => match self.chains.get(&key) {
                Some((id, _)) => *id,
                None => return false,
            },
            None => return false,
        };
        let chain = match self.chains.get(&key) {
            Some((id, chain)) if *id == compile_id => chain.clone(),
            _ => {
                if self.chains.len() >= MAX_CHAINS {
                    self.chains.clear();
                }
                let code_begin = match layout.blob.code_offsets {
                    true => mem
                        .u32_at(blob + layout.blob.code_begin)
                        .ok()
                        .map(|o| blob + u64::from(o)),
                    false => mem.u64_at(blob + layout.blob.code_begin).ok(),
                };
                let chain = code_begin
                    .and_then(|begin| (blob + offset).checked_sub(begin))
                    .and_then(|pc| {
                        scopes.chain(blob, pc, layout.method.unsigned5_excludes_zero, mem)
                    })
                    .map(Arc::new);
                self.chains.insert(key, (compile_id, chain.clone()));
                chain
            }
        };
        let Some(chain) = chain else {
            return false;
        };
        for &(method, bci) in chain.iter() {
            // -1: the method's entry, before its first bytecode.
            let bci = Some(u32::try_from(bci).unwrap_or(0));
            out.push(self.method_frame(pid, &layout.method, method, bci, mem));
        }
        true
    }

    /// A frame of the code blob at `blob`: its compiled method, or the stub
    /// it is.
    fn blob_frame(
        &mut self,
        pid: u32,
        layout: &HotSpotLayout,
        blob: u64,
        mem: &dyn Memory,
    ) -> Frame {
        let Some(read) = self.read_blob(pid, layout, blob, mem) else {
            return marker("[jvm: code blob]");
        };
        match (read.name.as_str(), read.method) {
            ("nmethod" | "native nmethod", Some(method)) if method != 0 => {
                self.method_frame(pid, &layout.method, method, None, mem)
            }
            ("nmethod", _) => marker("[jvm: compiled code]"),
            ("native nmethod", _) => marker("[jvm: native method]"),
            ("", _) => marker("[jvm: code blob]"),
            (name, _) => marker(&format!("[jvm: {name}]")),
        }
    }

    /// The code blob at `blob` as read now, or, once the process has
    /// exited, as last read; `None` when it cannot be read.
    fn read_blob(
        &mut self,
        pid: u32,
        layout: &HotSpotLayout,
        blob: u64,
        mem: &dyn Memory,
    ) -> Option<Arc<BlobRead>> {
        let name = match mem.u64_at(blob + layout.blob.name) {
            Ok(at) => cstring(mem, at),
            Err(e) if process_exited(&e) => return self.blobs.get(&(pid, blob)).cloned(),
            Err(e) => Err(e),
        };
        let name = name.ok()?;
        let method = matches!(name.as_str(), "nmethod" | "native nmethod")
            .then(|| mem.u64_at(blob + layout.blob.nmethod_method).ok())
            .flatten();
        let read = Arc::new(BlobRead { name, method });
        if self.blobs.len() >= MAX_BLOBS {
            self.blobs.clear();
        }
        self.blobs.insert((pid, blob), read.clone());
        Some(read)
    }

    /// The frame of `method` at bytecode index `bci`.
    fn method_frame(
        &mut self,
        pid: u32,
        layout: &MethodLayout,
        method: u64,
        bci: Option<u32>,
        mem: &dyn Memory,
    ) -> Frame {
        let cached = self.methods.get(&(pid, method));
        let known = match mem.u64_at(method + layout.const_method) {
            Ok(current) => {
                cached.filter(|info| info.as_ref().map(|i| i.const_method) == Some(current))
            }
            // Exited since the sample: what was read while it lived.
            Err(e) if process_exited(&e) => cached,
            Err(_) => cached.filter(|info| info.is_none()),
        };
        let info = match known {
            Some(info) => info.clone(),
            None => {
                if self.methods.len() >= MAX_METHODS {
                    self.methods.clear();
                }
                let info = read_method(layout, method, mem).map(Arc::new);
                self.methods.insert((pid, method), info.clone());
                info
            }
        };
        match info {
            Some(info) => Frame::Named {
                kind: FrameKind::Jvm,
                function: info.function.clone(),
                module: None,
                file: info.file.clone(),
                line: bci.and_then(|b| info.line_of(b)).unwrap_or(0),
            },
            None => marker("[jvm: unreadable method]"),
        }
    }

    /// Forgets the methods of processes other than `live`.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.methods.retain(|(pid, _), _| live(*pid));
        self.chains.retain(|(pid, _, _), _| live(*pid));
        self.blobs.retain(|(pid, _), _| live(*pid));
    }
}

/// Whether the process `mem` reads has exited, by a read at `addr` (one
/// it could read while it lived).
fn exited(mem: &dyn Memory, addr: u64) -> bool {
    mem.u64_at(addr).is_err_and(|e| process_exited(&e))
}

fn marker(name: &str) -> Frame {
    Frame::named(FrameKind::Jvm, name)
}

/// Reads `method`: its class and name, source file and line table.
pub(crate) fn read_method(l: &MethodLayout, method: u64, mem: &dyn Memory) -> Option<MethodInfo> {
    let u16_at = |at: u64| -> Option<u16> {
        let mut b = [0u8; 2];
        mem.read(at, &mut b).ok()?;
        Some(u16::from_le_bytes(b))
    };
    let cm = mem
        .u64_at(method + l.const_method)
        .ok()
        .filter(|&a| a != 0)?;
    let cp = mem.u64_at(cm + l.constants).ok().filter(|&a| a != 0)?;
    let slot = |index: u16| -> Option<String> {
        let sym = mem
            .u64_at(cp + l.constant_pool_size + 8 * u64::from(index))
            .ok()?
            & !1;
        symbol(l, sym, mem)
    };
    let name = slot(u16_at(cm + l.name_index)?)?;
    let holder = mem.u64_at(cp + l.pool_holder).ok().filter(|&a| a != 0)?;
    let class = symbol(l, mem.u64_at(holder + l.klass_name).ok()?, mem)?;
    let file = l
        .source_file_index
        .and_then(|at| match at {
            SourceFileIndex::InPool(at) => u16_at(cp + at),
            SourceFileIndex::InKlass(at) => u16_at(holder + at),
        })
        .filter(|&i| i != 0)
        .and_then(slot);
    let flags = match l.flags_width {
        2 => u32::from(u16_at(cm + l.flags)?),
        _ => mem.u32_at(cm + l.flags).ok()?,
    };
    let lines = if flags & l.has_line_table != 0 {
        let code_size = u64::from(u16_at(cm + l.code_size)?);
        read_line_table(
            mem,
            cm + l.const_method_size + code_size,
            l.unsigned5_excludes_zero,
        )
    } else {
        Vec::new()
    };
    Some(MethodInfo {
        function: format!("{}.{name}", class.replace('/', ".")),
        file,
        lines,
        const_method: cm,
    })
}

/// The `Symbol` at `sym`, as text.
fn symbol(l: &MethodLayout, sym: u64, mem: &dyn Memory) -> Option<String> {
    if sym == 0 {
        return None;
    }
    let mut len = [0u8; 2];
    mem.read(sym + l.symbol_length, &mut len).ok()?;
    let len = usize::from(u16::from_le_bytes(len)).min(MAX_SYMBOL);
    let mut body = vec![0u8; len];
    mem.read(sym + l.symbol_body, &mut body).ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// A method's compressed line number table at `at`: (bci, line) pairs,
/// each a byte (bci delta << 3 | line delta) or, after 0xFF, two signed
/// UNSIGNED5 numbers; 0 ends it.
fn read_line_table(mem: &dyn Memory, at: u64, excludes_zero: bool) -> Vec<(u32, u32)> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 256];
    let mut pos = at;
    // Read in chunks up to the terminator (or the cap).
    while bytes.len() < MAX_LINE_TABLE {
        let n = (4096 - (pos % 4096)).min(chunk.len() as u64) as usize;
        if mem.read(pos, &mut chunk[..n]).is_err() {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        pos += n as u64;
        if decode_line_table(&bytes, excludes_zero).is_some() {
            break;
        }
    }
    decode_line_table(&bytes, excludes_zero).unwrap_or_default()
}

/// The pairs of a whole table in `bytes`; `None` when it does not end
/// within them.
pub(crate) fn decode_line_table(bytes: &[u8], excludes_zero: bool) -> Option<Vec<(u32, u32)>> {
    let mut reader = Unsigned5::new(bytes, excludes_zero);
    let (mut bci, mut line) = (0u32, 0u32);
    let mut pairs = Vec::new();
    loop {
        let next = reader.byte()?;
        if next == 0 {
            return Some(pairs);
        }
        if next == 0xff {
            bci = bci.wrapping_add(reader.signed()? as u32);
            line = line.wrapping_add(reader.signed()? as u32);
        } else {
            bci += u32::from(next >> 3);
            line += u32::from(next & 7);
        }
        pairs.push((bci, line));
    }
}

/// HotSpot's UNSIGNED5 reader: a number in one to five bytes, each of the
/// first four below 192 (less the excluded bytes) ending it.
pub(crate) struct Unsigned5<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Bytes excluded from the encoding (1 from JDK 20: byte 0 never
    /// occurs).
    excluded: u32,
}

impl<'a> Unsigned5<'a> {
    /// A reader of `bytes`; `excludes_zero` from JDK 20.
    pub(crate) fn new(bytes: &'a [u8], excludes_zero: bool) -> Self {
        Unsigned5 {
            bytes,
            pos: 0,
            excluded: u32::from(excludes_zero),
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn unsigned(&mut self) -> Option<u32> {
        const LG_H: u32 = 6;
        const L: u32 = 192;
        let x = self.excluded;
        let b0 = u32::from(self.byte()?).checked_sub(x)?;
        let mut sum = b0;
        if b0 < L - x {
            return Some(sum);
        }
        let mut shift = LG_H;
        for i in 1..5 {
            let b = u32::from(self.byte()?).checked_sub(x)?;
            sum = sum.wrapping_add(b << shift);
            if b < L - x || i == 4 {
                return Some(sum);
            }
            shift += LG_H;
        }
        Some(sum)
    }

    fn signed(&mut self) -> Option<i32> {
        let v = self.unsigned()?;
        Some(((v >> 1) as i32) ^ -((v & 1) as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_tables_decode_short_and_escaped_pairs() {
        // (bci 0, line 3) as one byte (bci delta << 3 | line delta); then
        // bci +9, line +200 escaped: 0xFF, 18 (9 zigzagged), 400 (200
        // zigzagged: 400 = 208 + 3 << 6, bytes 208 and 3).
        let old = [3, 0xff, 18, 208, 3, 0];
        assert_eq!(decode_line_table(&old, false), Some(vec![(0, 3), (9, 203)]));
        // From JDK 20 every UNSIGNED5 byte is one more.
        let new = [3, 0xff, 19, 209, 4, 0];
        assert_eq!(decode_line_table(&new, true), Some(vec![(0, 3), (9, 203)]));
        // Cut before its end: not a table yet.
        assert_eq!(decode_line_table(&old[..3], false), None);
    }

    #[test]
    fn a_bci_takes_the_line_of_the_last_pair_at_or_before_it() {
        let info = MethodInfo {
            function: "A.f".into(),
            file: None,
            lines: vec![(0, 10), (4, 11), (9, 12)],
            const_method: 0,
        };
        assert_eq!(info.line_of(0), Some(10));
        assert_eq!(info.line_of(5), Some(11));
        assert_eq!(info.line_of(100), Some(12));
    }
}
