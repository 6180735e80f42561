//! Where compiled code is in its Java source: a compiled method (nmethod)
//! records, for each pc that can be a safepoint or a call's return
//! (`PcDesc`), the chain of scopes there (`ScopeDesc`: method and
//! bytecode index), innermost first: a method C2 inlined into its caller
//! is a scope of its own. This reads that chain for one pc, which the
//! namer turns into one frame per scope, each with its line.
//!
//! Where the nmethod keeps them moved over releases: before JDK 23, in the
//! nmethod itself (scopes data from `CompiledMethod::_scopes_data_begin`,
//! metadata from `nmethod::_metadata_offset`); from JDK 25, in its
//! immutable data (PcDescs and scopes) and mutable data (metadata). JDK 23
//! and 24 (another layout) are not read: their compiled frames have no
//! line and no inlined methods.

use crate::memory::Memory;

use super::names::Unsigned5;
use super::vmstructs::VmTables;

/// PcDescs read from one nmethod, at most.
const MAX_PC_DESCS: u64 = 64 * 1024;
/// Scopes in one chain, at most.
const MAX_DEPTH: usize = 32;
/// Metadata entries of one nmethod, at most.
const MAX_METADATA: u64 = 64 * 1024;

/// Where an nmethod keeps its PcDescs, scopes and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NmethodData {
    /// Before JDK 23: offsets from the nmethod, scopes by pointer.
    InBlob {
        metadata_offset: u64,
        scopes_data_begin: u64,
        scopes_pcs_offset: u64,
        dependencies_offset: u64,
    },
    /// JDK 25 on: immutable data (PcDescs, then scopes) and mutable data
    /// (relocations, then metadata).
    Split {
        immutable_data: u64,
        scopes_pcs_offset: u64,
        scopes_data_offset: u64,
        mutable_data: u64,
        relocation_size: u64,
        mutable_data_size: u64,
    },
}

/// What reading scopes needs of a build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeLayout {
    pub data: NmethodData,
    /// `nmethod::_compile_id`: unique per compilation.
    pub compile_id: u64,
    /// `sizeof(PcDesc)`, and its pc offset and scope offset fields.
    pub pc_desc_size: u64,
    pub pc_desc_pc: u64,
    pub pc_desc_scope: u64,
}

impl ScopeLayout {
    /// The layout, when the tables describe one this reads.
    pub fn from_tables(tables: &VmTables) -> Option<ScopeLayout> {
        let offset = |t: &str, f: &str| tables.field(t, f).map(|f| f.offset);
        let data = match offset("CompiledMethod", "_scopes_data_begin") {
            Some(scopes_data_begin) => NmethodData::InBlob {
                metadata_offset: offset("nmethod", "_metadata_offset")?,
                scopes_data_begin,
                scopes_pcs_offset: offset("nmethod", "_scopes_pcs_offset")?,
                dependencies_offset: offset("nmethod", "_dependencies_offset")?,
            },
            None => NmethodData::Split {
                immutable_data: offset("nmethod", "_immutable_data")?,
                scopes_pcs_offset: offset("nmethod", "_scopes_pcs_offset")?,
                scopes_data_offset: offset("nmethod", "_scopes_data_offset")?,
                mutable_data: offset("CodeBlob", "_mutable_data")?,
                relocation_size: offset("CodeBlob", "_relocation_size")?,
                mutable_data_size: offset("CodeBlob", "_mutable_data_size")?,
            },
        };
        Some(ScopeLayout {
            data,
            compile_id: offset("nmethod", "_compile_id")?,
            pc_desc_size: *tables.types.get("PcDesc")?,
            pc_desc_pc: offset("PcDesc", "_pc_offset")?,
            pc_desc_scope: offset("PcDesc", "_scope_decode_offset")?,
        })
    }

    /// The nmethod's compile id: what tells it from a later one at the same
    /// address.
    pub fn compile_id_of(&self, nm: u64, mem: &dyn Memory) -> Option<u32> {
        mem.u32_at(nm + self.compile_id).ok()
    }

    /// The scopes at `pc_offset` (from the code's start) of the nmethod
    /// at `nm`, innermost first, as (Method*, bytecode index; -1 at a
    /// method's entry). `None` when they cannot be read.
    pub fn chain(
        &self,
        nm: u64,
        pc_offset: u64,
        excludes_zero: bool,
        mem: &dyn Memory,
    ) -> Option<Vec<(u64, i32)>> {
        let i32_at = |at: u64| -> Option<u64> {
            let v = mem.u32_at(at).ok()? as i32;
            u64::try_from(v).ok()
        };
        let (pcs, pcs_end, scopes, metadata, metadata_end) = match &self.data {
            NmethodData::InBlob {
                metadata_offset,
                scopes_data_begin,
                scopes_pcs_offset,
                dependencies_offset,
            } => {
                let scopes = mem.u64_at(nm + scopes_data_begin).ok()?;
                (
                    nm + i32_at(nm + scopes_pcs_offset)?,
                    nm + i32_at(nm + dependencies_offset)?,
                    scopes,
                    nm + i32_at(nm + metadata_offset)?,
                    scopes,
                )
            }
            NmethodData::Split {
                immutable_data,
                scopes_pcs_offset,
                scopes_data_offset,
                mutable_data,
                relocation_size,
                mutable_data_size,
            } => {
                let imm = mem.u64_at(nm + immutable_data).ok()?;
                let mutable = mem.u64_at(nm + mutable_data).ok()?;
                let scopes = imm + i32_at(nm + scopes_data_offset)?;
                (
                    imm + i32_at(nm + scopes_pcs_offset)?,
                    scopes,
                    scopes,
                    mutable + i32_at(nm + relocation_size)?,
                    mutable + i32_at(nm + mutable_data_size)?,
                )
            }
        };
        let count = pcs_end.checked_sub(pcs)? / self.pc_desc_size.max(1);
        if count == 0 || count > MAX_PC_DESCS {
            return None;
        }
        let mut descs = vec![0u8; (count * self.pc_desc_size) as usize];
        mem.read(pcs, &mut descs).ok()?;
        let field = |i: u64, at: u64| -> i32 {
            let o = (i * self.pc_desc_size + at) as usize;
            i32::from_le_bytes(descs[o..o + 4].try_into().expect("4 bytes"))
        };
        // The first PcDesc with scopes at or after the pc: a call's return
        // address is its own; a pc between two safepoints (or after a
        // leaf call into the runtime, which records none) takes the next
        // one's scopes, as AsyncGetCallTrace does; past the last one (an
        // epilogue), the last one's.
        let target = i64::try_from(pc_offset).ok()?;
        let scoped = |i: &u64| field(*i, self.pc_desc_scope) > 0;
        let at = (0..count)
            .filter(scoped)
            .find(|&i| i64::from(field(i, self.pc_desc_pc)) >= target)
            .or_else(|| (0..count).rev().find(scoped))?;
        let mut decode = u64::try_from(field(at, self.pc_desc_scope)).ok()?;
        let metadata_len = (metadata_end.checked_sub(metadata)? / 8).min(MAX_METADATA);
        let mut chain = Vec::new();
        // Offset 0 is the serialized null: no (more) scope.
        while decode != 0 && chain.len() < MAX_DEPTH {
            let mut bytes = [0u8; 16];
            mem.read(scopes + decode, &mut bytes).ok()?;
            let mut stream = Unsigned5::new(&bytes, excludes_zero);
            let sender = stream.unsigned()?;
            let method_index = u64::from(stream.unsigned()?);
            let bci = stream.unsigned()? as i32 - 1;
            if method_index == 0 || method_index > metadata_len {
                return None;
            }
            let method = mem.u64_at(metadata + 8 * (method_index - 1)).ok()?;
            chain.push((method, bci));
            decode = u64::from(sender);
        }
        (!chain.is_empty()).then_some(chain)
    }
}
