//! The layouts before version 6, read for [`upgrade`](super::upgrade())
//! only: an earlier file is read whole, once, into the [`SymbolTable`] it
//! encodes, which the current writer encodes again.
//!
//! Object stores hold files that earlier versions of Kiln wrote, whose
//! ELF files may be long gone (a CI upload, a container image since
//! replaced): refusing them would cost profiles their names. So the
//! symbolizer's loader upgrades such a file when it loads it and stores
//! it again in the current version (see `decode_stored`), and the upload
//! path upgrades what it is sent: each earlier file is read here once.
//!
//! Nothing here serves a lookup, so it is written to be short and strict
//! rather than fast: a file that its version's reader would not have
//! verified gives an error, never part of a table.
//!
//! It can go once no store holds a file older than version 6 (loading a
//! file upgrades it and stores it back, so a sweep that loads every
//! stored symbol file once leaves none), with `upgrade` (whose callers
//! then get `Ksym::open`'s `Outdated`) and the tests, fixtures and bench
//! figures of earlier versions: nothing else uses it.
//!
//! - [`v1`]: version 1 (line rows as varints, inline chains in sections
//!   of their own), with its writer, which the tests make such files with.
//! - `v2_to_5`: versions 2 to 5, whose bodies are version 6's.
//! - `names`: the function and file records of versions 1 to 5, whose
//!   strings are all in the blob.

mod names;
pub mod v1;
mod v2_to_5;

use super::KsymError;
use crate::table::{Inline, SymbolTable};

/// The table an earlier file of `version` (1 to 5) encodes.
pub(super) fn to_table(data: &[u8], version: u32) -> Result<SymbolTable, KsymError> {
    match version {
        v1::VERSION => v1::to_table(data),
        _ => v2_to_5::to_table(data, version),
    }
}

/// An inline node as the earlier layouts keep them: a call of `function`
/// from `call_file:call_line` (function and file record indexes, or
/// `NONE`) within `parent`, an earlier node of the same list, or none
/// (the range's own function).
#[derive(Debug, Clone, Copy)]
struct Node {
    function: u32,
    call_file: u32,
    call_line: u32,
    parent: Option<usize>,
}

/// The inline calls of a range from `start`, `len` bytes long, whose
/// chain has `entries`: from each offset on (ascending), its innermost
/// node, an index of `nodes`, or none. An entry's nodes are the calls
/// around its addresses, outermost at depth 1; a node that stays at its
/// depth over consecutive entries is one call.
fn inlines(start: u64, len: u32, entries: &[(u32, Option<usize>)], nodes: &[Node]) -> Vec<Inline> {
    let mut calls: Vec<Inline> = Vec::new();
    // Per depth, the node and call open at the previous entry's end.
    let mut open: Vec<(usize, usize)> = Vec::new();
    let mut chain = Vec::new();
    for (i, &(from, innermost)) in entries.iter().enumerate() {
        let to = entries.get(i + 1).map_or(len, |&(next, _)| next);
        chain.clear();
        let mut node = innermost;
        // Bounded: a parent comes before its child (the readers check).
        while let Some(n) = node.filter(|&n| n < nodes.len()) {
            chain.push(n);
            node = nodes[n].parent.filter(|&p| p < n);
        }
        chain.reverse();
        let same = open
            .iter()
            .zip(&chain)
            .take_while(|((n, _), m)| n == *m)
            .count();
        open.truncate(same);
        for (depth, &n) in chain.iter().enumerate() {
            if let Some(&(_, call)) = open.get(depth) {
                calls[call].end = start + u64::from(to);
                continue;
            }
            open.push((n, calls.len()));
            calls.push(Inline {
                start: start + u64::from(from),
                end: start + u64::from(to),
                depth: depth as u32 + 1,
                function: nodes[n].function,
                call_file: nodes[n].call_file,
                call_line: nodes[n].call_line,
            });
        }
    }
    calls
}
