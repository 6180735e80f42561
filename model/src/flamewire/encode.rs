//! Turns the depth-first node sequence into the compact node columns.
//!
//! A node's frame is nearly always one of the few functions its parent's
//! frame calls, so the wire stores, per frame, the list of frames seen
//! called from it ([`Callees`]), and per node only its position in its
//! parent frame's list: a byte that compresses to about 3 bits, where a
//! frame id takes about 14 (measured with `flamewire_bench`).

use rustc_hash::FxHashMap;

use super::{Callees, Column, Nodes};

/// Nodes in depth-first order, root first, as the builder lays them out.
#[derive(Debug, Default)]
pub(crate) struct DepthFirst {
    /// Frame of each node; the root's is frame 0.
    pub frame: Vec<u32>,
    /// Depth of each node; the root's is 0.
    pub depth: Vec<u32>,
    /// Samples in each node and everything it called.
    pub total: Vec<u64>,
}

impl DepthFirst {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            frame: Vec::with_capacity(n),
            depth: Vec::with_capacity(n),
            total: Vec::with_capacity(n),
        }
    }

    pub(crate) fn push(&mut self, frame: u32, depth: u32, total: u64) {
        self.frame.push(frame);
        self.depth.push(depth);
        self.total.push(total);
    }

    /// The wire columns of these nodes, whose frames index a table of
    /// `frame_count` frames.
    pub(crate) fn encode(&self, frame_count: usize) -> (Nodes, Callees) {
        let n = self.frame.len();
        // Callees of each frame, in order of first call in the graph.
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); frame_count];
        let mut position: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        let mut callee = Vec::with_capacity(n);
        // Frames of the current node's ancestors, by depth.
        let mut path: Vec<u32> = Vec::new();
        for i in 0..n {
            let depth = self.depth[i] as usize;
            let frame = self.frame[i];
            path.truncate(depth);
            let index = match path.last() {
                None => 0,
                Some(&caller) => *position.entry((caller, frame)).or_insert_with(|| {
                    let list = &mut lists[caller as usize];
                    list.push(frame);
                    list.len() as u32 - 1
                }),
            };
            callee.push(u64::from(index));
            path.push(frame);
        }
        let counts: Vec<u64> = lists.iter().map(|l| l.len() as u64).collect();
        let frames: Vec<u64> = lists.iter().flatten().map(|&f| u64::from(f)).collect();
        let depth: Vec<u64> = self.depth.iter().map(|&d| u64::from(d)).collect();
        (
            Nodes {
                total: Column::narrowest(&self.total),
                depth: Column::narrowest(&depth),
                callee: Column::narrowest(&callee),
            },
            Callees {
                count: Column::narrowest(&counts),
                frame: Column::narrowest(&frames),
            },
        )
    }
}
