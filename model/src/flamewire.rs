//! `Flamewire`: the flamegraph wire format, read zero-copy (also in WASM).
//!
//! A flamegraph is one array of nodes in depth-first order. Each node holds
//! its depth, its total and self counts, and `skip`, the size of its subtree
//! (itself included): node `i`'s next sibling is at `i + skip`. A renderer
//! walks the array once and jumps over every subtree that is narrower than a
//! pixel or off screen. Strings and frames are interned once.
//!
//! The node array is stored by column ([`Nodes`]): one vector per field, all
//! indexed by node. Compressed, that is 2.2× smaller than interleaved
//! records on a 1M-node graph (`flamewire_bench`), and a renderer scanning
//! `skip` and `total` touches only those two columns.
//!
//! ```
//! use kiln_model::flamewire::{FlamewireBuilder, FlameFrame, access};
//! use kiln_model::FrameKind;
//!
//! let mut b = FlamewireBuilder::new();
//! let main = b.intern(FlameFrame::new(FrameKind::Native, "main"));
//! let work = b.intern(FlameFrame::new(FrameKind::Native, "work"));
//! b.add_stack(&[main, work], 3);
//! b.add_stack(&[main], 1);
//! let bytes = b.finish(Default::default()).to_bytes();
//!
//! let graph = access(&bytes).unwrap();
//! assert_eq!(graph.node_count(), 3); // root, main, work
//! assert_eq!(graph.node(0).total, 4);
//! assert_eq!(graph.node_name(1), "main");
//! ```

use std::collections::HashMap;
use std::io::{self, Write};

use crate::frame::FrameKind;

/// The format version in [`Flamewire::version`].
pub const FLAMEWIRE_VERSION: u32 = 1;

/// Name of the root node.
pub const ROOT_NAME: &str = "all";

/// A flamegraph.
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct Flamewire {
    /// [`FLAMEWIRE_VERSION`].
    pub version: u32,
    /// What the graph covers and how to turn counts into time.
    pub meta: FlameMeta,
    /// Interned strings; index 0 is the empty string ("none").
    pub strings: Vec<String>,
    /// Interned frames; index 0 is the root.
    pub frames: Vec<WireFrame>,
    /// Nodes in depth-first order; node 0 is the root, children ordered by
    /// name.
    pub nodes: Nodes,
}

/// The node array, by column: node `i` is `(total[i], self_count[i],
/// frame[i], depth[i], skip[i])`; every column has one entry per node.
#[derive(Debug, Clone, Default, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct Nodes {
    /// Samples in the node and everything it called.
    pub total: Vec<u64>,
    /// Samples in the node itself.
    pub self_count: Vec<u64>,
    /// Index into [`Flamewire::frames`].
    pub frame: Vec<u32>,
    /// Depth; the root is 0.
    pub depth: Vec<u32>,
    /// Nodes in the subtree, the node itself included.
    pub skip: Vec<u32>,
}

impl Nodes {
    fn with_capacity(n: usize) -> Self {
        Self {
            total: Vec::with_capacity(n),
            self_count: Vec::with_capacity(n),
            frame: Vec::with_capacity(n),
            depth: Vec::with_capacity(n),
            skip: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, node: Node) {
        self.total.push(node.total);
        self.self_count.push(node.self_count);
        self.frame.push(node.frame);
        self.depth.push(node.depth);
        self.skip.push(node.skip);
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.frame.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.frame.is_empty()
    }

    /// Node `i`, gathered from the columns.
    pub fn get(&self, i: usize) -> Node {
        Node {
            total: self.total[i],
            self_count: self.self_count[i],
            frame: self.frame[i],
            depth: self.depth[i],
            skip: self.skip[i],
        }
    }
}

/// Metadata of a flamegraph.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    serde::Serialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct FlameMeta {
    /// Start of the time range, nanoseconds since the epoch.
    pub from_ns: i64,
    /// End of the time range (exclusive).
    pub to_ns: i64,
    /// Average CPU nanoseconds one count stands for (0 when unknown), so
    /// that `total * ns_per_count / (to_ns - from_ns)` is cores.
    pub ns_per_count: u64,
}

/// An interned frame: indices into [`Flamewire::strings`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
#[rkyv(derive(Debug))]
pub struct WireFrame {
    /// What kind of code.
    pub kind: FrameKind,
    /// Function name.
    pub name: u32,
    /// Binary or module; 0 when unknown.
    pub module: u32,
    /// Source file; 0 when unknown.
    pub file: u32,
    /// Source line; 0 when unknown.
    pub line: u32,
}

/// One node of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct Node {
    /// Samples in this node and everything it called.
    pub total: u64,
    /// Samples in this node itself.
    pub self_count: u64,
    /// Index into [`Flamewire::frames`].
    pub frame: u32,
    /// Depth; the root is 0.
    pub depth: u32,
    /// Nodes in this subtree, this one included.
    pub skip: u32,
}

/// A frame to intern, by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlameFrame<'a> {
    /// What kind of code.
    pub kind: FrameKind,
    /// Function name.
    pub name: &'a str,
    /// Binary or module.
    pub module: Option<&'a str>,
    /// Source file.
    pub file: Option<&'a str>,
    /// Source line; 0 when unknown.
    pub line: u32,
}

impl<'a> FlameFrame<'a> {
    /// A frame with only a kind and a name.
    pub fn new(kind: FrameKind, name: &'a str) -> Self {
        Self {
            kind,
            name,
            module: None,
            file: None,
            line: 0,
        }
    }
}

/// Errors reading a Flamewire.
#[derive(Debug, thiserror::Error)]
pub enum FlamewireError {
    /// The bytes are not a valid archive.
    #[error("flamewire archive is invalid: {0}")]
    Invalid(String),
    /// A version this build does not read.
    #[error(
        "flamewire version {0} is not supported (this build reads version {FLAMEWIRE_VERSION})"
    )]
    UnsupportedVersion(u32),
    /// An index points outside its table, or the tree structure is broken.
    #[error("flamewire is inconsistent: {0}")]
    Inconsistent(&'static str),
}

/// Validates `bytes` and returns the archived graph without copying it.
/// `bytes` must be aligned to 8 (an `rkyv::util::AlignedVec`, or a `Vec`
/// copied into one).
pub fn access(bytes: &[u8]) -> Result<&ArchivedFlamewire, FlamewireError> {
    let graph = rkyv::access::<ArchivedFlamewire, rkyv::rancor::Error>(bytes)
        .map_err(|e| FlamewireError::Invalid(e.to_string()))?;
    if graph.version.to_native() != FLAMEWIRE_VERSION {
        return Err(FlamewireError::UnsupportedVersion(
            graph.version.to_native(),
        ));
    }
    graph.check_consistency()?;
    Ok(graph)
}

impl Flamewire {
    /// The rkyv archive of this graph.
    pub fn to_bytes(&self) -> rkyv::util::AlignedVec {
        rkyv::to_bytes::<rkyv::rancor::Error>(self)
            .expect("serializing a flamegraph into memory cannot fail")
    }
}

impl ArchivedFlamewire {
    /// Checks every index so that readers can index without checks failing.
    fn check_consistency(&self) -> Result<(), FlamewireError> {
        let strings = self.strings.len() as u32;
        let frames = self.frames.len() as u32;
        let columns = &self.nodes;
        let nodes = columns.frame.len();
        if strings == 0 || frames == 0 || nodes == 0 {
            return Err(FlamewireError::Inconsistent(
                "empty string, frame or node table",
            ));
        }
        let lengths = [
            columns.total.len(),
            columns.self_count.len(),
            columns.depth.len(),
            columns.skip.len(),
        ];
        if lengths.iter().any(|&n| n != nodes) {
            return Err(FlamewireError::Inconsistent(
                "node columns differ in length",
            ));
        }
        for f in self.frames.iter() {
            if [f.name, f.module, f.file]
                .iter()
                .any(|s| s.to_native() >= strings)
            {
                return Err(FlamewireError::Inconsistent("frame names a missing string"));
            }
        }
        for i in 0..nodes {
            if columns.frame[i].to_native() >= frames {
                return Err(FlamewireError::Inconsistent("node names a missing frame"));
            }
            let skip = columns.skip[i].to_native() as usize;
            if skip == 0 || i + skip > nodes {
                return Err(FlamewireError::Inconsistent(
                    "node subtree runs past the end",
                ));
            }
            if i > 0 && columns.depth[i].to_native() == 0 {
                return Err(FlamewireError::Inconsistent("more than one root"));
            }
        }
        if columns.skip[0].to_native() as usize != nodes {
            return Err(FlamewireError::Inconsistent(
                "root does not span every node",
            ));
        }
        Ok(())
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.frame.len()
    }

    /// Node `i`, gathered from the columns.
    pub fn node(&self, i: usize) -> Node {
        let n = &self.nodes;
        Node {
            total: n.total[i].to_native(),
            self_count: n.self_count[i].to_native(),
            frame: n.frame[i].to_native(),
            depth: n.depth[i].to_native(),
            skip: n.skip[i].to_native(),
        }
    }

    /// String `i`.
    pub fn string(&self, i: u32) -> &str {
        self.strings[i as usize].as_str()
    }

    /// The frame of node `i`.
    pub fn node_frame(&self, i: usize) -> &ArchivedWireFrame {
        &self.frames[self.nodes.frame[i].to_native() as usize]
    }

    /// The function name of node `i`.
    pub fn node_name(&self, i: usize) -> &str {
        self.string(self.node_frame(i).name.to_native())
    }

    /// Indices of node `i`'s children.
    pub fn children(&self, i: usize) -> Children<'_> {
        Children {
            graph: self,
            next: i + 1,
            end: i + self.nodes.skip[i].to_native() as usize,
        }
    }

    /// Writes the graph as nested JSON (`{"name","kind","module","file",
    /// "line","value","self","children"}` per node, the d3-flamegraph
    /// shape; module, file and line only when known), iteratively
    /// so that deep stacks cannot overflow the call stack.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        let mut open = 0usize;
        let mut need_comma = false;
        for i in 0..self.node_count() {
            let node = self.node(i);
            let depth = node.depth as usize;
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
                node.total, node.self_count
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
        let mut path: Vec<&str> = Vec::new();
        for i in 1..self.node_count() {
            let node = self.node(i);
            let depth = node.depth as usize;
            path.truncate(depth - 1);
            path.push(self.node_name(i));
            if node.self_count != 0 {
                writeln!(out, "{} {}", path.join(";"), node.self_count)?;
            }
        }
        Ok(())
    }
}

/// Iterator over a node's children.
#[derive(Debug)]
pub struct Children<'a> {
    graph: &'a ArchivedFlamewire,
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
        self.next += self.graph.nodes.skip[i].to_native() as usize;
        Some(i)
    }
}

fn write_json_str(out: &mut impl Write, s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *out, s).map_err(io::Error::other)
}

/// Builds a [`Flamewire`] from stacks, merging common prefixes.
///
/// Built for a million nodes (the query API's largest graphs): strings and
/// frames are interned once; stacks go into a trie whose nodes live in one
/// vector and whose edges are found through one hash map keyed by (parent,
/// frame) with a fast non-cryptographic hasher (the keys are our own
/// indices, not attacker-chosen strings); [`add_stack`](Self::add_stack)
/// only adds the count to the leaf, and totals are summed once in
/// [`finish`](Self::finish), which also ranks the frames by name once and
/// then orders every node's children by those ranks (integers) instead of
/// comparing strings per node.
#[derive(Debug)]
pub struct FlamewireBuilder {
    strings: Vec<String>,
    string_index: FastMap<String, u32>,
    frames: Vec<WireFrame>,
    frame_index: FastMap<WireFrame, u32>,
    trie: Vec<TrieNode>,
    /// `(parent << 32) | frame` → child.
    edges: FastMap<u64, u32>,
}

/// A `HashMap` with foldhash: several times faster than SipHash on the
/// small keys interned here.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Clone, Copy)]
struct TrieNode {
    frame: u32,
    parent: u32,
    self_count: u64,
    first_child: u32,
    next_sibling: u32,
}

const NONE: u32 = u32::MAX;

impl Default for FlamewireBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FlamewireBuilder {
    /// An empty graph (just the root).
    pub fn new() -> Self {
        let mut b = Self {
            strings: Vec::new(),
            string_index: FastMap::default(),
            frames: Vec::new(),
            frame_index: FastMap::default(),
            trie: Vec::new(),
            edges: FastMap::default(),
        };
        b.intern_string("");
        let root = b.intern(FlameFrame::new(FrameKind::Label, ROOT_NAME));
        b.trie.push(TrieNode {
            frame: root,
            parent: NONE,
            self_count: 0,
            first_child: NONE,
            next_sibling: NONE,
        });
        b
    }

    fn intern_string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.string_index.insert(s.to_owned(), i);
        i
    }

    /// Interns a frame and returns its index for [`add_stack`](Self::add_stack).
    pub fn intern(&mut self, frame: FlameFrame<'_>) -> u32 {
        let wire = WireFrame {
            kind: frame.kind,
            name: self.intern_string(frame.name),
            module: frame.module.map_or(0, |m| self.intern_string(m)),
            file: frame.file.map_or(0, |f| self.intern_string(f)),
            line: frame.line,
        };
        if let Some(&i) = self.frame_index.get(&wire) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frames.push(wire);
        self.frame_index.insert(wire, i);
        i
    }

    /// Adds `count` samples of the stack `frames` (interned indices, root
    /// first).
    pub fn add_stack(&mut self, frames: &[u32], count: u64) {
        let mut at = 0u32;
        for &frame in frames {
            let key = (u64::from(at) << 32) | u64::from(frame);
            let next = self.trie.len() as u32;
            at = *self.edges.entry(key).or_insert_with(|| {
                let parent = &mut self.trie[at as usize];
                let sibling = std::mem::replace(&mut parent.first_child, next);
                self.trie.push(TrieNode {
                    frame,
                    parent: at,
                    self_count: 0,
                    first_child: NONE,
                    next_sibling: sibling,
                });
                next
            });
        }
        self.trie[at as usize].self_count += count;
    }

    /// Number of nodes so far, the root included.
    pub fn node_count(&self) -> usize {
        self.trie.len()
    }

    /// The finished graph.
    pub fn finish(self, meta: FlameMeta) -> Flamewire {
        // Totals: a child is always created after its parent, so one pass
        // from the last node back sums every subtree.
        let mut totals: Vec<u64> = self.trie.iter().map(|t| t.self_count).collect();
        for (i, t) in self.trie.iter().enumerate().skip(1).rev() {
            totals[t.parent as usize] += totals[i];
        }
        let rank = self.frame_ranks();
        let mut nodes = Nodes::with_capacity(self.trie.len());
        // Explicit stack: deep stacks must not overflow the call stack.
        let mut todo: Vec<(u32, u32)> = vec![(0, 0)];
        let mut children = Vec::new();
        while let Some((at, depth)) = todo.pop() {
            let t = self.trie[at as usize];
            nodes.push(Node {
                total: totals[at as usize],
                self_count: t.self_count,
                frame: t.frame,
                depth,
                skip: 1,
            });
            children.clear();
            let mut c = t.first_child;
            while c != NONE {
                children.push(c);
                c = self.trie[c as usize].next_sibling;
            }
            // Descending, so that they pop in ascending order.
            children.sort_unstable_by_key(|&c| {
                std::cmp::Reverse(rank[self.trie[c as usize].frame as usize])
            });
            todo.extend(children.iter().map(|&c| (c, depth + 1)));
        }
        fill_skips(&mut nodes);
        Flamewire {
            version: FLAMEWIRE_VERSION,
            meta,
            strings: self.strings,
            frames: self.frames,
            nodes,
        }
    }

    /// Each frame's position when frames are ordered as siblings are shown:
    /// by name, then kind, module, line (and index, so the order is total).
    fn frame_ranks(&self) -> Vec<u32> {
        let key = |frame: u32| {
            let f = &self.frames[frame as usize];
            (
                self.strings[f.name as usize].as_str(),
                f.kind as u8,
                self.strings[f.module as usize].as_str(),
                f.line,
                frame,
            )
        };
        let mut order: Vec<u32> = (0..self.frames.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
        let mut rank = vec![0u32; order.len()];
        for (position, &frame) in order.iter().enumerate() {
            rank[frame as usize] = position as u32;
        }
        rank
    }
}

/// Sets each node's `skip` from the depths: a subtree is the node and the
/// run of deeper nodes after it.
fn fill_skips(nodes: &mut Nodes) {
    // Stack of indices of nodes whose subtree is still open.
    let mut open: Vec<usize> = Vec::new();
    for i in 0..nodes.len() {
        let depth = nodes.depth[i];
        while let Some(&top) = open.last() {
            if nodes.depth[top] >= depth {
                nodes.skip[top] = (i - top) as u32;
                open.pop();
            } else {
                break;
            }
        }
        open.push(i);
    }
    let n = nodes.len();
    for top in open {
        nodes.skip[top] = (n - top) as u32;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn build(stacks: &[(Vec<&str>, u64)]) -> rkyv::util::AlignedVec {
        let mut b = FlamewireBuilder::new();
        for (names, count) in stacks {
            let ids: Vec<u32> = names
                .iter()
                .map(|n| b.intern(FlameFrame::new(FrameKind::Native, n)))
                .collect();
            b.add_stack(&ids, *count);
        }
        b.finish(FlameMeta::default()).to_bytes()
    }

    #[test]
    fn merges_common_prefixes_and_orders_children_by_name() {
        let bytes = build(&[
            (vec!["main", "b"], 2),
            (vec!["main", "a"], 3),
            (vec!["main"], 1),
            (vec!["other"], 4),
        ]);
        let g = access(&bytes).unwrap();
        let names: Vec<&str> = (0..g.node_count()).map(|i| g.node_name(i)).collect();
        assert_eq!(names, ["all", "main", "a", "b", "other"]);
        assert_eq!(g.node(0).total, 10);
        assert_eq!(g.node(1).total, 6);
        assert_eq!(g.node(1).self_count, 1);
        assert_eq!(g.node(1).skip, 3);
        assert_eq!(g.children(0).collect::<Vec<_>>(), [1, 4]);
        assert_eq!(g.children(1).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn collapsed_output_lists_each_stack_once() {
        let bytes = build(&[
            (vec!["main", "b"], 2),
            (vec!["main"], 1),
            (vec!["main", "b"], 5),
        ]);
        let mut out = Vec::new();
        access(&bytes).unwrap().write_collapsed(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "main 1\nmain;b 7\n");
    }

    #[test]
    fn json_output_nests_children() {
        let bytes = build(&[(vec!["m\"x", "b"], 2)]);
        let mut out = Vec::new();
        access(&bytes).unwrap().write_json(&mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["value"], 2);
        assert_eq!(v["children"][0]["name"], "m\"x");
        assert_eq!(v["children"][0]["children"][0]["name"], "b");
        assert_eq!(v["children"][0]["children"][0]["self"], 2);
    }

    #[test]
    fn deep_stacks_do_not_overflow() {
        let names: Vec<String> = (0..100_000).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let bytes = build(&[(refs, 1)]);
        let g = access(&bytes).unwrap();
        assert_eq!(g.node_count(), 100_001);
        let mut out = Vec::new();
        g.write_json(&mut out).unwrap();
    }

    #[test]
    fn corrupt_archives_are_refused() {
        assert!(access(&rkyv::util::AlignedVec::<16>::new()).is_err());
        let mut wire = FlamewireBuilder::new().finish(FlameMeta::default());
        wire.nodes.skip[0] = 5;
        assert!(matches!(
            access(&wire.to_bytes()),
            Err(FlamewireError::Inconsistent(_))
        ));
        wire.nodes.skip[0] = 1;
        wire.nodes.total.push(1);
        assert!(matches!(
            access(&wire.to_bytes()),
            Err(FlamewireError::Inconsistent(_))
        ));
        wire.nodes.total.pop();
        wire.version = 99;
        assert!(matches!(
            access(&wire.to_bytes()),
            Err(FlamewireError::UnsupportedVersion(99))
        ));
    }

    fn arb_stacks() -> impl Strategy<Value = Vec<(Vec<u8>, u64)>> {
        prop::collection::vec((prop::collection::vec(0u8..6, 0..8), 1u64..100), 0..40)
    }

    proptest! {
        /// The archive round-trips, and the tree holds exactly the input:
        /// collapsing it gives back the summed stacks.
        #[test]
        fn round_trip_preserves_stack_counts(stacks in arb_stacks()) {
            let mut b = FlamewireBuilder::new();
            let mut expected = std::collections::BTreeMap::<String, u64>::new();
            for (path, count) in &stacks {
                let names: Vec<String> = path.iter().map(|n| format!("f{n}")).collect();
                let ids: Vec<u32> = names.iter()
                    .map(|n| b.intern(FlameFrame::new(FrameKind::Native, n)))
                    .collect();
                b.add_stack(&ids, *count);
                if !names.is_empty() {
                    *expected.entry(names.join(";")).or_default() += count;
                }
            }
            let wire = b.finish(FlameMeta { from_ns: 1, to_ns: 2, ns_per_count: 3 });
            let bytes = wire.to_bytes();
            let g = access(&bytes).unwrap();
            let back: Flamewire = rkyv::deserialize::<Flamewire, rkyv::rancor::Error>(g).unwrap();
            prop_assert_eq!(&back, &wire);
            let mut out = Vec::new();
            g.write_collapsed(&mut out).unwrap();
            let mut got = std::collections::BTreeMap::<String, u64>::new();
            for line in String::from_utf8(out).unwrap().lines() {
                let (stack, n) = line.rsplit_once(' ').unwrap();
                got.insert(stack.to_owned(), n.parse().unwrap());
            }
            prop_assert_eq!(got, expected);
            let total: u64 = stacks.iter().map(|s| s.1).sum();
            prop_assert_eq!(g.node(0).total, total);
        }

        /// Guards the reader: arbitrary bytes give an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
            let mut aligned = rkyv::util::AlignedVec::<16>::new();
            aligned.extend_from_slice(&bytes);
            let _ = access(&aligned);
        }
    }
}
