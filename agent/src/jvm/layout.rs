//! What the unwinder uses of a HotSpot build, taken from its own tables
//! ([`VmTables`]): static fields' addresses and fields' offsets. A field
//! the unwinder needs that the tables lack makes the whole layout
//! unsupported (an error naming it), never a guess.
//!
//! Where HotSpot renamed a field across releases, the names are tried in
//! order (`GrowableArrayBase` from 16, `GenericGrowableArray` before).

use crate::memory::Memory;

use super::JvmError;
use super::vmstructs::{VmField, VmTables};

/// The oldest feature release read: 11, the oldest long-term one still
/// in service.
pub const OLDEST_FEATURE: u32 = 11;

/// A HotSpot version, from `Abstract_VM_Version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct JdkVersion {
    /// The feature release (17 for 17.0.15).
    pub feature: u32,
    /// The interim release (0).
    pub interim: u32,
    /// The update (15).
    pub update: u32,
    /// The build number.
    pub build: u32,
}

impl std::fmt::Display for JdkVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}.{}+{}",
            self.feature, self.interim, self.update, self.build
        )
    }
}

/// Where a HotSpot build keeps what the unwinder reads. Static addresses
/// are libjvm's file addresses (add the load bias); offsets are within
/// their object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotSpotLayout {
    /// The build's version.
    pub version: JdkVersion,
    /// Its release string (`17.0.15+6-Debian-1deb12u1`).
    pub release: String,
    /// `CodeCache::_low_bound`, `_high_bound`: the reserved code cache.
    pub code_low_bound: u64,
    pub code_high_bound: u64,
    /// `CodeCache::_heaps`: a `GrowableArray<CodeHeap*>*`.
    pub code_heaps: u64,
    /// `GrowableArray`'s length and data.
    pub array_len: u64,
    pub array_data: u64,
    /// `CodeHeap::_memory`, `_segmap` (each a `VirtualSpace`) and
    /// `_log2_segment_size`.
    pub heap_memory: u64,
    pub heap_segmap: u64,
    pub heap_log2_segment_size: u64,
    /// `VirtualSpace::_low_boundary`, `_high_boundary`.
    pub space_low: u64,
    pub space_high: u64,
    /// The size of `HeapBlock`, the header before each code blob.
    pub heap_block_size: u64,
    /// `AbstractInterpreter::_code`: the interpreter's `StubQueue*`.
    pub interpreter_code: u64,
    /// `StubQueue::_stub_buffer` and `_buffer_limit`.
    pub queue_buffer: u64,
    pub queue_limit: u64,
    /// `StubRoutines::_call_stub_return_address`.
    pub call_stub_return: u64,
    /// `Arguments::_java_command`: the main class or jar, and arguments.
    pub java_command: u64,
}

impl HotSpotLayout {
    /// The layout of the build whose tables are `tables`, its version read
    /// through `mem` from the JVM loaded `bias` above its file.
    pub fn read(tables: &VmTables, mem: &dyn Memory, bias: u64) -> Result<HotSpotLayout, JvmError> {
        let statics = |type_name: &str, field: &str| -> Result<u64, JvmError> {
            field_of(tables, &[(type_name, field)])?
                .address
                .ok_or_else(|| JvmError::Missing(format!("{type_name}::{field} as a static")))
        };
        let int_at = |type_name: &str, field: &str| -> Result<u32, JvmError> {
            let at = statics(type_name, field)?.wrapping_add(bias);
            mem.u32_at(at)
                .map_err(|e| JvmError::read(&format!("{type_name}::{field}"), at, e))
        };
        let version = JdkVersion {
            feature: int_at("Abstract_VM_Version", "_vm_major_version")?,
            interim: int_at("Abstract_VM_Version", "_vm_minor_version")?,
            update: int_at("Abstract_VM_Version", "_vm_security_version")?,
            build: int_at("Abstract_VM_Version", "_vm_build_number")?,
        };
        let release = {
            let at = statics("Abstract_VM_Version", "_s_vm_release")?.wrapping_add(bias);
            let ptr = mem
                .u64_at(at)
                .map_err(|e| JvmError::read("the VM release", at, e))?;
            super::vmstructs::cstring(mem, ptr)
                .map_err(|e| JvmError::read("the VM release", ptr, e))?
        };
        if version.feature < OLDEST_FEATURE {
            return Err(JvmError::Unsupported(format!(
                "HotSpot {release}: JDK {OLDEST_FEATURE} and later are read"
            )));
        }
        let offset = |names: &[(&str, &str)]| field_of(tables, names).map(|f| f.offset);
        let layout = HotSpotLayout {
            version,
            release,
            code_low_bound: statics("CodeCache", "_low_bound")?,
            code_high_bound: statics("CodeCache", "_high_bound")?,
            code_heaps: statics("CodeCache", "_heaps")?,
            array_len: offset(&[
                ("GrowableArrayBase", "_len"),
                ("GenericGrowableArray", "_len"),
            ])?,
            array_data: offset(&[("GrowableArray<int>", "_data")])?,
            heap_memory: offset(&[("CodeHeap", "_memory")])?,
            heap_segmap: offset(&[("CodeHeap", "_segmap")])?,
            heap_log2_segment_size: offset(&[("CodeHeap", "_log2_segment_size")])?,
            space_low: offset(&[("VirtualSpace", "_low_boundary")])?,
            space_high: offset(&[("VirtualSpace", "_high_boundary")])?,
            heap_block_size: tables
                .types
                .get("HeapBlock")
                .copied()
                .ok_or_else(|| JvmError::Missing("the type HeapBlock".into()))?,
            interpreter_code: statics("AbstractInterpreter", "_code")?,
            queue_buffer: offset(&[("StubQueue", "_stub_buffer")])?,
            queue_limit: offset(&[("StubQueue", "_buffer_limit")])?,
            call_stub_return: statics("StubRoutines", "_call_stub_return_address")?,
            java_command: statics("Arguments", "_java_command")?,
        };
        layout.check()?;
        Ok(layout)
    }

    /// Refuses offsets no HotSpot has: a table read from the wrong place
    /// would give such.
    fn check(&self) -> Result<(), JvmError> {
        let offsets = [
            ("GrowableArray::_len", self.array_len),
            ("GrowableArray::_data", self.array_data),
            ("CodeHeap::_memory", self.heap_memory),
            ("CodeHeap::_segmap", self.heap_segmap),
            ("CodeHeap::_log2_segment_size", self.heap_log2_segment_size),
            ("VirtualSpace::_low_boundary", self.space_low),
            ("VirtualSpace::_high_boundary", self.space_high),
            ("StubQueue::_stub_buffer", self.queue_buffer),
            ("StubQueue::_buffer_limit", self.queue_limit),
            ("sizeof(HeapBlock)", self.heap_block_size),
        ];
        match offsets.iter().find(|(_, offset)| *offset > 4096) {
            Some((name, offset)) => Err(JvmError::Malformed(format!(
                "{name} is {offset}: no HotSpot build has such an offset"
            ))),
            None => Ok(()),
        }
    }
}

/// The first of `names` (type, field) that the tables have.
fn field_of<'t>(tables: &'t VmTables, names: &[(&str, &str)]) -> Result<&'t VmField, JvmError> {
    names
        .iter()
        .find_map(|(type_name, field)| tables.field(type_name, field))
        .ok_or_else(|| {
            let tried: Vec<String> = names.iter().map(|(t, f)| format!("{t}::{f}")).collect();
            JvmError::Missing(tried.join(" or "))
        })
}
