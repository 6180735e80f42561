//! The query API's flamegraph build at about a million nodes: resolved
//! stacks (frame ids with sample counts, and each frame's labels, as the
//! resolver hands them to the view) to a `Flamewire`, by
//! `kiln_actors::query::flamegraph_of`, against what the query API did
//! before (`baseline` below: expand every stack into its labels, then
//! build), on the same stacks in the same run. Both results are compared
//! node by node first.
//!
//! `cargo run --release -p kiln-load-tests --bin graph_bench -- --nodes 1000000`

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use kiln_actors::query::{FrameLabel, Granularity, flamegraph_of};
use kiln_load_tests::report::Report;
use kiln_load_tests::synth::CallGraph;
use kiln_model::flamewire::{FlameFrame, FlameMeta, FlamewireBuilder, read};
use kiln_model::{FrameId, FrameKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Parser)]
#[command(about = "Flamegraph build from resolved stacks: new against the previous algorithm")]
struct Args {
    /// Nodes in the flamegraph (stacks are added until it has this many).
    #[arg(long, default_value_t = 1_000_000)]
    nodes: usize,
    /// Functions in the synthetic call graph.
    #[arg(long, default_value_t = 50_000)]
    functions: usize,
    /// Timed runs of each algorithm; the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() {
    let args = Args::parse();
    let mut rng = StdRng::seed_from_u64(args.seed);
    let graph = CallGraph::new(args.functions, 200, 8, &mut rng);
    // One label per function, shared by every stack that has it, as the
    // resolver's frame cache shares them.
    let frame_ids: Vec<FrameId> = (0..args.functions).map(|_| FrameId(rng.random())).collect();
    let labels: HashMap<FrameId, Arc<[Arc<FrameLabel>]>> = (0..args.functions as u32)
        .map(|f| {
            let name = graph.name(f).to_owned();
            let module = name.split("::").nth(1).map(|m| format!("lib{m}.so"));
            let label = Arc::new(FrameLabel {
                kind: FrameKind::Native,
                name,
                module,
                file: None,
                line: 0,
            });
            (frame_ids[f as usize], Arc::new([label]) as Arc<[_]>)
        })
        .collect();

    let mut stacks: Vec<(Vec<FrameId>, u64)> = Vec::new();
    let mut probe = FlamewireBuilder::new();
    let ids: Vec<u32> = (0..args.functions as u32)
        .map(|f| probe.intern(FlameFrame::new(FrameKind::Native, graph.name(f))))
        .collect();
    while probe.node_count() < args.nodes {
        let walk = graph.walk(rng.random_range(8..=64), &mut rng);
        let count = rng.random_range(1..=1000);
        probe.add_stack(
            &walk.iter().map(|&f| ids[f as usize]).collect::<Vec<_>>(),
            count,
        );
        stacks.push((walk.iter().map(|&f| frame_ids[f as usize]).collect(), count));
    }
    let frames: usize = stacks.iter().map(|(s, _)| s.len()).sum();
    println!(
        "graph_bench: {} stacks, {frames} frames, {} nodes",
        stacks.len(),
        probe.node_count()
    );

    let new = || {
        flamegraph_of(
            stacks.iter().map(|(s, n)| (s.as_slice(), *n)),
            |frame| &labels[frame],
            FlameMeta::default(),
            // The baseline kept a node per line.
            Granularity::Line,
        )
    };
    let old = || baseline::flamegraph(&stacks, &labels);

    // Same graph, node for node, before anything is timed.
    let bytes = new().to_bytes();
    let reference = old();
    let node_count = read(&bytes, |wire| {
        assert_eq!(wire.node_count(), reference.nodes.len(), "node counts");
        for (i, expected) in reference.nodes.iter().enumerate() {
            let node = wire.node(i);
            let got = (
                node.total,
                node.self_count,
                node.depth,
                node.skip,
                wire.node_name(i),
            );
            let want = (
                expected.total,
                expected.self_count,
                expected.depth,
                expected.skip,
                reference.strings[reference.frames[expected.frame as usize].name as usize].as_str(),
            );
            assert_eq!(got, want, "node {i}");
        }
        wire.node_count()
    })
    .expect("a valid flamewire");

    // Interleaved, so that both see the same machine state.
    let (mut old_times, mut new_times) = (Vec::new(), Vec::new());
    for _ in 0..args.runs.max(1) {
        old_times.push(timed(|| drop(old())));
        new_times.push(timed(|| drop(new())));
    }
    let (old_ms, new_ms) = (median(old_times), median(new_times));
    let mut report = Report::default();
    report.add("stacks", stacks.len() as f64, "stacks");
    report.add("frames (stack entries)", frames as f64, "frames");
    report.add("nodes", node_count as f64, "nodes");
    report.time("baseline build (previous algorithm)", old_ms);
    report.time("build (flamegraph_of)", new_ms);
    report.add(
        "speed-up (baseline / new)",
        old_ms.as_secs_f64() / new_ms.as_secs_f64(),
        "x",
    );
    report.finish("graph");
}

fn timed(f: impl FnOnce()) -> Duration {
    let started = Instant::now();
    f();
    started.elapsed()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The graph build before issue 5, kept as the benchmark's baseline: every
/// stack expanded into its frames' labels (as the resolver did), every
/// label of every stack interned by its strings (SipHash maps), a trie
/// whose edges sit in a SipHash map keyed by (parent, frame) and whose
/// totals are updated along every added path, and each node's children
/// sorted by comparing names when flattening. It yields plain node records
/// (not a `Flamewire`), so that it does not depend on the wire layout.
mod baseline {
    use std::collections::HashMap;
    use std::sync::Arc;

    use kiln_actors::query::FrameLabel;
    use kiln_model::flamewire::{Node, ROOT_NAME, WireFrame};
    use kiln_model::{FrameId, FrameKind};

    /// What the old builder produced, by field.
    pub(crate) struct Graph {
        pub strings: Vec<String>,
        pub frames: Vec<WireFrame>,
        pub nodes: Vec<Node>,
    }

    pub(crate) fn flamegraph(
        stacks: &[(Vec<FrameId>, u64)],
        labels: &HashMap<FrameId, Arc<[Arc<FrameLabel>]>>,
    ) -> Graph {
        let expanded: Vec<(Vec<Arc<FrameLabel>>, u64)> = stacks
            .iter()
            .map(|(frames, count)| {
                let labels = frames
                    .iter()
                    .flat_map(|f| labels[f].iter().cloned())
                    .collect();
                (labels, *count)
            })
            .collect();
        let mut builder = Builder::new();
        let mut indices = Vec::new();
        for (labels, count) in &expanded {
            let count = *count;
            indices.clear();
            for label in labels {
                indices.push(builder.intern(
                    label.kind,
                    &label.name,
                    label.module.as_deref(),
                    label.file.as_deref(),
                    label.line,
                ));
            }
            builder.add_stack(&indices, count);
        }
        builder.finish()
    }

    struct Builder {
        strings: Vec<String>,
        string_index: HashMap<String, u32>,
        frames: Vec<WireFrame>,
        frame_index: HashMap<WireFrame, u32>,
        trie: Vec<TrieNode>,
        child_index: HashMap<(u32, u32), u32>,
    }

    #[derive(Clone, Copy)]
    struct TrieNode {
        frame: u32,
        total: u64,
        self_count: u64,
        first_child: u32,
        next_sibling: u32,
    }

    const NONE: u32 = u32::MAX;

    impl Builder {
        fn new() -> Self {
            let mut b = Self {
                strings: Vec::new(),
                string_index: HashMap::new(),
                frames: Vec::new(),
                frame_index: HashMap::new(),
                trie: Vec::new(),
                child_index: HashMap::new(),
            };
            b.intern_string("");
            let root = b.intern(FrameKind::Label, ROOT_NAME, None, None, 0);
            b.trie.push(TrieNode {
                frame: root,
                total: 0,
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

        fn intern(
            &mut self,
            kind: FrameKind,
            name: &str,
            module: Option<&str>,
            file: Option<&str>,
            line: u32,
        ) -> u32 {
            let wire = WireFrame {
                kind,
                name: self.intern_string(name),
                module: module.map_or(0, |m| self.intern_string(m)),
                file: file.map_or(0, |f| self.intern_string(f)),
                line,
            };
            if let Some(&i) = self.frame_index.get(&wire) {
                return i;
            }
            let i = self.frames.len() as u32;
            self.frames.push(wire);
            self.frame_index.insert(wire, i);
            i
        }

        fn add_stack(&mut self, frames: &[u32], count: u64) {
            let mut at = 0u32;
            self.trie[0].total += count;
            for &frame in frames {
                at = match self.child_index.get(&(at, frame)) {
                    Some(&child) => child,
                    None => {
                        let child = self.trie.len() as u32;
                        let parent = &mut self.trie[at as usize];
                        let sibling = parent.first_child;
                        parent.first_child = child;
                        self.trie.push(TrieNode {
                            frame,
                            total: 0,
                            self_count: 0,
                            first_child: NONE,
                            next_sibling: sibling,
                        });
                        self.child_index.insert((at, frame), child);
                        child
                    }
                };
                self.trie[at as usize].total += count;
            }
            self.trie[at as usize].self_count += count;
        }

        fn finish(self) -> Graph {
            let sort_key = |frame: u32| {
                let f = &self.frames[frame as usize];
                (
                    self.strings[f.name as usize].as_str(),
                    f.kind as u8,
                    self.strings[f.module as usize].as_str(),
                    f.line,
                    frame,
                )
            };
            let mut nodes = Vec::with_capacity(self.trie.len());
            let mut todo: Vec<(u32, u32)> = vec![(0, 0)];
            let mut children = Vec::new();
            while let Some((at, depth)) = todo.pop() {
                let t = self.trie[at as usize];
                nodes.push(Node {
                    total: t.total,
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
                children.sort_by(|a, b| {
                    sort_key(self.trie[*a as usize].frame)
                        .cmp(&sort_key(self.trie[*b as usize].frame))
                });
                todo.extend(children.iter().rev().map(|&c| (c, depth + 1)));
            }
            // Skips from the depths.
            let mut open: Vec<usize> = Vec::new();
            for i in 0..nodes.len() {
                while let Some(&top) = open.last() {
                    if nodes[top].depth >= nodes[i].depth {
                        nodes[top].skip = (i - top) as u32;
                        open.pop();
                    } else {
                        break;
                    }
                }
                open.push(i);
            }
            let n = nodes.len();
            for top in open {
                nodes[top].skip = (n - top) as u32;
            }
            Graph {
                strings: self.strings,
                frames: self.frames,
                nodes,
            }
        }
    }
}
