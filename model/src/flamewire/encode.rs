//! Turns the depth-first node sequence into the compact node columns.
//!
//! A node's frame is nearly always one of the few functions its parent's
//! frame calls, so the wire stores, per frame, the list of frames seen
//! called from it ([`Callees`]), and per node only its position in its
//! parent frame's list: a byte that compresses to about 3 bits, where a
//! frame id takes about 14 (measured with `flamewire_bench`). Each list is
//! ordered by how many nodes use it, most first, so that small positions
//! are the common ones and compress best.

use std::cmp::Reverse;

use super::{Callees, Column, FastMap, Nodes};

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
        // Every distinct (caller, callee) pair, in order of first use.
        let mut edges: Vec<Edge> = Vec::new();
        let mut edge_ids: FastMap<(u32, u32), u32> = FastMap::default();
        // The edge each node was reached by; the root's is unused.
        let mut edge_of_node = vec![0u32; n];
        // Frames of the current node's ancestors, by depth.
        let mut path: Vec<u32> = Vec::new();
        for ((&frame, &depth), edge_of) in self.frame.iter().zip(&self.depth).zip(&mut edge_of_node)
        {
            path.truncate(depth as usize);
            if let Some(&caller) = path.last() {
                let edge = *edge_ids.entry((caller, frame)).or_insert_with(|| {
                    edges.push(Edge {
                        caller,
                        callee: frame,
                        uses: 0,
                    });
                    edges.len() as u32 - 1
                });
                edges[edge as usize].uses += 1;
                *edge_of = edge;
            }
            path.push(frame);
        }
        // Lists by caller; within one, most used first, then first used.
        let mut order: Vec<u32> = (0..edges.len() as u32).collect();
        order.sort_unstable_by_key(|&e| {
            let edge = &edges[e as usize];
            (edge.caller, Reverse(edge.uses), e)
        });
        let mut counts = vec![0u64; frame_count];
        let mut position = vec![0u64; edges.len()];
        for &e in &order {
            let count = &mut counts[edges[e as usize].caller as usize];
            position[e as usize] = *count;
            *count += 1;
        }
        let callee: Vec<u64> = (0..n)
            .map(|i| match i {
                0 => 0,
                _ => position[edge_of_node[i] as usize],
            })
            .collect();
        let callee_frames: Vec<u64> = order
            .iter()
            .map(|&e| u64::from(edges[e as usize].callee))
            .collect();
        let depth: Vec<u64> = self.depth.iter().map(|&d| u64::from(d)).collect();
        (
            Nodes {
                total: Column::narrowest(&self.total),
                depth: Column::narrowest(&depth),
                callee: Column::narrowest(&callee),
            },
            Callees {
                count: Column::narrowest(&counts),
                frame: Column::narrowest(&callee_frames),
            },
        )
    }
}

/// A frame calling another somewhere in the graph.
#[derive(Debug)]
struct Edge {
    caller: u32,
    callee: u32,
    /// Nodes reached through this call.
    uses: u32,
}
