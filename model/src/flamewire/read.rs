//! Reading a Flamewire: validation, the columns derived once at load
//! ([`Tree`]), and [`FlameGraph`], the one accessor every reader uses.

use std::io::{self, Write};

use super::{
    ArchivedFlamewire, ArchivedWireFrame, FLAMEWIRE_VERSION, FlameMeta, FlamewireError, Node,
};
use crate::frame::FrameKind;

/// Validates `bytes` and returns the archived graph without copying it.
/// `bytes` must be aligned to 8 (an `rkyv::util::AlignedVec`, or a `Vec`
/// copied into one). The node columns are checked by [`Tree::of`], which
/// every reader runs next.
pub fn access(bytes: &[u8]) -> Result<&ArchivedFlamewire, FlamewireError> {
    let graph = rkyv::access::<ArchivedFlamewire, rkyv::rancor::Error>(bytes)
        .map_err(|e| FlamewireError::Invalid(e.to_string()))?;
    if graph.version.to_native() != FLAMEWIRE_VERSION {
        return Err(FlamewireError::UnsupportedVersion(
            graph.version.to_native(),
        ));
    }
    graph.check_tables()?;
    Ok(graph)
}

/// Validates `bytes` (aligned as for [`access`]), derives its [`Tree`] and
/// runs `f` on the graph: the whole read for a caller that has the bytes
/// only for the moment.
pub fn read<T>(bytes: &[u8], f: impl FnOnce(FlameGraph<'_>) -> T) -> Result<T, FlamewireError> {
    let wire = access(bytes)?;
    let tree = Tree::of(wire)?;
    Ok(f(FlameGraph::new(wire, &tree)))
}

impl ArchivedFlamewire {
    /// String `i`.
    pub fn string(&self, i: u32) -> &str {
        self.strings[i as usize].as_str()
    }

    /// Checks the string, frame and callee tables and the column lengths.
    fn check_tables(&self) -> Result<(), FlamewireError> {
        let strings = self.strings.len() as u64;
        let frames = self.frames.len();
        let nodes = self.nodes.depth.len();
        if strings == 0 || frames == 0 || nodes == 0 {
            return Err(FlamewireError::Inconsistent(
                "empty string, frame or node table",
            ));
        }
        if self.nodes.total.len() != nodes || self.nodes.callee.len() != nodes {
            return Err(FlamewireError::Inconsistent(
                "node columns differ in length",
            ));
        }
        for f in self.frames.iter() {
            if [f.name, f.module, f.file]
                .iter()
                .any(|s| u64::from(s.to_native()) >= strings)
            {
                return Err(FlamewireError::Inconsistent("frame names a missing string"));
            }
        }
        if self.callees.count.len() != frames {
            return Err(FlamewireError::Inconsistent(
                "callee counts do not match the frame table",
            ));
        }
        let listed =
            (0..frames).try_fold(0u64, |sum, f| sum.checked_add(self.callees.count.get(f)));
        if listed != Some(self.callees.frame.len() as u64) {
            return Err(FlamewireError::Inconsistent(
                "callee counts do not add up to the callee list",
            ));
        }
        if self.callees.frame.max() >= frames as u64 {
            return Err(FlamewireError::Inconsistent("callee names a missing frame"));
        }
        Ok(())
    }
}

/// The node columns a reader derives once from a Flamewire, in one pass:
/// each node's subtree size (`skip`: node `i`'s next sibling is at
/// `i + skip`) and its frame. The wire leaves them out because they follow
/// from the depths and callee positions, and they compress poorly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    skip: Vec<u32>,
    frame: Vec<u32>,
}

impl Tree {
    /// Derives the columns of `wire` (from [`access`]), checking the tree
    /// on the way: one root, depths that descend one level at a time,
    /// callee positions inside their lists, and children whose totals fit
    /// in their parent's.
    pub fn of(wire: &ArchivedFlamewire) -> Result<Self, FlamewireError> {
        let nodes = &wire.nodes;
        let n = nodes.depth.len();
        if n > u32::MAX as usize {
            return Err(FlamewireError::Inconsistent("more nodes than u32 indices"));
        }
        // Where each frame's callees start in `callees.frame`.
        let mut first_callee = Vec::with_capacity(wire.frames.len() + 1);
        let mut at = 0u64;
        for f in 0..wire.frames.len() {
            first_callee.push(at);
            at += wire.callees.count.get(f);
        }
        let mut skip = vec![0u32; n];
        let mut frame = vec![0u32; n];
        // Ancestors of node i and what is left of their totals once the
        // children seen so far are taken out.
        let mut open: Vec<(usize, u64)> = Vec::new();
        for i in 0..n {
            let depth = nodes.depth.get(i);
            if (i == 0) != (depth == 0) {
                return Err(FlamewireError::Inconsistent(
                    "node 0 must be the only node at depth 0",
                ));
            }
            if depth > open.len() as u64 {
                return Err(FlamewireError::Inconsistent(
                    "a node is more than one level below the node before it",
                ));
            }
            while open.len() as u64 > depth {
                let (closed, _) = open.pop().expect("open is longer than depth");
                skip[closed] = (i - closed) as u32;
            }
            let total = nodes.total.get(i);
            if let Some((parent, left)) = open.last_mut() {
                *left = left.checked_sub(total).ok_or(FlamewireError::Inconsistent(
                    "children hold more samples than their parent",
                ))?;
                let caller = frame[*parent] as usize;
                let position = nodes.callee.get(i);
                if position >= wire.callees.count.get(caller) {
                    return Err(FlamewireError::Inconsistent(
                        "callee position past its caller's list",
                    ));
                }
                frame[i] =
                    wire.callees
                        .frame
                        .get((first_callee[caller] + position) as usize) as u32;
            }
            open.push((i, total));
        }
        for (closed, _) in open {
            skip[closed] = (n - closed) as u32;
        }
        Ok(Self { skip, frame })
    }
}

/// A validated Flamewire with its derived columns: what every reader of a
/// flamegraph (UI, exports, tests) goes through, so that none decodes the
/// columns on its own.
#[derive(Debug, Clone, Copy)]
pub struct FlameGraph<'a> {
    wire: &'a ArchivedFlamewire,
    tree: &'a Tree,
}

impl<'a> FlameGraph<'a> {
    /// `wire` (from [`access`]) with `tree` (its [`Tree::of`]).
    ///
    /// # Panics
    ///
    /// Accessors panic if `tree` was derived from another graph.
    pub fn new(wire: &'a ArchivedFlamewire, tree: &'a Tree) -> Self {
        assert_eq!(
            wire.nodes.depth.len(),
            tree.skip.len(),
            "tree of another graph"
        );
        Self { wire, tree }
    }

    /// The archived graph (strings, frames, raw columns).
    pub fn wire(&self) -> &'a ArchivedFlamewire {
        self.wire
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.tree.skip.len()
    }

    /// What the graph covers.
    pub fn meta(&self) -> FlameMeta {
        let m = &self.wire.meta;
        FlameMeta {
            from_ns: m.from_ns.to_native(),
            to_ns: m.to_ns.to_native(),
            ns_per_count: m.ns_per_count.to_native(),
        }
    }

    /// Samples in node `i` and everything it called.
    #[inline]
    pub fn total(&self, i: usize) -> u64 {
        self.wire.nodes.total.get(i)
    }

    /// Depth of node `i`; the root is 0.
    #[inline]
    pub fn depth(&self, i: usize) -> u32 {
        self.wire.nodes.depth.get(i) as u32
    }

    /// Nodes in node `i`'s subtree, itself included.
    #[inline]
    pub fn skip(&self, i: usize) -> usize {
        self.tree.skip[i] as usize
    }

    /// Index into the frame table of node `i`.
    #[inline]
    pub fn frame(&self, i: usize) -> u32 {
        self.tree.frame[i]
    }

    /// Samples in node `i` itself: its total less its children's.
    pub fn self_count(&self, i: usize) -> u64 {
        self.total(i) - self.children(i).map(|c| self.total(c)).sum::<u64>()
    }

    /// Node `i`, every column gathered.
    pub fn node(&self, i: usize) -> Node {
        Node {
            total: self.total(i),
            self_count: self.self_count(i),
            frame: self.frame(i),
            depth: self.depth(i),
            skip: self.skip(i) as u32,
        }
    }

    /// String `i`.
    pub fn string(&self, i: u32) -> &'a str {
        self.wire.string(i)
    }

    /// The frame of node `i`.
    pub fn node_frame(&self, i: usize) -> &'a ArchivedWireFrame {
        &self.wire.frames[self.frame(i) as usize]
    }

    /// The function name of node `i`.
    pub fn node_name(&self, i: usize) -> &'a str {
        self.string(self.node_frame(i).name.to_native())
    }

    /// Indices of node `i`'s children.
    pub fn children(&self, i: usize) -> Children<'a> {
        Children {
            skip: &self.tree.skip,
            next: i + 1,
            end: i + self.skip(i),
        }
    }

    /// Calls `each(i, self_count)` for every node, children before their
    /// parent, computing self counts in one pass (cheaper than
    /// [`self_count`](Self::self_count) node by node).
    pub fn for_each_self(&self, mut each: impl FnMut(usize, u64)) {
        // Open ancestors of node i, with their children's totals so far.
        let mut open: Vec<(usize, u64)> = Vec::new();
        let n = self.node_count();
        for i in 0..=n {
            // Past the last node, every open node closes.
            let depth = if i < n { self.depth(i) as usize } else { 0 };
            while open.len() > depth {
                let (node, children) = open.pop().expect("open is longer than depth");
                each(node, self.total(node) - children);
            }
            if i == n {
                break;
            }
            if let Some((_, children)) = open.last_mut() {
                *children += self.total(i);
            }
            open.push((i, 0));
        }
    }

    /// Self count of every node, by index.
    pub fn self_counts(&self) -> Vec<u64> {
        let mut counts = vec![0; self.node_count()];
        self.for_each_self(|i, c| counts[i] = c);
        counts
    }

    /// Writes the graph as nested JSON (`{"name","kind","module","file",
    /// "line","value","self","children"}` per node, the d3-flamegraph
    /// shape; module, file and line only when known), iteratively
    /// so that deep stacks cannot overflow the call stack.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        let self_counts = self.self_counts();
        let mut open = 0usize;
        let mut need_comma = false;
        for (i, &self_count) in self_counts.iter().enumerate() {
            let depth = self.depth(i) as usize;
            while open > depth {
                out.write_all(b"]}")?;
                open -= 1;
                need_comma = true;
            }
            if need_comma {
                out.write_all(b",")?;
            }
            let frame = self.node_frame(i);
            out.write_all(b"{\"name\":")?;
            write_json_str(out, self.string(frame.name.to_native()))?;
            write!(
                out,
                ",\"kind\":\"{}\"",
                FrameKind::from(&frame.kind).as_str()
            )?;
            if frame.module != 0 {
                out.write_all(b",\"module\":")?;
                write_json_str(out, self.string(frame.module.to_native()))?;
            }
            if frame.file != 0 {
                out.write_all(b",\"file\":")?;
                write_json_str(out, self.string(frame.file.to_native()))?;
            }
            if frame.line != 0 {
                write!(out, ",\"line\":{}", frame.line.to_native())?;
            }
            write!(
                out,
                ",\"value\":{},\"self\":{},\"children\":[",
                self.total(i),
                self_count
            )?;
            open += 1;
            need_comma = false;
        }
        while open > 0 {
            out.write_all(b"]}")?;
            open -= 1;
        }
        Ok(())
    }

    /// Writes collapsed stacks (`root;…;leaf count`), one line per distinct
    /// path with samples of its own, without the synthetic root.
    pub fn write_collapsed(&self, out: &mut impl Write) -> io::Result<()> {
        let self_counts = self.self_counts();
        let mut path: Vec<&str> = Vec::new();
        for (i, &self_count) in self_counts.iter().enumerate().skip(1) {
            path.truncate(self.depth(i) as usize - 1);
            path.push(self.node_name(i));
            if self_count != 0 {
                writeln!(out, "{} {}", path.join(";"), self_count)?;
            }
        }
        Ok(())
    }
}

/// Iterator over a node's children.
#[derive(Debug)]
pub struct Children<'a> {
    skip: &'a [u32],
    next: usize,
    end: usize,
}

impl Iterator for Children<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.next >= self.end {
            return None;
        }
        let i = self.next;
        self.next += self.skip[i] as usize;
        Some(i)
    }
}

fn write_json_str(out: &mut impl Write, s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(io::Error::other)
}
