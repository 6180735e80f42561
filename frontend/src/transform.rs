//! Rewrites of a flamegraph the user asks for: collapse recursion, hide
//! frames, merge runs of frames. Each builds a new graph from the stacks
//! of the fetched one; without any rewrite the fetched graph is shown as is.

use kiln_model::FrameKind;
use kiln_model::flamewire::{FlameFrame, FlameMeta, FlamewireBuilder};
use regex::Regex;

use crate::graph::Graph;

/// The rewrites to apply, in this order: hide, merge, collapse recursion.
#[derive(Debug, Clone, Default)]
pub struct Rewrites {
    /// Frames whose function or binary matches are dropped from stacks
    /// (their samples go to the caller).
    pub hide: Option<Regex>,
    /// Runs of adjacent frames whose function or binary matches become one
    /// frame, named `[binary]` (`[pattern]` when the binary is unknown).
    pub merge: Option<Regex>,
    /// A frame calling itself directly shows once.
    pub collapse_recursion: bool,
}

impl Rewrites {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.hide.is_none() && self.merge.is_none() && !self.collapse_recursion
    }

    /// The rewritten graph.
    pub fn apply(&self, graph: &Graph) -> Graph {
        let wire = graph.wire();
        let mut builder = FlamewireBuilder::new();
        let mut interned: Vec<Option<u32>> = vec![None; wire.frames.len()];
        let mut path: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = Vec::new();
        for i in 1..graph.node_count() {
            path.truncate(graph.depth(i) as usize - 1);
            path.push(graph.frame(i));
            let self_count = graph.self_count(i);
            if self_count == 0 {
                continue;
            }
            stack.clear();
            let mut merging = false;
            for &frame in &path {
                let (name, module) = frame_strings(graph, frame);
                let matches = |re: &Option<Regex>| {
                    re.as_ref().is_some_and(|re| {
                        re.is_match(name) || (!module.is_empty() && re.is_match(module))
                    })
                };
                if matches(&self.hide) {
                    continue;
                }
                if let Some(merge) = self.merge.as_ref().filter(|_| matches(&self.merge)) {
                    if !merging {
                        let label = if module.is_empty() {
                            format!("[{}]", merge.as_str())
                        } else {
                            format!("[{module}]")
                        };
                        let kind = FrameKind::from(&wire.frames[frame as usize].kind);
                        let merged = FlameFrame {
                            module: (!module.is_empty()).then_some(module),
                            ..FlameFrame::new(kind, &label)
                        };
                        stack.push(builder.intern(merged));
                        merging = true;
                    }
                    continue;
                }
                merging = false;
                let id = *interned[frame as usize]
                    .get_or_insert_with(|| builder.intern(owned_frame(graph, frame)));
                if self.collapse_recursion && stack.last() == Some(&id) {
                    continue;
                }
                stack.push(id);
            }
            builder.add_stack(&stack, self_count);
        }
        Graph::from_wire(&builder.finish(meta_of(graph)))
    }
}

/// The metadata of `graph`, unarchived.
pub(crate) fn meta_of(graph: &Graph) -> FlameMeta {
    let meta = &graph.wire().meta;
    FlameMeta {
        from_ns: meta.from_ns.to_native(),
        to_ns: meta.to_ns.to_native(),
        ns_per_count: meta.ns_per_count.to_native(),
    }
}

/// Function name and binary of frame `frame`.
pub(crate) fn frame_strings(graph: &Graph, frame: u32) -> (&str, &str) {
    let wire = graph.wire();
    let f = &wire.frames[frame as usize];
    (
        wire.string(f.name.to_native()),
        wire.string(f.module.to_native()),
    )
}

/// Frame `frame` of `graph`, ready to intern into another graph.
pub(crate) fn owned_frame(graph: &Graph, frame: u32) -> FlameFrame<'_> {
    let wire = graph.wire();
    let f = &wire.frames[frame as usize];
    let text = |i: u32| (i != 0).then(|| wire.string(i));
    FlameFrame {
        kind: FrameKind::from(&f.kind),
        name: wire.string(f.name.to_native()),
        module: text(f.module.to_native()),
        file: text(f.file.to_native()),
        line: f.line.to_native(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::graph::tests::graph_of;

    /// The graph's stacks as sorted collapsed lines.
    pub(crate) fn collapsed(g: &Graph) -> Vec<String> {
        let mut out = Vec::new();
        g.view().write_collapsed(&mut out).unwrap();
        let mut lines: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn collapse_recursion_folds_direct_self_calls() {
        let g = graph_of("main;walk;walk;walk;leaf 2\nmain;walk 1");
        let rw = Rewrites {
            collapse_recursion: true,
            ..Rewrites::default()
        };
        assert_eq!(
            collapsed(&rw.apply(&g)),
            ["main;walk 1", "main;walk;leaf 2"]
        );
    }

    #[test]
    fn hide_gives_samples_to_the_caller() {
        let g = graph_of("main;lock;spin 3\nmain;work 1");
        let rw = Rewrites {
            hide: Some(Regex::new("^(lock|spin)$").unwrap()),
            ..Rewrites::default()
        };
        assert_eq!(collapsed(&rw.apply(&g)), ["main 3", "main;work 1"]);
    }

    #[test]
    fn merge_folds_a_run_of_matching_frames_into_one() {
        let g = graph_of("main;std::a;std::b;user 2\nmain;std::c 1");
        let rw = Rewrites {
            merge: Some(Regex::new("^std::").unwrap()),
            ..Rewrites::default()
        };
        assert_eq!(
            collapsed(&rw.apply(&g)),
            ["main;[^std::] 1", "main;[^std::];user 2"]
        );
        assert!(!rw.is_empty());
        assert!(Rewrites::default().is_empty());
    }
}
