//! HotSpot's description of itself: `libjvm.so` exports four tables
//! (`gHotSpotVMStructs`, `gHotSpotVMTypes`, `gHotSpotVMIntConstants`,
//! `gHotSpotVMLongConstants`) naming the fields, sizes and constants that
//! the serviceability agent reads, with the offsets of this very build.
//! Reading them from a running JVM gives every offset the unwinder needs
//! without a table per JDK build.
//!
//! Each table is an array of structs whose own layout is exported too
//! (`gHotSpotVMStructEntryTypeNameOffset`, `…ArrayStride`, …), ending at
//! an entry whose name pointer is null. The names are C strings in
//! libjvm's read-only data.

use std::collections::HashMap;

use crate::memory::Memory;

use super::JvmError;

/// The most entries read from one table: JDK 17 has about 2,000 in all.
const MAX_ENTRIES: usize = 16 * 1024;
/// The largest entry stride believed: the entries are six words or fewer.
const MAX_STRIDE: u64 = 256;
/// The longest name read.
const MAX_NAME: usize = 256;

/// The addresses (in libjvm's file, before the load bias) of the exported
/// globals that describe the tables: `gHotSpotVM…` by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmSymbols {
    pub(crate) by_name: HashMap<String, u64>,
}

impl VmSymbols {
    /// The address of `gHotSpot{name}`.
    fn get(&self, name: &str) -> Result<u64, JvmError> {
        self.by_name
            .get(&format!("gHotSpot{name}"))
            .copied()
            .ok_or_else(|| JvmError::Missing(format!("symbol gHotSpot{name}")))
    }

    /// Whether every global the tables need is there.
    pub fn complete(&self) -> bool {
        GLOBALS.iter().all(|name| self.get(name).is_ok())
    }
}

/// The globals read, without their `gHotSpot` prefix.
pub(crate) const GLOBALS: &[&str] = &[
    "VMStructs",
    "VMStructEntryArrayStride",
    "VMStructEntryTypeNameOffset",
    "VMStructEntryFieldNameOffset",
    "VMStructEntryTypeStringOffset",
    "VMStructEntryIsStaticOffset",
    "VMStructEntryOffsetOffset",
    "VMStructEntryAddressOffset",
    "VMTypes",
    "VMTypeEntryArrayStride",
    "VMTypeEntryTypeNameOffset",
    "VMTypeEntrySizeOffset",
    "VMIntConstants",
    "VMIntConstantEntryArrayStride",
    "VMIntConstantEntryNameOffset",
    "VMIntConstantEntryValueOffset",
    "VMLongConstants",
    "VMLongConstantEntryArrayStride",
    "VMLongConstantEntryNameOffset",
    "VMLongConstantEntryValueOffset",
];

/// One field of a HotSpot type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmField {
    /// Its offset in its object (0 for a static field).
    pub offset: u64,
    /// A static field's address, in libjvm's file (before the load bias).
    pub address: Option<u64>,
    /// Its C++ type, as HotSpot writes it (`address`, `int`, `u2`, …).
    pub type_name: String,
}

/// The four tables, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmTables {
    /// `(type, field)` → field.
    pub fields: HashMap<(String, String), VmField>,
    /// Type → its size in bytes.
    pub types: HashMap<String, u64>,
    /// Int constants.
    pub ints: HashMap<String, i32>,
    /// Long constants.
    pub longs: HashMap<String, u64>,
}

impl VmTables {
    /// Reads the tables of the JVM whose libjvm is loaded `bias` bytes
    /// above its file addresses, through `mem`.
    pub fn read(mem: &dyn Memory, symbols: &VmSymbols, bias: u64) -> Result<VmTables, JvmError> {
        let global = |name: &str| -> Result<u64, JvmError> {
            let at = symbols.get(name)?.wrapping_add(bias);
            mem.u64_at(at).map_err(|e| JvmError::read(name, at, e))
        };
        let mut tables = VmTables::default();

        let structs = Table::new(
            global("VMStructs")?,
            global("VMStructEntryArrayStride")?,
            global("VMStructEntryTypeNameOffset")?,
        )?;
        let field_name = global("VMStructEntryFieldNameOffset")?;
        let type_string = global("VMStructEntryTypeStringOffset")?;
        let is_static = global("VMStructEntryIsStaticOffset")?;
        let offset = global("VMStructEntryOffsetOffset")?;
        let address = global("VMStructEntryAddressOffset")?;
        structs.each(mem, |entry, type_name| {
            let field = cstring(mem, mem.u64_at(entry + field_name)?)?;
            let type_string = cstring(mem, mem.u64_at(entry + type_string)?)?;
            let field_is_static = mem.u32_at(entry + is_static)? != 0;
            let value = VmField {
                offset: if field_is_static {
                    0
                } else {
                    mem.u64_at(entry + offset)?
                },
                address: if field_is_static {
                    Some(mem.u64_at(entry + address)?.wrapping_sub(bias))
                } else {
                    None
                },
                type_name: type_string,
            };
            tables.fields.insert((type_name, field), value);
            Ok(())
        })?;

        let types = Table::new(
            global("VMTypes")?,
            global("VMTypeEntryArrayStride")?,
            global("VMTypeEntryTypeNameOffset")?,
        )?;
        let size = global("VMTypeEntrySizeOffset")?;
        types.each(mem, |entry, type_name| {
            tables.types.insert(type_name, mem.u64_at(entry + size)?);
            Ok(())
        })?;

        let ints = Table::new(
            global("VMIntConstants")?,
            global("VMIntConstantEntryArrayStride")?,
            global("VMIntConstantEntryNameOffset")?,
        )?;
        let value = global("VMIntConstantEntryValueOffset")?;
        ints.each(mem, |entry, name| {
            tables.ints.insert(name, mem.u32_at(entry + value)? as i32);
            Ok(())
        })?;

        let longs = Table::new(
            global("VMLongConstants")?,
            global("VMLongConstantEntryArrayStride")?,
            global("VMLongConstantEntryNameOffset")?,
        )?;
        let value = global("VMLongConstantEntryValueOffset")?;
        longs.each(mem, |entry, name| {
            tables.longs.insert(name, mem.u64_at(entry + value)?);
            Ok(())
        })?;
        Ok(tables)
    }

    /// The field `type_name::field`.
    pub fn field(&self, type_name: &str, field: &str) -> Option<&VmField> {
        self.fields.get(&(type_name.to_owned(), field.to_owned()))
    }
}

/// One of the tables: where it is, its stride, and where an entry's name
/// is.
struct Table {
    base: u64,
    stride: u64,
    name_at: u64,
}

impl Table {
    fn new(base: u64, stride: u64, name_at: u64) -> Result<Table, JvmError> {
        // The JVM sets these globals as it starts (VMStructs::init): a
        // JVM read before that is not started, not malformed.
        if base == 0 || stride == 0 {
            return Err(JvmError::NotStarted);
        }
        if stride > MAX_STRIDE || name_at >= stride {
            return Err(JvmError::Malformed(format!(
                "a vmStructs table at {base:#x} with stride {stride} and name offset {name_at}"
            )));
        }
        Ok(Table {
            base,
            stride,
            name_at,
        })
    }

    /// Calls `f` with each entry's address and name, up to the entry with
    /// no name.
    fn each(
        &self,
        mem: &dyn Memory,
        mut f: impl FnMut(u64, String) -> std::io::Result<()>,
    ) -> Result<(), JvmError> {
        for i in 0..MAX_ENTRIES as u64 {
            let entry = self.base + i * self.stride;
            let name_ptr = mem
                .u64_at(entry + self.name_at)
                .map_err(|e| JvmError::read("a vmStructs entry", entry, e))?;
            if name_ptr == 0 {
                return Ok(());
            }
            let name = cstring(mem, name_ptr)
                .map_err(|e| JvmError::read("a vmStructs name", name_ptr, e))?;
            f(entry, name).map_err(|e| JvmError::read("a vmStructs entry", entry, e))?;
        }
        Err(JvmError::Malformed(format!(
            "a vmStructs table at {:#x} has no end within {MAX_ENTRIES} entries",
            self.base
        )))
    }
}

/// The C string at `addr` (empty for a null pointer), at most
/// [`MAX_NAME`] bytes, read without crossing into a page it does not
/// reach.
pub(crate) fn cstring(mem: &dyn Memory, addr: u64) -> std::io::Result<String> {
    if addr == 0 {
        return Ok(String::new());
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_NAME {
        // Up to the end of the page: a string near a page's end may be
        // followed by unmapped memory.
        let to_page_end = 4096 - (at % 4096);
        let n = to_page_end.min(64).min((MAX_NAME - out.len()) as u64) as usize;
        let mut chunk = [0u8; 64];
        mem.read(at, &mut chunk[..n])?;
        if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&chunk[..n]);
        at += n as u64;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryImage;

    /// A struct entry laid out as HotSpot's `VMStructEntry` is: type name,
    /// field name, type string, is static (int), offset, address.
    fn image() -> (MemoryImage, VmSymbols) {
        let mut mem = MemoryImage::new();
        let mut symbols = VmSymbols::default();
        let bias = 0x1000_0000;
        let mut global = |mem: &mut MemoryImage, name: &str, at: u64, value: u64| {
            symbols.by_name.insert(format!("gHotSpot{name}"), at);
            mem.put_u64(at + bias, value);
        };
        // Strings.
        let strings = [
            (0x9000, "CodeCache"),
            (0x9100, "_low_bound"),
            (0x9200, "address"),
            (0x9300, "CodeHeap"),
            (0x9400, "_log2_segment_size"),
            (0x9500, "int"),
            (0x9600, "HeapBlock"),
            (0x9700, "oopSize"),
            (0x9800, "markWord::age_shift"),
        ];
        for (at, s) in strings {
            // Zero-padded, as read-only data is around a string.
            let mut bytes = s.as_bytes().to_vec();
            bytes.resize(0x100, 0);
            mem.put(at, &bytes);
        }
        // Structs: two entries and the end.
        global(&mut mem, "VMStructs", 0x100, 0x2000);
        global(&mut mem, "VMStructEntryArrayStride", 0x108, 48);
        for (name, i) in [
            ("TypeName", 0),
            ("FieldName", 8),
            ("TypeString", 16),
            ("IsStatic", 24),
            ("Offset", 32),
            ("Address", 40),
        ] {
            global(
                &mut mem,
                &format!("VMStructEntry{name}Offset"),
                0x110 + i,
                i,
            );
        }
        let entry = |mem: &mut MemoryImage, at: u64, words: [u64; 6]| {
            for (i, w) in words.iter().enumerate() {
                mem.put_u64(at + 8 * i as u64, *w);
            }
        };
        entry(
            &mut mem,
            0x2000,
            [0x9000, 0x9100, 0x9200, 1, 0, bias + 0x4242],
        );
        entry(&mut mem, 0x2030, [0x9300, 0x9400, 0x9500, 0, 256, 0]);
        entry(&mut mem, 0x2060, [0; 6]);
        // Types: one and the end (name, superclass, …, size at 16).
        global(&mut mem, "VMTypes", 0x200, 0x3000);
        global(&mut mem, "VMTypeEntryArrayStride", 0x208, 24);
        global(&mut mem, "VMTypeEntryTypeNameOffset", 0x210, 0);
        global(&mut mem, "VMTypeEntrySizeOffset", 0x218, 16);
        entry(&mut mem, 0x3000, [0x9600, 0, 16, 0, 0, 0]);
        mem.put_u64(0x3018, 0);
        // Constants.
        global(&mut mem, "VMIntConstants", 0x300, 0x4000);
        global(&mut mem, "VMIntConstantEntryArrayStride", 0x308, 16);
        global(&mut mem, "VMIntConstantEntryNameOffset", 0x310, 0);
        global(&mut mem, "VMIntConstantEntryValueOffset", 0x318, 8);
        mem.put_u64(0x4000, 0x9700)
            .put_u64(0x4008, 8)
            .put_u64(0x4010, 0);
        global(&mut mem, "VMLongConstants", 0x400, 0x5000);
        global(&mut mem, "VMLongConstantEntryArrayStride", 0x408, 16);
        global(&mut mem, "VMLongConstantEntryNameOffset", 0x410, 0);
        global(&mut mem, "VMLongConstantEntryValueOffset", 0x418, 8);
        mem.put_u64(0x5000, 0x9800)
            .put_u64(0x5008, 3)
            .put_u64(0x5010, 0);
        (mem, symbols)
    }

    #[test]
    fn tables_read_as_laid_out() {
        let (mem, symbols) = image();
        assert!(symbols.complete());
        let tables = VmTables::read(&mem, &symbols, 0x1000_0000).unwrap();
        assert_eq!(
            tables.field("CodeCache", "_low_bound"),
            Some(&VmField {
                offset: 0,
                address: Some(0x4242),
                type_name: "address".into()
            })
        );
        assert_eq!(
            tables
                .field("CodeHeap", "_log2_segment_size")
                .map(|f| f.offset),
            Some(256)
        );
        assert_eq!(tables.types.get("HeapBlock"), Some(&16));
        assert_eq!(tables.ints.get("oopSize"), Some(&8));
        assert_eq!(tables.longs.get("markWord::age_shift"), Some(&3));
    }

    #[test]
    fn a_table_without_an_end_or_a_bad_stride_is_refused() {
        let (mut mem, symbols) = image();
        // The struct table's stride set to something no JVM has.
        mem.put_u64(0x108 + 0x1000_0000, 4096);
        let err = VmTables::read(&mem, &symbols, 0x1000_0000).unwrap_err();
        assert!(err.to_string().contains("stride 4096"), "{err}");
        // Not set yet (a JVM read as it starts): not started, read again.
        mem.put_u64(0x108 + 0x1000_0000, 0);
        let err = VmTables::read(&mem, &symbols, 0x1000_0000).unwrap_err();
        assert!(matches!(err, JvmError::NotStarted), "{err}");
        let (mem, mut symbols) = image();
        symbols.by_name.remove("gHotSpotVMTypes");
        let err = VmTables::read(&mem, &symbols, 0x1000_0000).unwrap_err();
        assert!(err.to_string().contains("gHotSpotVMTypes"), "{err}");
    }

    #[test]
    fn strings_stop_at_their_end_or_the_cap() {
        let mut mem = MemoryImage::new();
        // A string that ends right at a page's end, the next page absent.
        mem.put(0x1ffd, b"ab\0");
        assert_eq!(cstring(&mem, 0x1ffd).unwrap(), "ab");
        mem.put(0x5000, &[b'x'; 600]);
        assert_eq!(cstring(&mem, 0x5000).unwrap().len(), MAX_NAME);
        assert_eq!(cstring(&mem, 0).unwrap(), "");
    }
}
