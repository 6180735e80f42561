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
    /// How code blobs are laid out.
    pub blob: BlobLayout,
    /// How methods are laid out, for their names and lines.
    pub method: MethodLayout,
    /// Where compiled methods keep their scopes (inlined methods, lines),
    /// for the releases whose layout is read.
    pub scopes: Option<super::scopes::ScopeLayout>,
    /// Whether the interpreter's frames have the slots the walk reads
    /// (sender sp at fp[-1], last sp at fp[-2], hence the method at
    /// fp[-3] and the bytecode pointer at fp[-8]), as the JVM says.
    pub interpreter_frames_known: bool,
}

/// Where a class keeps the constant pool index of its source file's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFileIndex {
    /// `ConstantPool::_source_file_name_index` (JDK 14 on).
    InPool(u64),
    /// `InstanceKlass::_source_file_name_index` (before).
    InKlass(u64),
}

/// `CodeBlob` (and `nmethod`) fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobLayout {
    /// `_name`: a `const char*`.
    pub name: u64,
    /// `_frame_size`, in words (int).
    pub frame_size: u64,
    /// Where the code begins and ends: pointers (`_code_begin`,
    /// `_code_end`), or int offsets from the blob (`_code_offset`,
    /// `_data_offset`, JDK 23 and later).
    pub code_begin: u64,
    pub code_end: u64,
    pub code_offsets: bool,
    /// The compiled method's `Method*` (`CompiledMethod::_method` before
    /// JDK 23, `nmethod::_method` after).
    pub nmethod_method: u64,
}

/// `Method`, `ConstMethod`, `ConstantPool`, `Klass` and `Symbol` fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodLayout {
    pub const_method: u64,
    pub constants: u64,
    pub code_size: u64,
    pub name_index: u64,
    pub signature_index: u64,
    /// `ConstMethod`'s flags, and how wide they are (2 or 4 bytes).
    pub flags: u64,
    pub flags_width: u64,
    /// The flag bit saying a line number table follows the bytecodes.
    pub has_line_table: u32,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    pub const_method_size: u64,
    /// `sizeof(ConstantPool)`: its slots follow it, 8 bytes each.
    pub constant_pool_size: u64,
    pub pool_holder: u64,
    /// Where the class's source file name's constant pool index is.
    pub source_file_index: Option<SourceFileIndex>,
    pub klass_name: u64,
    pub symbol_length: u64,
    pub symbol_body: u64,
    /// Whether line tables use UNSIGNED5 with byte 0 excluded (JDK 20 on).
    pub unsigned5_excludes_zero: bool,
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
            blob: blob_layout(tables)?,
            method: method_layout(tables, version)?,
            scopes: super::scopes::ScopeLayout::from_tables(tables),
            interpreter_frames_known: tables.ints.get("frame::interpreter_frame_sender_sp_offset")
                == Some(&-1)
                && tables.ints.get("frame::interpreter_frame_last_sp_offset") == Some(&-2),
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

fn blob_layout(tables: &VmTables) -> Result<BlobLayout, JvmError> {
    let offset = |names: &[(&str, &str)]| field_of(tables, names).map(|f| f.offset);
    let code_offsets = tables.field("CodeBlob", "_code_begin").is_none();
    Ok(BlobLayout {
        name: offset(&[("CodeBlob", "_name")])?,
        frame_size: offset(&[("CodeBlob", "_frame_size")])?,
        code_begin: offset(&[("CodeBlob", "_code_begin"), ("CodeBlob", "_code_offset")])?,
        code_end: offset(&[("CodeBlob", "_code_end"), ("CodeBlob", "_data_offset")])?,
        code_offsets,
        nmethod_method: offset(&[("CompiledMethod", "_method"), ("nmethod", "_method")])?,
    })
}

fn method_layout(tables: &VmTables, version: JdkVersion) -> Result<MethodLayout, JvmError> {
    let offset = |names: &[(&str, &str)]| field_of(tables, names).map(|f| f.offset);
    let size = |name: &str| {
        tables
            .types
            .get(name)
            .copied()
            .ok_or_else(|| JvmError::Missing(format!("the type {name}")))
    };
    let flags = field_of(
        tables,
        &[("ConstMethod", "_flags"), ("ConstMethod", "_flags._flags")],
    )?;
    let flags_width = match flags.type_name.as_str() {
        "u2" | "jushort" | "uint16_t" => 2,
        _ => 4,
    };
    let has_line_table = tables
        .ints
        .get("ConstMethod::_has_linenumber_table")
        .or_else(|| {
            tables
                .ints
                .get("ConstMethodFlags::_misc_has_linenumber_table")
        })
        .copied()
        .ok_or_else(|| JvmError::Missing("the has-line-number-table flag".into()))?;
    Ok(MethodLayout {
        const_method: offset(&[("Method", "_constMethod")])?,
        constants: offset(&[("ConstMethod", "_constants")])?,
        code_size: offset(&[("ConstMethod", "_code_size")])?,
        name_index: offset(&[("ConstMethod", "_name_index")])?,
        signature_index: offset(&[("ConstMethod", "_signature_index")])?,
        flags: flags.offset,
        flags_width,
        has_line_table: has_line_table as u32,
        const_method_size: size("ConstMethod")?,
        constant_pool_size: size("ConstantPool")?,
        pool_holder: offset(&[("ConstantPool", "_pool_holder")])?,
        source_file_index: match tables.field("ConstantPool", "_source_file_name_index") {
            Some(field) => Some(SourceFileIndex::InPool(field.offset)),
            None => tables
                .field("InstanceKlass", "_source_file_name_index")
                .map(|f| SourceFileIndex::InKlass(f.offset)),
        },
        klass_name: offset(&[("Klass", "_name")])?,
        symbol_length: offset(&[("Symbol", "_length")])?,
        symbol_body: offset(&[("Symbol", "_body")])?,
        unsigned5_excludes_zero: version.feature >= 20,
    })
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
